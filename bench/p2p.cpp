// tutti's point-to-point, OSU-style (see p2p.hpp), over shm or tcp, or over two threads:
//   tuttirun --nproc-per-node=2 tutti_bench_p2p [shm|tcp] [--sizes 8,65536] [--rounds 3]
//   tutti_bench_p2p inproc [--sizes 8,65536] [--rounds 3]
// bench/compare_p2p.sh runs it beside Open MPI and MPICH (peers/mpi_p2p.cpp).
#include <tutti/tutti.hpp>
#ifdef TUTTI_BENCH_HAS_TCP
#include <tutti/transport/tcp.hpp>
#endif

#include <cstdio>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "p2p.hpp"

namespace {

template <class Comm>
struct tutti_ops {
  Comm& comm;
  int rank() const { return comm.rank(); }
  void send(char* p, std::size_t n, int peer, int tag) { comm.send(tutti::view(std::span<char>(p, n)), peer, tag); }
  void recv(char* p, std::size_t n, int peer, int tag) { comm.recv(tutti::view(std::span<char>(p, n)), peer, tag); }
  void window(std::vector<std::vector<char>>& bufs, std::size_t n, int peer, int tag, bool send) {
    std::vector<tutti::request> reqs;
    reqs.reserve(bufs.size());
    for (auto& b : bufs) {
      auto v = tutti::view(std::span<char>(b.data(), n));
      reqs.push_back(send ? comm.isend(v, peer, tag) : comm.irecv(v, peer, tag));
    }
    tutti::wait_all(reqs);
  }
  void barrier() { comm.barrier(); }
};

template <class Transport>
void bench(const p2p_bench::options& o, const char* name) {
  auto comm = tutti::communicator<Transport>::from_env();
  tutti_ops<decltype(comm)> ops{comm};
  p2p_bench::run(ops, o, name);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string transport = argc > 1 && argv[1][0] != '-' ? argv[1] : "shm";
  const auto o = p2p_bench::parse(argc, argv);
  if (transport == "shm") {
    bench<tutti::shm>(o, "tutti shm");
  } else if (transport == "inproc") {
    tutti::inproc::run(2, [&](auto& comm) {
      tutti_ops<std::remove_reference_t<decltype(comm)>> ops{comm};
      p2p_bench::run(ops, o, "tutti inproc");
    });
#ifdef TUTTI_BENCH_HAS_TCP
  } else if (transport == "tcp") {
    bench<tutti::tcp>(o, "tutti tcp");
#endif
  } else {
    std::fprintf(stderr, "tutti_bench_p2p: transport shm, tcp or inproc (got '%s')\n", transport.c_str());
    return 2;
  }
  return 0;
}
