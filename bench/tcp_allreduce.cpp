// all_reduce over tutti::tcp with nccl-tests columns. Run under a launcher:
//   tuttirun --nproc-per-node=2 tutti_bench_tcp_allreduce [-b 8] [-e 67108864] [-f 2] [-t 0.25] [-c 1]
// bench/compare_tcp_gloo.sh runs it beside Gloo and iperf3. TUTTI_ALGO picks a fixed algorithm
// (default: automatic); TUTTI_TCP_STREAMS the connections per peer.
#include <tutti/tutti.hpp>
#include <tutti/transport/tcp.hpp>

#include "allreduce_sweep.hpp"

int main(int argc, char** argv) try {
  auto comm = tutti::communicator<tutti::tcp>::from_env();
  const auto opt = tutti_bench::parse(argc, argv);
  tutti_bench::run(
      opt, comm.rank(), comm.size(), "tutti tcp",
      [&](float* in, float* out, std::size_t n) {
        if (in == out) comm.all_reduce(tutti::view(out, n));
        else comm.all_reduce(tutti::view<const float>(in, n), tutti::view(out, n));
      },
      [&](double x) {
        comm.all_reduce(tutti::view(&x, 1), tutti::op::max{});
        return x;
      },
      [&] { comm.barrier(); });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tutti_bench_tcp_allreduce: %s\n", e.what());
  return 1;
}
