// The Gloo peer of tutti's tcp benchmark: the same sweep with Gloo's AllreduceRingChunked and
// AllreduceHalvingDoubling over gloo::transport::tcp on loopback, one table per algorithm (the
// header line names it: "# Gloo ring_chunked all_reduce ...", "# Gloo halving_doubling ...").
//   tuttirun --nproc-per-node=2 tutti_peer_gloo_allreduce [-b 8] [-e 67108864] [-f 2] [-t 0.25]
//            [-a all|ring_chunked|halving_doubling] [-c 1] [-s 1]
// -c 1: iterations from the measured warm-up time (allreduce_sweep.hpp); advisable over tcp, where
// the default rule (20000 calls of a small size) makes the sweep last many minutes.
// -s 1: leave SO_SNDBUF to the kernel (see below); the default measures Gloo as shipped.
//
// Ranks: RANK and WORLD_SIZE (as tuttirun sets them). Rendezvous: Gloo's FileStore in
// $TMPDIR/tutti-gloo-<uid>-<job> (job: TUTTI_JOB_ID, else MASTER_PORT), removed by rank 0 once
// every rank is connected. Transport: tcp bound to 127.0.0.1
// (TUTTI_GLOO_HOST overrides).
//
// Gloo's algorithms of this kind are in place and bound to one buffer and count at construction
// (the constructor registers the buffers with the pairs). So one object is made per (buffer,
// size) during the warm-up and reused by the timed calls, and "out of place" is a memcpy into the
// output followed by the in-place algorithm: what a Gloo user has to do.
//
// Gloo is measured as shipped. Worth knowing when reading its figures: its tcp pair sizes
// SO_SNDBUF (setsockopt on the first send, again whenever a larger message comes) to the largest
// message sent so far on that pair, which turns the kernel's send-buffer autotuning off; after a
// small message the buffer is the kernel's minimum (4608 B here). A send buffer no larger than
// the message makes the writer wait for the receiver's ACKs, which loopback TCP may delay (ato
// 40 ms), a likely cause of the isolated slow sizes in its tables. -s 1 drops those setsockopt
// calls (this executable's setsockopt interposes the one libgloo calls) to see Gloo without it.
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <dlfcn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../allreduce_sweep.hpp"

namespace tutti_gloo_peer {
bool drop_sndbuf = false;  // -s 1
}  // namespace tutti_gloo_peer

// Gloo's call is setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size_t, 8); anything else goes through.
extern "C" int setsockopt(int fd, int level, int name, const void* value, socklen_t len) noexcept {
  using fn = int (*)(int, int, int, const void*, socklen_t);
  static const auto next = reinterpret_cast<fn>(::dlsym(RTLD_NEXT, "setsockopt"));
  if (tutti_gloo_peer::drop_sndbuf && level == SOL_SOCKET && name == SO_SNDBUF && len == sizeof(std::size_t)) return 0;
  return next(fd, level, name, value, len);
}

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) throw std::runtime_error(std::string(name) + " is not set (run under tuttirun)");
  return std::atoi(v);
}

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::filesystem::path store_dir() {
  std::string job = env_or("TUTTI_JOB_ID", env_or("MASTER_PORT", ""));
  if (job.empty()) throw std::runtime_error("neither TUTTI_JOB_ID nor MASTER_PORT is set: cannot name the FileStore");
  return std::filesystem::path(env_or("TMPDIR", "/tmp")) / ("tutti-gloo-" + std::to_string(::getuid()) + "-" + job);
}

// One of Gloo's legacy in-place all_reduce algorithms, one object per (buffer, count), kept for
// the current count only (the ring's constructor allocates two inboxes of the whole size).
template <template <class> class Algo>
class cached_allreduce {
 public:
  explicit cached_allreduce(std::shared_ptr<gloo::Context> ctx) : ctx_(std::move(ctx)) {}

  void operator()(const float* in, float* out, std::size_t n) {
    if (in != out) std::memcpy(out, in, n * sizeof(float));
    if (n != count_) {
      by_buffer_.clear();  // every rank has passed the previous size's closing max_of
      count_ = n;
    }
    auto& algo = by_buffer_[out];
    if (!algo) algo = std::make_unique<Algo<float>>(ctx_, std::vector<float*>{out}, static_cast<int>(n));
    algo->run();
  }

 private:
  std::shared_ptr<gloo::Context> ctx_;
  std::size_t count_ = 0;
  std::map<float*, std::unique_ptr<gloo::Algorithm>> by_buffer_;
};

}  // namespace

int main(int argc, char** argv) try {
  const int rank = env_int("RANK"), size = env_int("WORLD_SIZE");
  if (size < 1 || rank < 0 || rank >= size) throw std::runtime_error("bad RANK/WORLD_SIZE");
  const auto opt = tutti_bench::parse(argc, argv);
  std::string which = "all";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "-a") which = argv[i + 1];
    if (std::string(argv[i]) == "-s") tutti_gloo_peer::drop_sndbuf = std::atoi(argv[i + 1]) != 0;
  }
  if (which != "all" && which != "ring_chunked" && which != "halving_doubling")
    throw std::runtime_error("-a: expected all, ring_chunked or halving_doubling, got " + which);

  // Rendezvous through files, then a full mesh of tcp pairs on loopback.
  const auto dir = store_dir();
  std::filesystem::create_directories(dir);  // every rank: FileStore needs the directory to exist
  gloo::transport::tcp::attr attr;
  attr.hostname = env_or("TUTTI_GLOO_HOST", "127.0.0.1");
  attr.ai_family = AF_INET;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(std::chrono::seconds(120));
  {
    gloo::rendezvous::FileStore store(dir.string());
    ctx->connectFullMesh(store, dev);
  }
  auto barrier = [&] {
    gloo::BarrierOptions o(ctx);
    gloo::barrier(o);
  };
  barrier();  // every rank has read every address: the store can go
  if (rank == 0) {
    std::filesystem::remove_all(dir);
    std::printf("# Gloo %d.%d.%d (GLOO_VERSION), tcp transport on %s, FileStore rendezvous, SO_SNDBUF %s\n",
                GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, attr.hostname.c_str(),
                tutti_gloo_peer::drop_sndbuf ? "left to the kernel (-s 1)" : "as Gloo sets it");
  }

  auto max_of = [&](double x) {
    double m = x;
    gloo::AllreduceOptions o(ctx);
    o.setOutput(&m, 1);
    o.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::max<double>));
    gloo::allreduce(o);
    return m;
  };

  if (which == "all" || which == "ring_chunked")
    tutti_bench::run(opt, rank, size, "Gloo ring_chunked",
                     cached_allreduce<gloo::AllreduceRingChunked>(ctx), max_of, barrier);
  if (which == "all" || which == "halving_doubling")
    tutti_bench::run(opt, rank, size, "Gloo halving_doubling",
                     cached_allreduce<gloo::AllreduceHalvingDoubling>(ctx), max_of, barrier);
  barrier();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tutti_peer_gloo_allreduce: %s\n", e.what());
  return 1;
}
