// The overlap measurement shared by bench/overlap.cpp (tutti) and bench/peers/mpi_overlap.cpp
// (Open MPI): each rank posts a non-blocking all_reduce of N bytes, does W of work, then waits.
//   overlap = (t_comm + t_work - t_total) / min(t_comm, t_work)
// 1: the work hid all of the communication (or the reverse); 0: none of it. t_comm is the
// all_reduce posted and waited on at once, t_work the work alone, t_total the three steps; each
// the best of `reps` runs, every run started together after a barrier. The work is sleeping (a
// stand-in for waiting on a device or a disk: no CPU) or a loop of arithmetic (CPU), each sized
// to take about t_comm. Output: one line per (bytes, work), columns named in the header.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace overlap_bench {

using clock = std::chrono::steady_clock;

inline double since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

/// Arithmetic for about `seconds` of one core (calibrated once); returns a value to keep.
inline double cpu_work(double seconds) {
  static double per_second = [] {
    volatile double x = 1;
    const auto t0 = clock::now();
    std::size_t n = 0;
    while (since(t0) < 0.05) {
      for (int i = 0; i < 100000; ++i) x = x * 1.0000001 + 1e-9;
      n += 100000;
    }
    return static_cast<double>(n) / since(t0);
  }();
  volatile double x = 1;
  const auto n = static_cast<std::size_t>(seconds * per_second);
  for (std::size_t i = 0; i < n; ++i) x = x * 1.0000001 + 1e-9;
  return x;
}

struct options {
  std::vector<std::size_t> bytes{std::size_t{4} << 20, std::size_t{64} << 20};
  int reps = 10;
};

inline options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "-n") o.reps = std::atoi(argv[i + 1]);
    else if (a == "-b") {
      o.bytes.clear();
      std::string list = argv[i + 1];
      for (std::size_t at = 0; at < list.size();) {
        const auto comma = list.find(',', at);
        o.bytes.push_back(std::strtoull(list.substr(at, comma - at).c_str(), nullptr, 10));
        at = comma == std::string::npos ? list.size() : comma + 1;
      }
    }
  }
  return o;
}

/// `post(buf, n)` starts the all_reduce and returns a handle; `wait(handle)` completes it;
/// `max_all(x)` is the largest x over the ranks (blocking); `barrier()`.
template <class Post, class Wait, class MaxAll, class Barrier>
void run(const options& o, int rank, const char* library, Post post, Wait wait, MaxAll max_all, Barrier barrier) {
  if (rank == 0)
    std::printf("# %s: iall_reduce (float sum) + work + wait, best of %d\n# %10s %6s %10s %10s %10s %8s\n", library,
                o.reps, "bytes", "work", "comm_us", "work_us", "total_us", "overlap");
  for (std::size_t bytes : o.bytes) {
    const std::size_t n = bytes / sizeof(float);
    std::vector<float> buf(n, 1.0f);
    auto best = [&](auto step) {
      double b = 1e30;
      for (int i = 0; i < o.reps; ++i) {
        barrier();
        const auto t0 = clock::now();
        step();
        b = std::min(b, max_all(since(t0)));  // a step lasts until its slowest rank is done
      }
      return b;
    };
    // Warm-up, then the communication alone.
    for (int i = 0; i < 2; ++i) wait(post(buf.data(), n));
    const double t_comm = best([&] { wait(post(buf.data(), n)); });
    for (const char* kind : {"sleep", "cpu"}) {
      const bool sleeping = std::strcmp(kind, "sleep") == 0;
      auto work = [&] {
        if (sleeping) std::this_thread::sleep_for(std::chrono::duration<double>(t_comm));
        else cpu_work(t_comm);
      };
      const double t_work = best(work);
      const double t_total = best([&] {
        auto h = post(buf.data(), n);
        work();
        wait(std::move(h));
      });
      const double overlap = (t_comm + t_work - t_total) / std::min(t_comm, t_work);
      if (rank == 0)
        std::printf("  %10zu %6s %10.1f %10.1f %10.1f %8.2f\n", bytes, kind, t_comm * 1e6, t_work * 1e6, t_total * 1e6,
                    overlap);
      std::fflush(stdout);
    }
  }
}

}  // namespace overlap_bench
