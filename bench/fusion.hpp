// The fusion measurement shared by bench/fusion.cpp (tutti) and bench/peers/mpi_fusion.cpp
// (Open MPI): a bucketed backward pass's 256 all_reduces of 4 KiB (float sum), posted back to
// back then waited on together, against one all_reduce of the same 1 MiB and against the 256
// as blocking calls. Each case is the best of `reps` runs, every run started together after a
// barrier and lasting until its slowest rank is done. One line per case: library, case, us.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace fusion_bench {

using clock = std::chrono::steady_clock;

struct options {
  int ops = 256;
  std::size_t bytes = 4096;  // each
  int reps = 20;
};

inline options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "-n") o.reps = std::atoi(argv[i + 1]);
    else if (a == "-k") o.ops = std::atoi(argv[i + 1]);
    else if (a == "-s") o.bytes = std::strtoull(argv[i + 1], nullptr, 10);
  }
  return o;
}

/// `cases` are (name, step(buffers, whole)) pairs; `max_all` and `barrier` are blocking.
template <class Cases, class MaxAll, class Barrier>
void run(const options& o, int rank, const char* library, Cases& cases, MaxAll max_all, Barrier barrier) {
  const std::size_t n = o.bytes / sizeof(float);
  std::vector<std::vector<float>> buffers(static_cast<std::size_t>(o.ops), std::vector<float>(n, 1.0f));
  std::vector<float> whole(n * static_cast<std::size_t>(o.ops), 1.0f);
  if (rank == 0)
    std::printf("# %s: %d all_reduces of %zu bytes (float sum) and one of %zu bytes, best of %d\n", library, o.ops, o.bytes,
                whole.size() * sizeof(float), o.reps);
  for (auto& [name, step] : cases) {
    double best = 1e30;
    for (int i = 0; i < o.reps + 2; ++i) {  // two warm-up runs
      barrier();
      const auto t0 = clock::now();
      step(buffers, whole);
      const double t = max_all(std::chrono::duration<double>(clock::now() - t0).count());
      if (i >= 2) best = std::min(best, t);
    }
    if (rank == 0) std::printf("  %-32s %10.1f us\n", name.c_str(), best * 1e6);
    std::fflush(stdout);
  }
}

}  // namespace fusion_bench
