// Overlap of tutti's non-blocking all_reduce with work (see overlap.hpp), over shm or tcp:
//   tuttirun --nproc-per-node=2 tutti_bench_overlap shm|tcp [-b 4194304,67108864] [-n 10]
// bench/compare_overlap.sh runs it beside Open MPI's MPI_Iallreduce.
#include <tutti/tutti.hpp>
#if defined(TUTTI_BENCH_HAS_TCP)
#include <tutti/transport/tcp.hpp>
#endif

#include <cstring>

#include "overlap.hpp"

template <class Transport>
int measure(int argc, char** argv, const char* name) {
  auto comm = tutti::communicator<Transport>::from_env();
  const auto o = overlap_bench::parse(argc - 1, argv + 1);
  overlap_bench::run(
      o, comm.rank(), name, [&](float* p, std::size_t n) { return comm.iall_reduce(tutti::view(p, n)); },
      [](tutti::request r) { r.wait(); },
      [&](double x) {
        comm.all_reduce(tutti::view(&x, 1), tutti::op::max{});
        return x;
      },
      [&] { comm.barrier(); });
  return 0;
}

int main(int argc, char** argv) try {
  const char* which = argc > 1 ? argv[1] : "shm";
  if (std::strcmp(which, "shm") == 0) return measure<tutti::shm>(argc, argv, "tutti shm");
#if defined(TUTTI_BENCH_HAS_TCP)
  if (std::strcmp(which, "tcp") == 0) return measure<tutti::tcp>(argc, argv, "tutti tcp");
#endif
  std::fprintf(stderr, "tutti_bench_overlap: unknown transport '%s' (shm or tcp)\n", which);
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tutti_bench_overlap: %s\n", e.what());
  return 1;
}
