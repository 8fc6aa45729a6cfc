// Fusion of small non-blocking all_reduces (communicator::fuse), over shm or tcp (see fusion.hpp):
//   tuttirun --nproc-per-node=2 tutti_bench_fusion shm|tcp [-k 256] [-s 4096] [-n 20]
// bench/compare_fusion.sh runs it beside Open MPI's 256 MPI_Iallreduce + MPI_Waitall.
#include <tutti/tutti.hpp>
#if defined(TUTTI_BENCH_HAS_TCP)
#include <tutti/transport/tcp.hpp>
#endif

#include <cstring>
#include <functional>
#include <utility>

#include "fusion.hpp"

template <class Transport>
int measure(int argc, char** argv, const char* name) {
  auto comm = tutti::communicator<Transport>::from_env();
  const auto o = fusion_bench::parse(argc - 1, argv + 1);
  using bufs = std::vector<std::vector<float>>;
  using step = std::function<void(bufs&, std::vector<float>&)>;
  std::vector<std::pair<std::string, step>> cases{
      {"one all_reduce of the whole", [&](bufs&, std::vector<float>& w) { comm.all_reduce(tutti::view(w)); }},
      {"fused iall_reduces + wait_all",
       [&](bufs& b, std::vector<float>&) {
         std::vector<tutti::request> r;
         r.reserve(b.size());
         {
           auto batch = comm.fuse();
           for (auto& x : b) r.push_back(comm.iall_reduce(tutti::view(x)));
         }
         tutti::wait_all(std::span<tutti::request>(r));
       }},
      {"iall_reduces + wait_all (unfused)",
       [&](bufs& b, std::vector<float>&) {
         std::vector<tutti::request> r;
         r.reserve(b.size());
         for (auto& x : b) r.push_back(comm.iall_reduce(tutti::view(x)));
         tutti::wait_all(std::span<tutti::request>(r));
       }},
      {"blocking all_reduces",
       [&](bufs& b, std::vector<float>&) {
         for (auto& x : b) comm.all_reduce(tutti::view(x));
       }},
  };
  fusion_bench::run(
      o, comm.rank(), name, cases,
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
  std::fprintf(stderr, "tutti_bench_fusion: unknown transport '%s' (shm or tcp)\n", which);
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tutti_bench_fusion: %s\n", e.what());
  return 1;
}
