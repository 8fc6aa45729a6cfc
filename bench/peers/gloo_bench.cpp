// The Gloo peer of tutti-bench: every collective Gloo has (all nine), each of its algorithms as
// its own sweep, over gloo::transport::tcp on loopback, with peer_bench.hpp's sizes, timing,
// check and CSV (library gloo, transport tcp).
//   tuttirun --nproc-per-node=3 tutti_peer_gloo_bench --collective all -b 8 -e 1M -c 1 --csv gloo.csv
// Ranks: RANK and WORLD_SIZE (as tuttirun sets them). Rendezvous: Gloo's FileStore in
// $TMPDIR/tutti-gloo-bench-<uid>-<job> (job: TUTTI_JOB_ID, else MASTER_PORT), removed by rank 0 once
// every rank is connected. Transport: tcp bound to 127.0.0.1 (TUTTI_GLOO_HOST overrides).
//
// Algorithms (the --algo names). Gloo has two APIs: the older algorithm classes, bound to their
// buffers and count when constructed (one object is made per buffer and size during the warm-up
// and reused by the timed calls), and the "unbound buffer" functions taking an options object per
// call (the API PyTorch's ProcessGroupGloo uses):
//   broadcast       one_to_all (BroadcastOneToAll), unbound (gloo::broadcast)
//   reduce          unbound (gloo::reduce)
//   all_reduce      ring, ring_chunked, halving_doubling, bcube (AllreduceRing, AllreduceRingChunked,
//                   AllreduceHalvingDoubling, AllreduceBcube), unbound_ring, unbound_bcube
//                   (gloo::allreduce with Algorithm RING, BCUBE). bcube only at a power of two
//                   ranks: at 3 ranks AllreduceBcube returns wrong sums (-c 1 counted them)
//   gather          unbound (gloo::gather)
//   all_gather      ring (AllgatherRing), unbound (gloo::allgather)
//   scatter         unbound (gloo::scatter)
//   all_to_all      unbound (gloo::alltoall)
//   reduce_scatter  halving_doubling (ReduceScatterHalvingDoubling; Gloo has no other)
//   barrier         unbound (gloo::barrier), all_to_all (BarrierAllToAll), all_to_one (BarrierAllToOne)
// Placements. The classes work in place; their out-of-place rows add what a Gloo user has to do:
// a memcpy of the input into the output first (broadcast: at the root), and for reduce_scatter
// a copy of the whole input into a scratch buffer and of the rank's piece out of it. In place,
// ReduceScatterHalvingDoubling leaves a rank's piece at the front of the buffer, as MPI_IN_PLACE
// does (not at rank * count, nccl-tests' layout). The
// unbound functions are out of place; all_reduce, broadcast and all_gather also run in place
// (no input given: Gloo reads the output). AllgatherRing, gather, scatter and all_to_all have no
// in-place form (their rows show "-"). Gloo's reductions here: sum, prod, min, max.
#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/broadcast.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/config.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>

#include "peer_bench.hpp"

namespace {

using tutti_peers::collective;
using tutti_peers::reduce_op;
using reduce_fn = void (*)(void*, const void*, const void*, std::size_t);

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) throw std::runtime_error(std::string(name) + " is not set (run under tuttirun)");
  return std::atoi(v);
}

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

template <class T>
reduce_fn unbound_fn(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return static_cast<reduce_fn>(&gloo::sum<T>);
    case reduce_op::prod: return static_cast<reduce_fn>(&gloo::product<T>);
    case reduce_op::min: return static_cast<reduce_fn>(&gloo::min<T>);
    case reduce_op::max: return static_cast<reduce_fn>(&gloo::max<T>);
  }
  return nullptr;
}

template <class T>
const gloo::ReductionFunction<T>* class_fn(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return gloo::ReductionFunction<T>::sum;
    case reduce_op::prod: return gloo::ReductionFunction<T>::product;
    case reduce_op::min: return gloo::ReductionFunction<T>::min;
    case reduce_op::max: return gloo::ReductionFunction<T>::max;
  }
  return nullptr;
}

class gloo_backend {
 public:
  static constexpr bool reduce_scatter_in_place_at_front = true;  // as MPI_IN_PLACE

  gloo_backend(std::shared_ptr<gloo::Context> ctx) : ctx_(std::move(ctx)), rank_(ctx_->rank), np_(ctx_->size) {}

  const char* library() const { return "gloo"; }
  const char* transport() const { return "tcp"; }

  std::vector<std::string> algorithms(collective c) const {
    switch (c) {
      case collective::broadcast: return {"one_to_all", "unbound"};
      case collective::all_reduce:
        // AllreduceBcube sums wrongly where the ranks are not a power of two (#wrong shows it)
        if ((np_ & (np_ - 1)) != 0) return {"ring", "ring_chunked", "halving_doubling", "unbound_ring", "unbound_bcube"};
        return {"ring", "ring_chunked", "halving_doubling", "bcube", "unbound_ring", "unbound_bcube"};
      case collective::all_gather: return {"ring", "unbound"};
      case collective::reduce_scatter: return {"halving_doubling"};
      case collective::barrier: return {"unbound", "all_to_all", "all_to_one"};
      default: return {"unbound"};
    }
  }

  bool in_place(collective c, const std::string& algo) const {
    switch (c) {
      case collective::gather:
      case collective::scatter:
      case collective::all_to_all: return false;
      case collective::all_gather: return algo == "unbound";
      default: return true;
    }
  }

  template <class T>
  void run(const std::string& algo, const tutti_peers::call<T>& k) {
    const std::size_t n = k.count;
    const bool root = rank_ == k.root;
    T* in = const_cast<T*>(k.in);  // Gloo's setters take non-const pointers; inputs are only read
    switch (k.coll) {
      case collective::broadcast:
        if (algo == "one_to_all") {
          if (!k.in_place && root) std::memcpy(k.out, in, n * sizeof(T));
          bound<T>(algo, k, [&] { return std::make_unique<gloo::BroadcastOneToAll<T>>(ctx_, std::vector<T*>{k.out}, n, k.root); });
        } else {
          gloo::BroadcastOptions o(ctx_);
          if (root && !k.in_place) o.setInput(in, n);
          o.setOutput(k.out, n);
          o.setRoot(k.root);
          gloo::broadcast(o);
        }
        break;
      case collective::reduce: {
        gloo::ReduceOptions o(ctx_);
        o.setInput(in, n);
        o.setOutput(k.out, n);
        o.setRoot(k.root);
        o.setReduceFunction(unbound_fn<T>(k.op));
        gloo::reduce(o);
        break;
      }
      case collective::all_reduce:
        if (algo.rfind("unbound_", 0) == 0) {
          gloo::AllreduceOptions o(ctx_);
          o.setAlgorithm(algo == "unbound_ring" ? gloo::AllreduceOptions::Algorithm::RING
                                                : gloo::AllreduceOptions::Algorithm::BCUBE);
          if (!k.in_place) o.setInput(in, n);
          o.setOutput(k.out, n);
          o.setReduceFunction(unbound_fn<T>(k.op));
          gloo::allreduce(o);
          break;
        }
        if (!k.in_place) std::memcpy(k.out, in, n * sizeof(T));
        bound<T>(algo, k, [&]() -> std::unique_ptr<gloo::Algorithm> {
          const std::vector<T*> ptrs{k.out};
          const int count = static_cast<int>(n);
          if (algo == "ring") return std::make_unique<gloo::AllreduceRing<T>>(ctx_, ptrs, count, class_fn<T>(k.op));
          if (algo == "ring_chunked") return std::make_unique<gloo::AllreduceRingChunked<T>>(ctx_, ptrs, count, class_fn<T>(k.op));
          if (algo == "halving_doubling") return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(ctx_, ptrs, count, class_fn<T>(k.op));
          return std::make_unique<gloo::AllreduceBcube<T>>(ctx_, ptrs, count, class_fn<T>(k.op));
        });
        break;
      case collective::gather: {
        gloo::GatherOptions o(ctx_);
        o.setInput(in, n);
        if (root) o.setOutput(k.out, n * np_);
        o.setRoot(k.root);
        gloo::gather(o);
        break;
      }
      case collective::all_gather:
        if (algo == "ring") {
          bound<T>(algo, k, [&] {
            return std::make_unique<gloo::AllgatherRing<T>>(ctx_, std::vector<const T*>{k.in}, k.out, static_cast<int>(n));
          });
        } else {
          gloo::AllgatherOptions o(ctx_);
          if (!k.in_place) o.setInput(in, n);
          o.setOutput(k.out, n * np_);
          gloo::allgather(o);
        }
        break;
      case collective::scatter: {
        gloo::ScatterOptions o(ctx_);
        if (root) {
          std::vector<T*> pieces(static_cast<std::size_t>(np_));
          for (int r = 0; r < np_; ++r) pieces[static_cast<std::size_t>(r)] = in + static_cast<std::size_t>(r) * n;
          o.setInputs(pieces, n);
        }
        o.setOutput(k.out, n);
        o.setRoot(k.root);
        gloo::scatter(o);
        break;
      }
      case collective::all_to_all: {
        gloo::AlltoallOptions o(ctx_);
        o.setInput(in, n * np_);
        o.setOutput(k.out, n * np_);
        gloo::alltoall(o);
        break;
      }
      case collective::reduce_scatter: {
        // in place on the whole input; each rank's piece ends at its front
        T* work = in;
        if (!k.in_place) {
          if (scratch_.size() < n * np_ * sizeof(T)) {
            cache_.clear();  // objects bound to the old scratch go with it
            scratch_.resize(n * np_ * sizeof(T));
          }
          work = reinterpret_cast<T*>(scratch_.data());
          std::memcpy(work, in, n * np_ * sizeof(T));
        }
        bound<T>(algo, k, [&] {
          return std::make_unique<gloo::ReduceScatterHalvingDoubling<T>>(
              ctx_, std::vector<T*>{work}, static_cast<int>(n * np_), std::vector<int>(static_cast<std::size_t>(np_), static_cast<int>(n)),
              class_fn<T>(k.op));
        });
        if (!k.in_place) std::memcpy(k.out, work, n * sizeof(T));
        break;
      }
      case collective::barrier:
        if (algo == "unbound") {
          gloo::BarrierOptions o(ctx_);
          gloo::barrier(o);
        } else {
          bound<T>(algo, k, [&]() -> std::unique_ptr<gloo::Algorithm> {
            if (algo == "all_to_all") return std::make_unique<gloo::BarrierAllToAll>(ctx_);
            return std::make_unique<gloo::BarrierAllToOne>(ctx_, 0);
          });
        }
        break;
    }
  }

  double max_of(double x) { return reduce_one(x, static_cast<reduce_fn>(&gloo::max<double>)); }
  double sum_of(double x) { return reduce_one(x, static_cast<reduce_fn>(&gloo::sum<double>)); }
  void barrier() {
    gloo::BarrierOptions o(ctx_);
    gloo::barrier(o);
  }

 private:
  double reduce_one(double x, reduce_fn fn) {
    double m = x;
    gloo::AllreduceOptions o(ctx_);
    o.setOutput(&m, 1);
    o.setReduceFunction(fn);
    gloo::allreduce(o);
    return m;
  }

  // One object of Gloo's algorithm classes per (collective, algorithm, input, output, placement)
  // for the current count: made on the first call (in the warm-up), then only run. Objects of the
  // previous count go when the count changes: every rank has passed that size's closing max_of.
  template <class T, class Make>
  void bound(const std::string& algo, const tutti_peers::call<T>& k, Make make) {
    if (k.count != count_ || sizeof(T) != elem_) {
      cache_.clear();
      count_ = k.count;
      elem_ = sizeof(T);
    }
    auto& a = cache_[std::tuple{static_cast<int>(k.coll), algo, static_cast<const void*>(k.in),
                                static_cast<const void*>(k.out), k.in_place}];
    if (!a) a = make();
    a->run();
  }

  std::shared_ptr<gloo::Context> ctx_;
  int rank_, np_;
  std::size_t count_ = 0, elem_ = 0;
  std::map<std::tuple<int, std::string, const void*, const void*, bool>, std::unique_ptr<gloo::Algorithm>> cache_;
  std::vector<unsigned char> scratch_;
};

}  // namespace

int main(int argc, char** argv) {
  int rank = -1;
  try {
    const auto o = tutti_peers::parse(argc, argv);
    rank = env_int("RANK");
    const int size = env_int("WORLD_SIZE");
    if (size < 1 || rank < 0 || rank >= size) throw std::runtime_error("bad RANK/WORLD_SIZE");
    const std::string job = env_or("TUTTI_JOB_ID", env_or("MASTER_PORT", ""));
    if (job.empty()) throw std::runtime_error("neither TUTTI_JOB_ID nor MASTER_PORT is set: cannot name the FileStore");
    const auto dir = std::filesystem::path(env_or("TMPDIR", "/tmp")) /
                     ("tutti-gloo-bench-" + std::to_string(::getuid()) + "-" + job);
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
    gloo_backend b(ctx);
    b.barrier();  // every rank has read every address: the store can go
    if (rank == 0) {
      std::filesystem::remove_all(dir);
      std::fprintf(o.csv == "-" ? stderr : stdout, "# Gloo %d.%d.%d (GLOO_VERSION), tcp transport on %s, FileStore rendezvous\n",
                   GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, attr.hostname.c_str());
    }
    tutti_peers::run_all(o, rank, size, b);
    b.barrier();
    return 0;
  } catch (const tutti_peers::usage_error& e) {
    if (rank <= 0) std::fprintf(stderr, "tutti_peer_gloo_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti_peer_gloo_bench: rank %d: %s\n", rank, e.what());
    return 1;
  }
}
