// OSU-style point-to-point between ranks 0 and 1 (osu_latency, osu_bw), the same loop for tutti
// (p2p.cpp) and for MPI (peers/mpi_p2p.cpp):
//   latency  blocking ping-pong: rank 0 sends and receives, rank 1 receives and sends; half the
//            round trip, in microseconds;
//   bw       rank 0 posts a window of 64 non-blocking sends, rank 1 64 receives, both wait for
//            all, then rank 1 sends 4 bytes back; MB/s (10^6 bytes) of the window's bytes.
// Sizes 8 B, 64 KiB and 4 MiB (--sizes a,b,...), each measured --rounds times (default 3); rank 0
// prints the best round of each as "<kind> <bytes> <value>" after a "# <library> ..." line, so
// bench/compare_p2p.sh can join the libraries' outputs. Other ranks take no part.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace p2p_bench {

struct options {
  std::vector<std::size_t> sizes{8, std::size_t{64} << 10, std::size_t{4} << 20};
  int rounds = 3;
};

inline options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      o.rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--sizes" && i + 1 < argc) {
      o.sizes.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        o.sizes.push_back(std::strtoull(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p) break;
      }
    }
  }
  return o;
}

/// Iterations of one measurement: about the same time at every size.
inline int iterations(std::size_t bytes, bool bw) {
  if (bytes <= 8192) return bw ? 200 : 20000;
  if (bytes <= (std::size_t{1} << 20)) return bw ? 50 : 1000;
  return bw ? 10 : 100;
}

/// `Ops` gives: rank(), send(p, n, peer, tag), recv(p, n, peer, tag), a window of non-blocking
/// sends or receives (`window(bufs, n, peer, tag, send)`, waiting for all), barrier().
template <class Ops>
void run(Ops& ops, const options& o, const char* library) {
  constexpr int window = 64;
  const int me = ops.rank();
  std::vector<std::vector<char>> bufs(window);
  std::vector<char> ack(4);
  if (me == 0) std::printf("# %s: OSU-style latency (us, half a round trip) and bandwidth (MB/s, window 64), best of %d\n", library, o.rounds);
  for (const std::size_t n : o.sizes) {
    for (auto& b : bufs) b.assign(n, static_cast<char>(me + 1));
    double best_lat = 1e30, best_bw = 0;
    for (int round = 0; round < o.rounds; ++round) {
      const int it = iterations(n, false), warm = std::max(10, it / 10);
      ops.barrier();
      std::chrono::steady_clock::time_point t0;
      for (int i = 0; i < warm + it; ++i) {
        if (i == warm) t0 = std::chrono::steady_clock::now();
        if (me == 0) {
          ops.send(bufs[0].data(), n, 1, 1);
          ops.recv(bufs[1].data(), n, 1, 1);
        } else if (me == 1) {
          ops.recv(bufs[1].data(), n, 0, 1);
          ops.send(bufs[0].data(), n, 0, 1);
        }
      }
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      best_lat = std::min(best_lat, us / it / 2);
      const int bw_it = iterations(n, true), bw_warm = std::max(2, bw_it / 10);
      ops.barrier();
      for (int i = 0; i < bw_warm + bw_it; ++i) {
        if (i == bw_warm) t0 = std::chrono::steady_clock::now();
        if (me == 0) {
          ops.window(bufs, n, 1, 2, true);
          ops.recv(ack.data(), ack.size(), 1, 3);
        } else if (me == 1) {
          ops.window(bufs, n, 0, 2, false);
          ops.send(ack.data(), ack.size(), 0, 3);
        }
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best_bw = std::max(best_bw, static_cast<double>(n) * window * bw_it / s / 1e6);
    }
    if (me == 0) {
      std::printf("latency %zu %.3f\n", n, best_lat);
      std::printf("bw %zu %.1f\n", n, best_bw);
      std::fflush(stdout);
    }
  }
  ops.barrier();
}

}  // namespace p2p_bench
