// This machine's copy rate for one buffer size: the unit of bench/compare.sh's memory-traffic
// bound for large shm collectives (bench/RESULTS.md, "The memory-traffic bound").
//
//   tutti_bench_copy_rate [-b BYTES (default 64M; K, M, G suffixes)] [-n REPS (default 20)]
//                         [-t THREADS (default 1)]
//
// Each of THREADS threads has its own source and destination of BYTES, both written before
// timing (no page faults in the loop). Every rep, all threads start together (a barrier) and
// each times one copy of BYTES by each method in turn:
//   memcpy   glibc's memcpy as the program gets it (for 64 MiB on a machine with a large L3,
//            glibc stays below its non-temporal threshold and copies through the cache);
//   stream   a loop of non-temporal (streaming) vector stores, which skip reading the
//            destination's lines into the cache first (x86-64 only);
//   movsb    `rep movsb`, the copy the kernel uses for process_vm_readv where string moves are
//            fast (x86-64 only).
// A rep's time is its slowest thread's; each method's best rep counts (the least disturbed by
// other work on a shared machine). best_GBps is the fastest method's: the bound must be one that
// no schedule copying with any of these could beat. One line, key=value, for scripts:
//   copy_rate bytes=67108864 threads=1 reps=20 best_GBps=11.52 best_method=stream best_us=5825.3
//             memcpy_GBps=5.60 stream_GBps=11.52 movsb_GBps=5.41 median_GBps=10.20
// (median_GBps: the fastest method's median rep). GBps = BYTES copied per second per thread,
// 1e9 bytes per GB: a copy of B bytes reads B and writes B, so its memory traffic (reads plus
// writes) is twice that. -t 2 shows what each of two ranks copying at once on two cores gets.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

#if defined(__x86_64__)
// Non-temporal stores of the widest vectors the build targets (-march=native in bench/).
void stream_copy(char* dst, const char* src, std::size_t n) {
  std::size_t i = 0;
  while (i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 63)) dst[i] = src[i], ++i;  // align the stores
#if defined(__AVX512F__)
  for (; i + 64 <= n; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(reinterpret_cast<const void*>(src + i)));
#elif defined(__AVX__)
  for (; i + 32 <= n; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
#else
  for (; i + 16 <= n; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
#endif
  _mm_sfence();
  for (; i < n; ++i) dst[i] = src[i];
}

void movsb_copy(char* dst, const char* src, std::size_t n) {
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}
#endif

struct method {
  const char* name;
  void (*copy)(char*, const char*, std::size_t);
};
void libc_copy(char* dst, const char* src, std::size_t n) { std::memcpy(dst, src, n); }
#if defined(__x86_64__)
constexpr std::array methods{method{"memcpy", libc_copy}, method{"stream", stream_copy}, method{"movsb", movsb_copy}};
#else
constexpr std::array methods{method{"memcpy", libc_copy}};
#endif
constexpr std::size_t n_methods = methods.size();

std::size_t parse_bytes(const char* v) {
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  std::size_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = std::size_t{1} << 10, ++end;
  else if (*end == 'M' || *end == 'm') mult = std::size_t{1} << 20, ++end;
  else if (*end == 'G' || *end == 'g') mult = std::size_t{1} << 30, ++end;
  if (end == v || *end || n == 0) {
    std::fprintf(stderr, "tutti_bench_copy_rate: -b: expected bytes with an optional K, M or G, got '%s'\n", v);
    std::exit(2);
  }
  return static_cast<std::size_t>(n) * mult;
}

int parse_int(const char* flag, const char* v) {
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end || n < 1 || n > 1000000) {
    std::fprintf(stderr, "tutti_bench_copy_rate: %s: expected a positive integer, got '%s'\n", flag, v);
    std::exit(2);
  }
  return static_cast<int>(n);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t bytes = std::size_t{64} << 20;
  int reps = 20, threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      std::puts("usage: tutti_bench_copy_rate [-b BYTES (default 64M)] [-n REPS (default 20)] [-t THREADS (default 1)]");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "tutti_bench_copy_rate: %s needs a value\n", k.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (k == "-b") bytes = parse_bytes(v);
    else if (k == "-n") reps = parse_int(k.c_str(), v);
    else if (k == "-t") threads = parse_int(k.c_str(), v);
    else {
      std::fprintf(stderr, "tutti_bench_copy_rate: unknown flag %s\n", k.c_str());
      return 2;
    }
  }

  struct lane {
    std::vector<char> src, dst;
    std::vector<double> us;  // [rep * n_methods + method]
  };
  std::vector<lane> lanes(static_cast<std::size_t>(threads));
  for (std::size_t t = 0; t < lanes.size(); ++t) {
    lanes[t].src.assign(bytes, static_cast<char>(t + 1));  // written: the pages exist before timing
    lanes[t].dst.assign(bytes, 0);
    lanes[t].us.assign(static_cast<std::size_t>(reps) * n_methods, 0);
  }
  // Every (rep, method): all threads wait at a barrier, then each copies once; one warm-up rep.
  std::atomic<int> arrived{0};
  auto worker = [&](std::size_t t) {
    lane& l = lanes[t];
    int round = 0;
    for (int r = -1; r < reps; ++r) {
      for (std::size_t m = 0; m < n_methods; ++m) {
        const int target = ++round * threads;
        arrived.fetch_add(1);
        while (arrived.load() < target) std::this_thread::yield();
        const auto t0 = std::chrono::steady_clock::now();
        methods[m].copy(l.dst.data(), l.src.data(), bytes);
        const auto t1 = std::chrono::steady_clock::now();
        if (r >= 0) l.us[static_cast<std::size_t>(r) * n_methods + m] = std::chrono::duration<double, std::micro>(t1 - t0).count();
      }
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < lanes.size(); ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& th : pool) th.join();

  long check = 0;
  for (const auto& l : lanes) check += l.dst[bytes / 2];  // the copies are used: none can be left out
  auto gbps = [&](double us) { return static_cast<double>(bytes) / (us * 1e-6) / 1e9; };
  std::array<double, n_methods> best{}, median{};
  std::size_t fastest = 0;
  for (std::size_t m = 0; m < n_methods; ++m) {
    std::vector<double> slowest(static_cast<std::size_t>(reps), 0);  // per rep, its slowest thread
    for (const auto& l : lanes)
      for (std::size_t r = 0; r < slowest.size(); ++r) slowest[r] = std::max(slowest[r], l.us[r * n_methods + m]);
    std::sort(slowest.begin(), slowest.end());
    best[m] = slowest.front(), median[m] = slowest[slowest.size() / 2];
    if (best[m] < best[fastest]) fastest = m;
  }
  std::printf("copy_rate bytes=%zu threads=%d reps=%d best_GBps=%.2f best_method=%s best_us=%.1f", bytes, threads, reps,
              gbps(best[fastest]), methods[fastest].name, best[fastest]);
  for (std::size_t m = 0; m < n_methods; ++m) std::printf(" %s_GBps=%.2f", methods[m].name, gbps(best[m]));
  std::printf(" median_GBps=%.2f\n", gbps(median[fastest]));
  return check == 0 ? 1 : 0;
}
