/// \file
/// Reduction-kernel benchmark: tutti::detail::combine(a, a, b, n, op), in place, against a plain
/// `a[i] += b[i]` loop, for operands of 4 KiB to 64 MiB.
///
///   cmake -S . -B build -DTUTTI_BUILD_BENCH=ON && cmake --build build --target tutti_bench_reduce
///   build/bench/tutti_bench_reduce [reps]   reps: timed runs per measurement, best kept (7)
///
/// Each timed run repeats the kernel for at least 10 ms; the float pair (plain loop, tutti) and the
/// bfloat16 pair (tutti, naive loop) alternate run by run, so both see the same machine noise.
/// GB/s counts 3 * n * sizeof(T) bytes per pass (read a, read b, write a). "vs base" is a row's
/// GB/s over the plain float loop's at the same operand size: for tutti's float sum it is the
/// ratio the kernels are held to (>= 0.7). "#wrong" counts the elements of one pass that differ,
/// bitwise, from an element-by-element scalar reference. Buffers are 64-byte aligned.
/// Exits 1 if anything is wrong.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <sys/utsname.h>

#include "tutti/core/float16.hpp"
#include "tutti/op/kernels.hpp"
#include "tutti/op/ops.hpp"

namespace {

using clk = std::chrono::steady_clock;
using tutti::bfloat16;
using tutti::float16;

// ---- the kernels timed: all out of line, so a pass is one honest call ---------------------------

/// The baseline: whatever -O3 -march=native makes of the obvious loop (it vectorises it).
[[gnu::noinline]] void plain_sum(float* __restrict a, const float* __restrict b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] += b[i];
}

/// For reference: the obvious bfloat16 loop, through float element by element.
[[gnu::noinline]] void naive_bf16_sum(bfloat16* __restrict a, const bfloat16* __restrict b,
                                      std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] = bfloat16(float(a[i]) + float(b[i]));
}

template <class T, class Op>
[[gnu::noinline]] void tutti_combine(T* a, const T* b, std::size_t n) {
  tutti::detail::combine(a, a, b, n, Op{});
}

template <class T>
using kernel = void (*)(T*, const T*, std::size_t);

// ---- buffers and data ---------------------------------------------------------------------------

struct free_deleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
template <class T>
using array = std::unique_ptr<T[], free_deleter>;

template <class T>
array<T> make_array(std::size_t n) {
  const std::size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) {
    std::fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    std::exit(2);
  }
  std::memset(p, 0, bytes);  // touch every page before timing
  return array<T>(static_cast<T*>(p));
}

/// splitmix64: fast enough to fill 64 MiB buffers without dominating the run time.
struct rng {
  std::uint64_t s;
  std::uint64_t operator()() noexcept {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

/// Values in [-1, 1], multiples of 1/1024 (sums stay exact in float and far from denormals);
/// integers in [-1000, 1000].
template <class T>
T sample(rng& g) {
  const int k = static_cast<int>(g() % 2049) - 1024;
  if constexpr (std::is_integral_v<T>) return static_cast<T>(k);
  else return T(static_cast<float>(k) / 1024.0f);
}

template <class T>
bool same_bits(const T& x, const T& y) {
  return std::memcmp(&x, &y, sizeof(T)) == 0;
}

// ---- measurement --------------------------------------------------------------------------------

constexpr double min_run_s = 0.010;  // each timed run repeats the kernel for at least this long

template <class T>
struct timed {
  const char* impl;
  kernel<T> fn;
  std::size_t wrong = 0;
  std::size_t passes = 1;
  double best = 1e300;  // seconds per pass

  double run(T* a, const T* b, std::size_t n) const {
    const auto t0 = clk::now();
    for (std::size_t p = 0; p < passes; ++p) fn(a, b, n);
    return std::chrono::duration<double>(clk::now() - t0).count();
  }
  void calibrate(T* a, const T* b, std::size_t n) {
    for (;;) {
      const double t = run(a, b, n);
      if (t >= min_run_s) return;
      const double grow = t > 0 ? min_run_s * 1.25 / t : 1000.0;
      const double next = static_cast<double>(passes) * std::clamp(grow, 2.0, 1000.0);
      passes = static_cast<std::size_t>(next);
    }
  }
};

struct row {
  std::size_t bytes;
  const char* type;
  const char* op;
  const char* impl;
  std::size_t n, elem;
  double s_per_pass;
  std::size_t wrong;
};

/// Checks every kernel of `impls` against the scalar reference once, then times them, run by run
/// in turn, keeping each one's best run.
template <class T, class Op>
void run_case(std::size_t bytes, const char* type, const char* op,
              std::vector<timed<T>> impls, int reps, std::vector<row>& rows) {
  const std::size_t n = bytes / sizeof(T);
  auto a0 = make_array<T>(n), b = make_array<T>(n), a = make_array<T>(n), ref = make_array<T>(n);
  rng g{0x5eed0000u + bytes + sizeof(T)};
  for (std::size_t i = 0; i < n; ++i) a0[i] = sample<T>(g);
  for (std::size_t i = 0; i < n; ++i) b[i] = sample<T>(g);
  for (std::size_t i = 0; i < n; ++i) ref[i] = Op{}(a0[i], b[i]);

  for (auto& k : impls) {
    std::memcpy(a.get(), a0.get(), n * sizeof(T));
    k.fn(a.get(), b.get(), n);
    for (std::size_t i = 0; i < n; ++i) k.wrong += !same_bits(a[i], ref[i]);
  }
  std::memcpy(a.get(), a0.get(), n * sizeof(T));
  for (auto& k : impls) k.calibrate(a.get(), b.get(), n);
  for (int r = 0; r < reps; ++r)
    for (auto& k : impls)
      k.best = std::min(k.best, k.run(a.get(), b.get(), n) / static_cast<double>(k.passes));

  for (const auto& k : impls)
    rows.push_back({bytes, type, op, k.impl, n, sizeof(T), k.best, k.wrong});
}

// ---- a self-check of the 16-bit paths on every bit pattern --------------------------------------

/// Equal bits, or both NaN: which NaN operand a float op returns (so the result's sign) depends
/// on the order the compiler puts the operands in, in the scalar reference as in the kernel.
template <class H>
bool same_half(H x, H y) {
  const float fx = H::to_float(x.bits), fy = H::to_float(y.bits);
  return x.bits == y.bits || (fx != fx && fy != fy);
}

/// combine over all 65536 patterns of `a` (NaN, inf, subnormals included) against the scalar
/// widen / op / narrow, in place on either operand, for each built-in op that applies.
template <class H, class Op>
std::size_t check_half_op(rng& g) {
  constexpr std::size_t n = 65536;
  std::vector<H> a(n), b(n), out(n);
  std::size_t wrong = 0;
  for (int round = 0; round < 4; ++round) {
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = H::from_bits(static_cast<std::uint16_t>(i));
      b[i] = H::from_bits(static_cast<std::uint16_t>(g()));
    }
    auto expect = [&](std::size_t i) {
      return H::from_bits(H::from_float(Op{}(H::to_float(a[i].bits), H::to_float(b[i].bits))));
    };
    tutti::detail::combine(out.data(), a.data(), b.data(), n, Op{});
    for (std::size_t i = 0; i < n; ++i) wrong += !same_half(out[i], expect(i));
    out = b;  // out aliases b
    tutti::detail::combine(out.data(), a.data(), out.data(), n, Op{});
    for (std::size_t i = 0; i < n; ++i) wrong += !same_half(out[i], expect(i));
    // odd lengths and offsets: the block and vector tails
    const std::size_t len = 1 + g() % 1000, off = g() % 64;
    out = a;
    tutti::detail::combine(out.data() + off, out.data() + off, b.data() + off, len, Op{});
    for (std::size_t i = off; i < off + len; ++i) wrong += !same_half(out[i], expect(i));
    for (std::size_t i = 0; i < n; ++i)
      if (i < off || i >= off + len) wrong += out[i].bits != a[i].bits;
  }
  return wrong;
}

template <class H>
std::size_t check_half(rng& g) {
  return check_half_op<H, tutti::op::sum>(g) + check_half_op<H, tutti::op::prod>(g) +
         check_half_op<H, tutti::op::min>(g) + check_half_op<H, tutti::op::max>(g) +
         check_half_op<H, tutti::op::avg>(g);
}

// ---- report -------------------------------------------------------------------------------------

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown";
}

std::string simd_flags() {
  std::string s;
#ifdef __SSE2__
  s += " sse2";
#endif
#ifdef __AVX__
  s += " avx";
#endif
#ifdef __AVX2__
  s += " avx2";
#endif
#ifdef __F16C__
  s += " f16c";
#endif
#ifdef __AVX512F__
  s += " avx512f";
#endif
#ifdef __AVX512BW__
  s += " avx512bw";
#endif
#ifdef __AVX512BF16__
  s += " avx512bf16";
#endif
#ifdef __AVX512FP16__
  s += " avx512fp16";
#endif
#ifdef __ARM_NEON
  s += " neon";
#endif
  return s.empty() ? " (none)" : s;
}

std::string size_name(std::size_t bytes) {
  char buf[32];
  if (bytes >= (1u << 20)) std::snprintf(buf, sizeof buf, "%zu MiB", bytes >> 20);
  else std::snprintf(buf, sizeof buf, "%zu KiB", bytes >> 10);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  namespace op = tutti::op;
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  const auto start = clk::now();

  utsname u{};
  uname(&u);
  std::printf("tutti reduction kernels: combine(a, a, b, n, op) vs a plain a[i] += b[i] loop\n");
  std::printf("machine:  %s, %s, %u hardware threads\n", u.machine, cpu_model().c_str(),
              std::thread::hardware_concurrency());
#ifdef __clang__
  std::printf("compiler: %s\n", __VERSION__);
#else
  std::printf("compiler: GCC %s\n", __VERSION__);
#endif
  std::printf("simd:    %s\n", simd_flags().c_str());
  std::printf("timing:   best of %d runs of >= %.0f ms each; GB/s = 3 * n * sizeof(T) / time\n\n",
              reps, min_run_s * 1e3);

  rng g{42};
  const std::size_t self_wrong = check_half<float16>(g) + check_half<bfloat16>(g);
  std::printf("self-check: fp16/bf16 combine, all 65536 bit patterns x {sum prod min max avg}, "
              "in place and tails: %zu wrong\n\n",
              self_wrong);

  std::vector<row> rows;
  std::printf("%-8s %-6s %-4s %-11s %10s %12s %9s %8s %8s %7s\n", "size", "type", "op", "kernel",
              "elements", "ns/pass", "Gelem/s", "GB/s", "vs base", "#wrong");
  for (std::size_t bytes = 4u << 10; bytes <= (64u << 20); bytes *= 4) {
    const std::size_t first = rows.size();
    run_case<float, op::sum>(bytes, "float", "sum",
                             {{"plain loop", plain_sum}, {"tutti", tutti_combine<float, op::sum>}},
                             reps, rows);
    run_case<double, op::sum>(bytes, "double", "sum", {{"tutti", tutti_combine<double, op::sum>}},
                              reps, rows);
    run_case<std::int32_t, op::sum>(bytes, "int32", "sum",
                                    {{"tutti", tutti_combine<std::int32_t, op::sum>}}, reps, rows);
    run_case<float, op::max>(bytes, "float", "max", {{"tutti", tutti_combine<float, op::max>}},
                             reps, rows);
    run_case<float16, op::sum>(bytes, "fp16", "sum", {{"tutti", tutti_combine<float16, op::sum>}},
                               reps, rows);
    run_case<bfloat16, op::sum>(
        bytes, "bf16", "sum",
        {{"tutti", tutti_combine<bfloat16, op::sum>}, {"naive loop", naive_bf16_sum}}, reps, rows);

    const double base_gbs = 3.0 * static_cast<double>(rows[first].n * rows[first].elem) /
                            rows[first].s_per_pass / 1e9;
    for (std::size_t r = first; r < rows.size(); ++r) {
      const row& x = rows[r];
      const double gbs = 3.0 * static_cast<double>(x.n * x.elem) / x.s_per_pass / 1e9;
      std::printf("%-8s %-6s %-4s %-11s %10zu %12.1f %9.2f %8.2f %8.2f %7zu\n",
                  size_name(x.bytes).c_str(), x.type, x.op, x.impl, x.n, x.s_per_pass * 1e9,
                  static_cast<double>(x.n) / x.s_per_pass / 1e9, gbs, gbs / base_gbs, x.wrong);
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  // The target: tutti's float sum at >= 0.7x the plain loop, at every size.
  double lo = 1e300, hi = 0;
  std::string lo_at, hi_at;
  std::size_t wrong = self_wrong;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    wrong += rows[r].wrong;
    if (std::strcmp(rows[r].impl, "tutti") != 0 || std::strcmp(rows[r].type, "float") != 0 ||
        std::strcmp(rows[r].op, "sum") != 0)
      continue;
    const double ratio = rows[r - 1].s_per_pass / rows[r].s_per_pass;  // the plain loop's row
    if (ratio < lo) lo = ratio, lo_at = size_name(rows[r].bytes);
    if (ratio > hi) hi = ratio, hi_at = size_name(rows[r].bytes);
  }
  std::printf("float sum, tutti / plain loop: %.2fx (%s) .. %.2fx (%s); target >= 0.70x: %s\n", lo,
              lo_at.c_str(), hi, hi_at.c_str(), lo >= 0.7 ? "met" : "NOT met");
  std::printf("wrong elements in all: %zu; total time %.1f s\n", wrong,
              std::chrono::duration<double>(clk::now() - start).count());
  return wrong == 0 ? 0 : 1;
}
