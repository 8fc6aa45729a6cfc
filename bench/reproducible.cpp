// The price of reproducible reductions: all_reduce of float with plain op::sum (automatic's
// choice), op::ordered<op::sum> and op::reproducible_sum, over shm or tcp (built
// twice: tutti_bench_reproducible_shm, _tcp). Each round times every variant in turn at each
// size (alternating, so that a busy machine slows them alike); the table keeps each variant's
// best round. Run under a launcher:
//   tuttirun --nproc-per-node=4 tutti_bench_reproducible_shm [rounds (3)] [sizes in bytes...]
#include <tutti/tutti.hpp>
#ifdef TUTTI_BENCH_TCP
#include <tutti/transport/tcp.hpp>
using transport = tutti::tcp;
static const char* const transport_name = "tcp";
#else
using transport = tutti::shm;
static const char* const transport_name = "shm";
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace {
using clock_type = std::chrono::steady_clock;

/// Seconds per call of `f`, the slowest rank's, over `iters` calls after one warm-up.
template <class Comm, class F>
double per_call(Comm& comm, int iters, F&& f) {
  f();
  comm.barrier();
  const auto t0 = clock_type::now();
  for (int i = 0; i < iters; ++i) f();
  double s = std::chrono::duration<double>(clock_type::now() - t0).count() / iters;
  comm.all_reduce(tutti::view(&s, 1), tutti::op::max{});
  return s;
}
}  // namespace

int main(int argc, char** argv) try {
  auto comm = tutti::communicator<transport>::from_env();
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  std::vector<std::size_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {std::size_t{1} << 20, std::size_t{64} << 20};
  const char* names[] = {"sum", "ordered<sum>", "reproducible_sum"};
  constexpr int variants = 3;
  if (comm.rank() == 0)
    std::printf("# all_reduce of float over %s, %d ranks, best of %d alternating rounds (us per call)\n",
                transport_name, comm.size(), rounds);
  if (comm.rank() == 0) {
    std::printf("%10s", "bytes");
    for (int v = 0; v < variants; ++v) std::printf(" %18s", names[v]);
    for (int v = 1; v < variants; ++v) std::printf(" %10s", (std::string(v == 1 ? "ord" : "repro") + "/sum").c_str());
    std::printf("\n");
  }
  for (std::size_t bytes : sizes) {
    const std::size_t n = bytes / sizeof(float);
    // Out of place, so that the input stays what it was (in place, repeated sums would grow to
    // infinity, which the reproducible sum takes by a slower path).
    std::vector<float> in(n), buf(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(comm.rank())) % 1000) * 0.001f;
    const auto src = tutti::view(std::as_const(in));
    // About 0.3 s per variant and round, from a first call of the plain sum.
    const auto t0 = clock_type::now();
    comm.all_reduce(src, tutti::view(buf), tutti::op::sum{});
    double first = std::chrono::duration<double>(clock_type::now() - t0).count();
    comm.all_reduce(tutti::view(&first, 1), tutti::op::max{});
    const int iters = std::max(3, std::min(2000, static_cast<int>(0.3 / std::max(first, 1e-6))));
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; ++r) {
      best[0] = std::min(best[0], per_call(comm, iters, [&] { comm.all_reduce(src, tutti::view(buf), tutti::op::sum{}); }));
      best[1] = std::min(best[1], per_call(comm, iters, [&] { comm.all_reduce(src, tutti::view(buf), tutti::op::ordered_sum{}); }));
      best[2] = std::min(best[2], per_call(comm, iters, [&] { comm.all_reduce(src, tutti::view(buf), tutti::op::reproducible_sum{}); }));
    }
    if (comm.rank() == 0) {
      std::printf("%10zu", bytes);
      for (int v = 0; v < variants; ++v) std::printf(" %18.1f", best[v] * 1e6);
      for (int v = 1; v < variants; ++v) std::printf(" %10.2f", best[v] / best[0]);
      std::printf("\n");
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tutti_bench_reproducible: %s\n", e.what());
  return 1;
}
