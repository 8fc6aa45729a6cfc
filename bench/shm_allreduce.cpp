// all_reduce over tutti::shm with nccl-tests columns. Run under a launcher:
//   tuttirun --nproc-per-node=2 tutti_bench_shm_allreduce [-b 8] [-e 67108864] [-f 2] [-t 0.25] [-z 1]
// -z 1: the buffers come from comm.allocate (shared memory), so inputs are read in place.
// TUTTI_ALGO picks a fixed algorithm (default: automatic: the tuned table, else shared_memory).
#include <tutti/tutti.hpp>

#include "allreduce_sweep.hpp"

int main(int argc, char** argv) try {
  auto comm = tutti::communicator<tutti::shm>::from_env();
  const auto opt = tutti_bench::parse(argc, argv);
  auto sweep = [&](auto make) {
  tutti_bench::run(
      opt, comm.rank(), comm.size(), opt.zero_copy ? "tutti shm (comm.allocate buffers)" : "tutti shm",
      [&](float* in, float* out, std::size_t n) {
        if (in == out) comm.all_reduce(tutti::view(out, n));
        else comm.all_reduce(tutti::view<const float>(in, n), tutti::view(out, n));
      },
      [&](double x) {
        comm.all_reduce(tutti::view(&x, 1), tutti::op::max{});
        return x;
      },
      [&] { comm.barrier(); }, make);
  };
  if (opt.zero_copy) sweep([&](std::size_t n) { return comm.allocate<float>(n); });
  else sweep([](std::size_t n) { return std::vector<float>(n); });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tutti_bench_shm_allreduce: %s\n", e.what());
  return 1;
}
