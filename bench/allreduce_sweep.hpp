// The all_reduce sweep shared by tutti's benchmark and its peers (Open MPI, Gloo): the same
// sizes, iteration counts, timing rule and output columns (nccl-tests'), so one table can put
// them side by side.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace tutti_bench {

struct sweep_options {
  std::size_t min_bytes = 8, max_bytes = std::size_t{64} << 20;
  int factor = 2;
  int warmup = 5;
  double seconds_per_size = 0.25;  // iterations are chosen to take about this long
  bool zero_copy = false;          // -z 1: buffers from comm.allocate (tutti shm only)
  bool calibrate = false;          // -c 1: iterations from the measured warm-up time (see below)
};

inline sweep_options parse(int argc, char** argv) {
  sweep_options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "-b") o.min_bytes = std::strtoull(v, nullptr, 10);
    else if (k == "-e") o.max_bytes = std::strtoull(v, nullptr, 10);
    else if (k == "-f") o.factor = std::atoi(v);
    else if (k == "-w") o.warmup = std::atoi(v);
    else if (k == "-t") o.seconds_per_size = std::atof(v);
    else if (k == "-z") o.zero_copy = std::atoi(v) != 0;
    else if (k == "-c") o.calibrate = std::atoi(v) != 0;
  }
  return o;
}

/// Iterations for a size: enough to last about `seconds` at an optimistic 8 GB/s, in [5, 20000].
inline int iterations(std::size_t bytes, double seconds) {
  const double per = 0.5e-6 + static_cast<double>(bytes) / 8e9;
  return static_cast<int>(std::clamp(seconds / per, 5.0, 20000.0));
}

/// With -c 1: iterations to last about `seconds` at the measured time per call (the slowest
/// rank's, so every rank picks the same count), in [5, 20000]. For transports whose latency is far
/// above the 0.5 us `iterations` assumes (tcp: ~100 us), where 20000 calls of 8 B take seconds.
inline int iterations_measured(double us_per_call, double seconds) {
  return static_cast<int>(std::clamp(seconds / std::max(us_per_call * 1e-6, 1e-9), 5.0, 20000.0));
}

/// --data-varying (tutti-bench and the peers' harness): how many buffer sets of `set_bytes` each
/// the calls rotate over: enough to fill `data_varying` bytes, at least one, at most 64.
inline std::size_t data_varying_sets(std::size_t data_varying, std::size_t set_bytes) {
  if (data_varying == 0 || set_bytes == 0) return 1;
  return std::clamp<std::size_t>((data_varying + set_bytes - 1) / set_bytes, 1, 64);
}

inline void print_header(const char* who, int ranks) {
  std::printf("# %s all_reduce, float sum, %d ranks\n", who, ranks);
  std::printf("#%11s %12s %6s %6s %5s   %10s %8s %8s %6s   %10s %8s %8s %6s\n", "", "", "", "", "",
              "out-of-place", "", "", "", "in-place", "", "", "");
  std::printf("#%11s %12s %6s %6s %5s   %10s %8s %8s %6s   %10s %8s %8s %6s\n", "size", "count", "type", "redop",
              "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%11s %12s %6s %6s %5s   %10s %8s %8s %6s   %10s %8s %8s %6s\n", "(B)", "(elements)", "", "", "",
              "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

/// One row; `us` are the slowest rank's mean time per call.
inline void print_row(std::size_t bytes, int ranks, double oop_us, long oop_wrong, double ip_us, long ip_wrong) {
  const double factor = 2.0 * (ranks - 1) / ranks;
  auto algbw = [&](double us) { return static_cast<double>(bytes) / (us * 1e-6) / 1e9; };
  std::printf(" %11zu %12zu %6s %6s %5d   %10.2f %8.2f %8.2f %6ld   %10.2f %8.2f %8.2f %6ld\n", bytes,
              bytes / sizeof(float), "float", "sum", -1, oop_us, algbw(oop_us), algbw(oop_us) * factor, oop_wrong, ip_us,
              algbw(ip_us), algbw(ip_us) * factor, ip_wrong);
  std::fflush(stdout);
}

/// Runs the sweep. `all_reduce(in, out, count)` reduces (in == out: in place); `max_of(x)`
/// returns the maximum of x over ranks; `barrier()`.
/// `Buffer(n)` makes a buffer of n floats with data(), begin() and operator[] (std::vector by
/// default; tutti's zero-copy run passes shared memory).
template <class AllReduce, class MaxOf, class Barrier, class Buffer = std::vector<float> (*)(std::size_t)>
void run(const sweep_options& o, int rank, int ranks, const char* who, AllReduce all_reduce, MaxOf max_of,
         Barrier barrier, Buffer make = [](std::size_t n) { return std::vector<float>(n); }) {
  if (rank == 0) print_header(who, ranks);
  const std::size_t cap = o.max_bytes / sizeof(float) + 1;
  auto in = make(cap), out = make(cap), work = make(cap);
  double sum_busbw = 0;
  int rows = 0;
  for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= static_cast<std::size_t>(o.factor)) {
    const std::size_t count = bytes / sizeof(float);
    // Small integers: sums are exact, so the check is exact.
    for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank + 1) * ((i % 7) + 1));
    int iters = iterations(bytes, o.seconds_per_size);
    auto expected = [&](std::size_t i) { return static_cast<float>(ranks * (ranks + 1) / 2 * ((i % 7) + 1)); };
    auto wrong = [&](const auto& v) {
      long w = 0;
      for (std::size_t i = 0; i < count; ++i) w += v[i] != expected(i);
      return static_cast<long>(max_of(static_cast<double>(w)));
    };
    // out of place
    if (o.calibrate && o.warmup >= 2) {
      // the first call may set things up (Gloo builds its algorithm objects): not timed
      all_reduce(in.data(), out.data(), count);
      const auto w0 = std::chrono::steady_clock::now();
      for (int i = 1; i < o.warmup; ++i) all_reduce(in.data(), out.data(), count);
      const auto w1 = std::chrono::steady_clock::now();
      iters = iterations_measured(
          max_of(std::chrono::duration<double, std::micro>(w1 - w0).count() / (o.warmup - 1)), o.seconds_per_size);
    } else {
      for (int i = 0; i < o.warmup; ++i) all_reduce(in.data(), out.data(), count);
    }
    barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) all_reduce(in.data(), out.data(), count);
    auto t1 = std::chrono::steady_clock::now();
    const double oop = max_of(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
    const long oop_wrong = wrong(out);
    // in place: the buffer is refilled before the checked call only (repeated sums grow)
    for (int i = 0; i < o.warmup; ++i) all_reduce(work.data(), work.data(), count);
    barrier();
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) all_reduce(work.data(), work.data(), count);
    t1 = std::chrono::steady_clock::now();
    const double ip = max_of(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
    std::copy(in.begin(), in.begin() + count, work.begin());
    all_reduce(work.data(), work.data(), count);
    const long ip_wrong = wrong(work);
    std::fill(work.begin(), work.begin() + count, 0.0f);
    if (rank == 0) print_row(bytes, ranks, oop, oop_wrong, ip, ip_wrong);
    sum_busbw += static_cast<double>(bytes) / (ip * 1e-6) / 1e9 * 2.0 * (ranks - 1) / ranks;
    ++rows;
  }
  if (rank == 0) std::printf("# Avg bus bandwidth    : %g\n#\n", rows ? sum_busbw / rows : 0.0);
}

}  // namespace tutti_bench
