// Hierarchical against flat collectives across hosts, and against the bound of the link:
//   tuttirun --nnodes=H ... tutti_bench_hierarchy --rate-gbit R [-b 67108864] [-n 5]
// every rank of a hierarchy<shm, tcp> job; bench/compare_hierarchy.sh runs it on hosts made of
// network namespaces behind shaped veth links, with R measured by iperf3 on the same link.
// For each collective (all_reduce, all_gather, reduce_scatter; -b bytes: the all_reduce buffer,
// all_gather's output, reduce_scatter's input) the hierarchical and the flat (tcp, world)
// calls alternate, n rounds, and the best of each is printed beside the bound: the bytes each
// host must send (or receive) across its link, 2 (H-1)/H of the buffer for all_reduce and
// (H-1)/H for all_gather and reduce_scatter, at R.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tutti/group/hierarchy.hpp>
#include <tutti/transport/shm.hpp>
#include <tutti/transport/tcp.hpp>
#include <vector>

namespace {
double seconds_of(auto& world, auto&& call) {
  world.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  call();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  world.all_reduce(tutti::view(&s, 1), tutti::op::max{});  // the slowest rank's time
  return s;
}
}  // namespace

int main(int argc, char** argv) try {
  double rate_gbit = 0;
  std::size_t bytes = std::size_t{64} << 20;
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rate-gbit")) rate_gbit = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "-b")) bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "-n")) rounds = std::atoi(argv[i + 1]);
    else throw std::runtime_error(std::string("unknown option ") + argv[i]);
  }
  auto h = tutti::hierarchy<tutti::shm, tutti::tcp>::from_env();
  auto& world = h.world();
  const int p = h.size(), H = h.hosts();
  const std::size_t n = bytes / sizeof(float) / static_cast<std::size_t>(p) * static_cast<std::size_t>(p);
  const std::size_t blk = n / static_cast<std::size_t>(p);
  std::vector<float> a(n, 1.0f), full(n), part(blk);
  if (h.rank() == 0) {
    std::printf("# %s\n", h.layout().c_str());
    std::printf("# %d ranks on %d hosts, %zu bytes, best of %d alternating rounds, link %.3f Gbit/s (iperf3)\n", p, H,
                n * sizeof(float), rounds, rate_gbit);
    std::printf("# %-15s %12s %12s %12s %10s %12s\n", "collective", "hier (ms)", "flat (ms)", "bound (ms)", "hier/flat",
                "bound/hier");
  }
  struct row {
    const char* name;
    double factor;  // of the buffer each host must move across its link
  };
  const double per_host = static_cast<double>(H - 1) / H;
  for (const row& r : {row{"all_reduce", 2 * per_host}, row{"all_gather", per_host}, row{"reduce_scatter", per_host}}) {
    double best_h = 1e30, best_f = 1e30;
    for (int k = 0; k < rounds + 1; ++k) {  // the first round warms up (connections, pages)
      double th = 0, tf = 0;
      if (!std::strcmp(r.name, "all_reduce")) {
        th = seconds_of(world, [&] { h.all_reduce(tutti::view(a)); });
        tf = seconds_of(world, [&] { world.all_reduce(tutti::view(a)); });
      } else if (!std::strcmp(r.name, "all_gather")) {
        th = seconds_of(world, [&] { h.all_gather(tutti::view<const float>(part), tutti::view(full)); });
        tf = seconds_of(world, [&] { world.all_gather(tutti::view<const float>(part), tutti::view(full)); });
      } else {
        th = seconds_of(world, [&] { h.reduce_scatter(tutti::view<const float>(a), tutti::view(part)); });
        tf = seconds_of(world, [&] { world.reduce_scatter(tutti::view<const float>(a), tutti::view(part)); });
      }
      if (k == 0) continue;
      best_h = std::min(best_h, th);
      best_f = std::min(best_f, tf);
    }
    const double bound = rate_gbit > 0 ? r.factor * static_cast<double>(n * sizeof(float)) * 8 / (rate_gbit * 1e9) : 0;
    if (h.rank() == 0)
      std::printf("  %-15s %12.1f %12.1f %12.1f %10.2f %12.2f\n", r.name, best_h * 1e3, best_f * 1e3, bound * 1e3,
                  best_f / best_h, bound > 0 ? bound / best_h : 0.0);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tutti_bench_hierarchy: %s\n", e.what());
  return 1;
}
