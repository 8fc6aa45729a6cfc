/// \file
/// Reproducible summation benchmark: tutti::binned<T>::add(span) against plain sum loops, and
/// tutti::detail::reproducible_reduce (k inputs, element-wise) against a plain k-input sum loop,
/// for float and double, 64 MiB and 1 MiB per buffer.
///
///   cmake -S . -B build -DTUTTI_BUILD_BENCH=ON && cmake --build build --target tutti_bench_binned
///   build/bench/tutti_bench_binned [reps]   reps: timed runs per measurement, best kept (7)
///
/// Each timed run repeats the kernel for at least 20 ms; the kernels compared in one row alternate
/// run by run, so they see the same machine noise. GB/s counts the bytes read (and written).
/// "plain" is `T s = 0; for (x : v) s += x;` as the compiler makes it (without -ffast-math it
/// cannot vectorise the chain of additions); "plain simd" is the same sum with 8 independent
/// vector accumulators (memory-bound: what a vectorised plain loop reaches). The ratios are binned
/// over each. Inputs: uniform in [-1, 1).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "tutti/op/binned.hpp"

namespace {

using clk = std::chrono::steady_clock;

template <class T>
[[gnu::noinline]] T plain_sum(const T* v, std::size_t n) {
  T s = 0;
  for (std::size_t i = 0; i < n; ++i) s += v[i];
  return s;
}

template <class T>
[[gnu::noinline]] T plain_simd_sum(const T* v, std::size_t n) {
  using vT [[gnu::vector_size(tutti::detail::simd_bytes)]] = T;
  constexpr std::size_t w = sizeof(vT) / sizeof(T);
  vT a[8] = {};
  std::size_t i = 0;
  for (; i + 8 * w <= n; i += 8 * w)
    for (int m = 0; m < 8; ++m) {
      vT x;
      std::memcpy(&x, v + i + m * w, sizeof x);
      a[m] += x;
    }
  for (int m = 1; m < 8; ++m) a[0] += a[m];
  T s = 0;
  for (std::size_t l = 0; l < w; ++l) s += a[0][l];
  for (; i < n; ++i) s += v[i];
  return s;
}

template <class T>
[[gnu::noinline]] T binned_sum(const T* v, std::size_t n) {
  tutti::binned<T> acc;
  acc.add(std::span<const T>(v, n));
  return acc.value();
}

template <class T>
[[gnu::noinline]] void plain_reduce(T* __restrict out, const T* const* in, int k, std::size_t n) {
  if (k == 2) {
    const T* __restrict a = in[0];
    const T* __restrict b = in[1];
    for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  } else {
    const T* __restrict a = in[0];
    const T* __restrict b = in[1];
    const T* __restrict c = in[2];
    const T* __restrict d = in[3];
    for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i] + c[i] + d[i];
  }
}

template <class T>
[[gnu::noinline]] void binned_reduce(T* out, const T* const* in, int k, std::size_t n) {
  tutti::detail::reproducible_reduce(out, in, k, n);
}

volatile double sink;

/// Seconds per call of f, the best of `reps` runs of at least 20 ms, the fs alternating.
template <class... Fs>
std::vector<double> best_times(int reps, Fs... fs) {
  std::vector<double> best(sizeof...(fs), 1e30);
  for (int r = 0; r < reps; ++r) {
    std::size_t idx = 0;
    auto one = [&](auto& f) {
      int calls = 0;
      const auto t0 = clk::now();
      double el;
      do {
        f();
        ++calls;
        el = std::chrono::duration<double>(clk::now() - t0).count();
      } while (el < 0.02);
      best[idx] = std::min(best[idx], el / calls);
      ++idx;
    };
    (one(fs), ...);
  }
  return best;
}

template <class T>
void run(const char* name, std::size_t bytes, int reps) {
  const std::size_t n = bytes / sizeof(T);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<T> u(T(-1), T(1));
  std::vector<std::vector<T>> in(4, std::vector<T>(n));
  for (auto& b : in)
    for (auto& x : b) x = u(rng);
  std::vector<T> out(n);
  const T* const ptr[4] = {in[0].data(), in[1].data(), in[2].data(), in[3].data()};
  const T* v = in[0].data();
  const double gb = static_cast<double>(n * sizeof(T)) / 1e9;
  const auto t = best_times(
      reps, [&] { sink = static_cast<double>(plain_sum(v, n)); },
      [&] { sink = static_cast<double>(plain_simd_sum(v, n)); },
      [&] { sink = static_cast<double>(binned_sum(v, n)); });
  std::printf("%-6s %8zu KiB  sum:    plain %6.2f GB/s  plain simd %6.2f GB/s  binned %6.2f GB/s"
              "  binned/plain %.2f  binned/plain simd %.2f\n",
              name, bytes >> 10, gb / t[0], gb / t[1], gb / t[2], t[0] / t[2], t[1] / t[2]);
  for (const int k : {2, 4}) {
    const auto r = best_times(
        reps, [&] { plain_reduce(out.data(), ptr, k, n); }, [&] { binned_reduce(out.data(), ptr, k, n); });
    const double g = gb * (k + 1);
    std::printf("%-6s %8zu KiB  reduce k=%d: plain %6.2f GB/s  reproducible %6.2f GB/s  "
                "reproducible/plain %.2f\n",
                name, bytes >> 10, k, g / r[0], g / r[1], r[0] / r[1]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 7;
  for (const std::size_t bytes : {std::size_t{64} << 20, std::size_t{1} << 20}) {
    run<float>("float", bytes, reps);
    run<double>("double", bytes, reps);
  }
}
