/// \file
/// Reduction kernels: `combine(out, a, b, n, op)` computes out[i] = op(a[i], b[i]); `out` may be
/// `a` or `b` (in place). Built-in ops on built-in arithmetic types run on SIMD vectors (GCC/Clang
/// vector extensions) of the target's native width, four vectors per iteration. float16/bfloat16
/// widen to float, combine, and narrow with round to nearest even, on vectors too (float16 in the
/// F16C conversions where the target has them). Anything else (user ops, user types) is a plain
/// loop the compiler may vectorise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tutti/core/float16.hpp"
#include "tutti/op/ops.hpp"

#if defined(__F16C__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace tutti::detail {

template <class T>
inline constexpr bool simd_element =
    std::is_arithmetic_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, long double>;

template <class Op, class T>
inline constexpr bool simd_op = op_traits<Op>::builtin && simd_element<T> &&
                                (!is_bitwise_op<Op> || std::is_integral_v<T>);

#if defined(__GNUC__) || defined(__clang__)
#define TUTTI_HAVE_VECTOR_EXT 1
/// Bytes per vector: the widest the target handles natively, integer elements included (64 with
/// AVX-512BW, 32 with AVX2, else 16: SSE2, NEON, ...). Wider vectors would still be correct, but
/// GCC lowers a comparison on a vector wider than the target's (min, max, the 16-bit
/// conversions) to scalar code, element by element.
#if defined(__AVX512F__) && defined(__AVX512BW__)
inline constexpr std::size_t simd_bytes = 64;
#elif defined(__AVX2__)
inline constexpr std::size_t simd_bytes = 32;
#else
inline constexpr std::size_t simd_bytes = 16;
#endif

/// The op written out on vectors in place (no function takes or returns a vector, so nothing
/// depends on the vector calling convention of the target).
#define TUTTI_VECTOR_OP(x, y)                                                          \
  do {                                                                                 \
    if constexpr (std::is_same_v<Op, op::sum> || std::is_same_v<Op, op::avg>) x = x + y; \
    else if constexpr (std::is_same_v<Op, op::prod>) x = x * y;                        \
    else if constexpr (std::is_same_v<Op, op::min>) x = y < x ? y : x;                 \
    else if constexpr (std::is_same_v<Op, op::max>) x = x < y ? y : x;                 \
    else if constexpr (std::is_same_v<Op, op::band>) x = x & y;                        \
    else if constexpr (std::is_same_v<Op, op::bor>) x = x | y;                         \
    else x = x ^ y;                                                                    \
  } while (0)

template <class T, class Op>
inline void combine_simd(T* out, const T* a, const T* b, std::size_t n, const Op& op) noexcept {
  using vec [[gnu::vector_size(simd_bytes)]] = T;
  constexpr std::size_t width = sizeof(vec) / sizeof(T);
  std::size_t i = 0;
  for (; i + 4 * width <= n; i += 4 * width) {
    vec x0, x1, x2, x3, y0, y1, y2, y3;
    std::memcpy(&x0, a + i, sizeof(vec));
    std::memcpy(&x1, a + i + width, sizeof(vec));
    std::memcpy(&x2, a + i + 2 * width, sizeof(vec));
    std::memcpy(&x3, a + i + 3 * width, sizeof(vec));
    std::memcpy(&y0, b + i, sizeof(vec));
    std::memcpy(&y1, b + i + width, sizeof(vec));
    std::memcpy(&y2, b + i + 2 * width, sizeof(vec));
    std::memcpy(&y3, b + i + 3 * width, sizeof(vec));
    TUTTI_VECTOR_OP(x0, y0);
    TUTTI_VECTOR_OP(x1, y1);
    TUTTI_VECTOR_OP(x2, y2);
    TUTTI_VECTOR_OP(x3, y3);
    std::memcpy(out + i, &x0, sizeof(vec));
    std::memcpy(out + i + width, &x1, sizeof(vec));
    std::memcpy(out + i + 2 * width, &x2, sizeof(vec));
    std::memcpy(out + i + 3 * width, &x3, sizeof(vec));
  }
  for (; i + width <= n; i += width) {
    vec x, y;
    std::memcpy(&x, a + i, sizeof x);
    std::memcpy(&y, b + i, sizeof y);
    TUTTI_VECTOR_OP(x, y);
    std::memcpy(out + i, &x, sizeof x);
  }
  for (; i < n; ++i) out[i] = op(a[i], b[i]);
}

/// The 16-bit conversions on vectors: the functions of float16.hpp written without branches
/// (every lane computes every case, then a mask picks one), so they vectorise. A 32-bit lane
/// holds two 16-bit elements: widen_lo / widen_hi turn the low / high one into a float, and
/// narrow_lo / narrow_hi turn a float back into the low / high 16 bits of the lane (the other
/// half zero), so that a lane's two results are or-ed together. Results are bitwise identical
/// to H::to_float / H::from_float, whatever the FP environment (rounding mode, FTZ/DAZ):
/// integer operations, plus for float16 subnormals a few float operations that are all exact.
/// Comparisons are signed, on values below 2^31: x86 has no unsigned vector compare before
/// AVX-512. Vectors are passed by reference only, so nothing depends on the target's vector ABI.
namespace half_simd {
using u32xN [[gnu::vector_size(simd_bytes)]] = std::uint32_t;
using i32xN [[gnu::vector_size(simd_bytes)]] = std::int32_t;
using f32xN [[gnu::vector_size(simd_bytes)]] = float;

template <class H>
struct conv;

template <>
struct conv<bfloat16> {
  using f32 = f32xN;  // named here so that it depends on H (see combine_half_lanes)
  static void widen_lo(u32xN& v) noexcept { v = v << 16; }
  static void widen_hi(u32xN& v) noexcept { v = v & 0xffff0000u; }
  /// The bfloat16 in the upper 16 bits of u; the lower 16 are left as they fall.
  static void round(u32xN& u) noexcept {
    const i32xN nan = (i32xN)(u & 0x7fffffffu) > 0x7f800000;
    u = nan ? u | 0x400000u : u + 0x7fffu + ((u >> 16) & 1u);
  }
  static void narrow_lo(u32xN& u) noexcept {
    round(u);
    u = u >> 16;
  }
  static void narrow_hi(u32xN& u) noexcept {
    round(u);
    u = u & 0xffff0000u;
  }
};

template <>
struct conv<float16> {
  using f32 = f32xN;
  /// One float16 per lane (upper bits zero) -> its float.
  static void widen(u32xN& h) noexcept {
    const u32xN sign = (h & 0x8000u) << 16;
    const u32xN exp = (h >> 10) & 0x1fu;
    const u32xN mant = h & 0x3ffu;
    const u32xN infnan = sign | 0x7f800000u | (mant << 13);
    const u32xN normal = sign | ((exp + 112u) << 23) | (mant << 13);
    // Subnormal or zero: mant * 2^-24 (exact: mant < 2^10 converts exactly, the product is a
    // normal float or zero), the sign or-ed in (the scalar code's sign ? -v : v).
    const f32xN sub = __builtin_convertvector((i32xN)mant, f32xN) * 0x1p-24f;
    const u32xN subnormal = (u32xN)sub | sign;
    h = exp == 0x1fu ? infnan : exp == 0u ? subnormal : normal;
  }
  /// A float per lane -> its float16 (upper bits zero).
  static void narrow(u32xN& u) noexcept {
    const u32xN sign = (u >> 16) & 0x8000u;
    const u32xN a = u & 0x7fffffffu;
    const i32xN sa = (i32xN)a;
    const i32xN is_sub = sa < 0x38800000;
    // a >= 2^-14: rebias the exponent 127 -> 15, round to nearest even on the 13 dropped bits.
    const u32xN rebiased = a - 0x38000000u;
    const u32xN normal = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
    // a < 2^-14: the result is |f| * 2^24 rounded to the nearest integer, ties to even (0 below
    // 2^-25). y = |f| * 2^24 is exact; so are t = trunc(y) (the conversion truncates whatever
    // the rounding mode) and y - t. Other lanes compute on 0 and are dropped.
    const f32xN y = (f32xN)((u32xN)is_sub & a) * 0x1p24f;
    const i32xN t = __builtin_convertvector(y, i32xN);
    const f32xN frac = y - __builtin_convertvector(t, f32xN);
    const u32xN up = (frac > 0.5f) | ((frac == 0.5f) & ((u32xN)t << 31 != 0u));
    const u32xN subnormal = (u32xN)t - up;  // up is 0 or all ones (-1)
    const u32xN finite = sign | (is_sub ? subnormal : normal);
    u = sa > 0x7f800000 ? sign | 0x7e00u : sa >= 0x477ff000 ? sign | 0x7c00u : finite;
  }
  static void widen_lo(u32xN& v) noexcept {
    v = v & 0xffffu;
    widen(v);
  }
  static void widen_hi(u32xN& v) noexcept {
    v = v >> 16;
    widen(v);
  }
  static void narrow_lo(u32xN& u) noexcept { narrow(u); }
  static void narrow_hi(u32xN& u) noexcept {
    narrow(u);
    u = u << 16;
  }
};

#ifdef __F16C__
/// float16 on x86 with F16C (every CPU with AVX2): the hardware conversions, 16 lanes with
/// AVX-512 (zmm), else 8. vcvtph2ps is exact for every half (DAZ does not apply to it); the only
/// difference from float16::to_float is that it quiets signalling NaNs, which cannot change a
/// result, since every NaN narrows to sign | 0x7e00 and quieting keeps the sign. vcvtps2ph is
/// told to round to nearest even (not MXCSR's mode) and rounds, overflows and makes subnormals
/// like float16::from_float (FTZ does not apply to it; a float denormal flushed by DAZ still
/// gives the same signed zero); its NaNs keep payload bits, which are cleared after it.
template <class H>
struct hw;

template <>
struct hw<float16> {
#ifdef __AVX512F__
  // The maskz forms with a full mask: GCC 12's plain forms warn (-Wuninitialized) on the
  // undefined vector they pass inside the intrinsic.
  using f32 = __m512;
  using bits = __m256i;
  static void widen(f32& x, const float16* p) noexcept {
    x = _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void narrow_raw(bits& h, const f32& x) noexcept {
    h = _mm512_maskz_cvtps_ph(0xffff, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
#else
  using f32 = __m256;
  using bits = __m128i;
  static void widen(f32& x, const float16* p) noexcept {
    x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void narrow_raw(bits& h, const f32& x) noexcept {
    h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
#endif
  static constexpr std::size_t width = sizeof(f32) / sizeof(float);
  using u16xM [[gnu::vector_size(sizeof(bits))]] = std::uint16_t;
  using i16xM [[gnu::vector_size(sizeof(bits))]] = std::int16_t;
  static void narrow(float16* p, const f32& x) noexcept {
    bits raw;
    narrow_raw(raw, x);
    u16xM h;
    std::memcpy(&h, &raw, sizeof h);
    const u16xM nan = (i16xM)(h & 0x7fffu) > 0x7c00;  // a NaN here always has 0x7e00 set
    h &= ~(nan & 0x1ffu);                              // so this leaves sign | 0x7e00
    std::memcpy(static_cast<void*>(p), &h, sizeof h);  // float16 is trivially copyable
  }
};
#endif
}  // namespace half_simd
#endif

#ifdef TUTTI_HAVE_VECTOR_EXT
/// combine_half's vectors, in the portable conversions: each 32-bit lane holds two elements, and
/// the low halves of a and b are combined apart from the high halves, so no element ever changes
/// place (and byte order does not matter). Returns how many elements it did.
template <class H, class Op>
inline std::size_t combine_half_lanes(H* out, const H* a, const H* b, std::size_t n) noexcept {
  using conv = half_simd::conv<H>;
  using u32xN = half_simd::u32xN;
  // A type that depends on H, so that TUTTI_VECTOR_OP's branches for other ops (the bitwise
  // ones, invalid on float) are discarded rather than checked.
  using f32xN = typename conv::f32;
  constexpr std::size_t w = sizeof(u32xN) / sizeof(H);
  const std::size_t end = n / w * w;
  for (std::size_t i = 0; i < end; i += w) {
    u32xN va, vb;
    std::memcpy(&va, a + i, sizeof va);
    std::memcpy(&vb, b + i, sizeof vb);
    u32xN alo = va, ahi = va, blo = vb, bhi = vb;
    conv::widen_lo(alo);
    conv::widen_hi(ahi);
    conv::widen_lo(blo);
    conv::widen_hi(bhi);
    f32xN xlo = (f32xN)alo, xhi = (f32xN)ahi;
    const f32xN ylo = (f32xN)blo, yhi = (f32xN)bhi;
    TUTTI_VECTOR_OP(xlo, ylo);
    TUTTI_VECTOR_OP(xhi, yhi);
    u32xN rlo = (u32xN)xlo, rhi = (u32xN)xhi;
    conv::narrow_lo(rlo);
    conv::narrow_hi(rhi);
    const u32xN r = rlo | rhi;
    std::memcpy(static_cast<void*>(out + i), &r, sizeof r);  // H is trivially copyable
  }
  return end;
}

#ifdef __F16C__
/// combine_half's vectors for float16, in the hardware conversions; two vectors per iteration.
/// Returns how many elements it did.
template <class H, class Op>
inline std::size_t combine_half_hw(H* out, const H* a, const H* b, std::size_t n) noexcept {
  using hw = half_simd::hw<H>;
  using f32 = typename hw::f32;  // depends on H: see combine_half_lanes
  constexpr std::size_t w = hw::width;
  const std::size_t end = n / (2 * w) * (2 * w);
  for (std::size_t i = 0; i < end; i += 2 * w) {
    f32 x0, x1, y0, y1;
    hw::widen(x0, a + i);
    hw::widen(x1, a + i + w);
    hw::widen(y0, b + i);
    hw::widen(y1, b + i + w);
    TUTTI_VECTOR_OP(x0, y0);
    TUTTI_VECTOR_OP(x1, y1);
    hw::narrow(out + i, x0);
    hw::narrow(out + i + w, x1);
  }
  return end;
}
#endif
#endif

/// float16/bfloat16: widen to float, combine in float, narrow with round to nearest even. Vectors
/// as far as they go (float16 in the hardware conversions where the target has them), the tail
/// element by element in the scalar conversions.
template <class H, class Op>
inline void combine_half(H* out, const H* a, const H* b, std::size_t n, const Op& op) noexcept {
  std::size_t i = 0;
#if defined(TUTTI_HAVE_VECTOR_EXT) && defined(__F16C__)
  if constexpr (std::is_same_v<H, float16>) i = combine_half_hw<H, Op>(out, a, b, n);
  else i = combine_half_lanes<H, Op>(out, a, b, n);
#elif defined(TUTTI_HAVE_VECTOR_EXT)
  i = combine_half_lanes<H, Op>(out, a, b, n);
#endif
  for (; i < n; ++i)
    out[i].bits = H::from_float(op(H::to_float(a[i].bits), H::to_float(b[i].bits)));
}

#ifdef TUTTI_HAVE_VECTOR_EXT
#undef TUTTI_VECTOR_OP
#endif

/// out[i] = op(a[i], b[i]) for i < n. `out` may equal `a` or `b`; no other overlap is allowed.
template <class T, class Op>
inline void combine(T* out, const T* a, const T* b, std::size_t n, const Op& op) {
  if constexpr ((std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)&&op_traits<
                    Op>::builtin) {
    combine_half(out, a, b, n, op);
#ifdef TUTTI_HAVE_VECTOR_EXT
  } else if constexpr (simd_op<Op, T>) {
    combine_simd(out, a, b, n, op);
#endif
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  }
}

/// Whether `Op` folds k inputs itself (a static `fold(out, rows, k, n)`, as
/// `op::reproducible_sum`): a schedule that reads all ranks' values at once (shared_memory's
/// `reduce_from`) must then call it rather than combine them two at a time.
template <class T, class Op>
inline constexpr bool folds_itself = requires(T* out, const T* const* rows, int k, std::size_t n) { Op::fold(out, rows, k, n); };

/// out[i] = ((rows[0][i] ∘ rows[1][i]) ∘ rows[2][i]) ∘ … ∘ rows[k−1][i] for i < n: the serial
/// left fold of `op::ordered`, in pieces that stay in cache. float16 and bfloat16 under a
/// built-in op are widened to float, folded in float and rounded once (what a serial loop that
/// accumulates in float gives); other types fold in `T` through `combine`. An op with a static
/// `fold(out, rows, k, n)` (`op::reproducible_sum`) folds itself. `out` may be `rows[0]`; k >= 1.
template <class T, class Op>
void fold_rows(T* out, const T* const* rows, int k, std::size_t n, const Op& op) {
  if constexpr (folds_itself<T, Op>) {
    Op::fold(out, rows, k, n);
  } else if constexpr ((std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)&&op_traits<Op>::builtin) {
    constexpr std::size_t piece = 1024;
    float acc[piece];
    for (std::size_t at = 0; at < n; at += piece) {
      const std::size_t m = n - at < piece ? n - at : piece;
      for (std::size_t i = 0; i < m; ++i) acc[i] = T::to_float(rows[0][at + i].bits);
      for (int r = 1; r < k; ++r) {
        const T* row = rows[r] + at;
        for (std::size_t i = 0; i < m; ++i) acc[i] = op(acc[i], T::to_float(row[i].bits));
      }
      for (std::size_t i = 0; i < m; ++i) out[at + i].bits = T::from_float(acc[i]);
    }
  } else {
    if (k == 1) {
      if (out != rows[0]) std::memcpy(static_cast<void*>(out), rows[0], n * sizeof(T));
      return;
    }
    constexpr std::size_t piece = sizeof(T) >= 16384 ? 1 : 16384 / sizeof(T);
    for (std::size_t at = 0; at < n; at += piece) {
      const std::size_t m = n - at < piece ? n - at : piece;
      combine(out + at, rows[0] + at, rows[1] + at, m, op);
      for (int r = 2; r < k; ++r) combine(out + at, out + at, rows[r] + at, m, op);
    }
  }
}

// ---- the erased form --------------------------------------------------------------------------
// Element types and ops with the type taken out, so that a schedule is compiled once per element
// size instead of once per element type and op. `elem<S>` is S opaque bytes; `erased_op` holds
// the typed kernel (`combine<T, Op>`) behind a function pointer, called once per piece a schedule
// reduces (never per element), so the inner loop stays the vectorised typed kernel. The
// communicator's call path turns a host-memory call into these before it runs a schedule of
// tutti's; schedules never dereference elements, so they run unchanged.

/// S bytes standing for one element of a type of that size.
template <std::size_t S>
struct elem {
  unsigned char bytes[S];
};

/// A reduce op with its element type taken out: `combine(out, a, b, n)` runs the typed kernel.
struct erased_op {
  using combine_fn = void (*)(const void* op, void* out, const void* a, const void* b, std::size_t n);
  using fold_fn = void (*)(void* out, const void* const* rows, int k, std::size_t n);
  combine_fn fn = nullptr;
  const void* op = nullptr;  ///< the user's op object (it may have state)
  fold_fn fold = nullptr;    ///< the op's own k-way fold (`folds_itself`), or null
};

/// The typed kernels behind an erased op.
template <class T, class Op>
void combine_typed(const void* op, void* out, const void* a, const void* b, std::size_t n) {
  combine(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n, *static_cast<const Op*>(op));
}
template <class T, class Op>
void fold_typed(void* out, const void* const* rows, int k, std::size_t n) {
  Op::fold(static_cast<T*>(out), reinterpret_cast<const T* const*>(rows), k, n);
}

/// `op` on elements of type `T`, erased; `op` must outlive the erased op (the call).
template <class T, class Op>
erased_op erase_op(const Op& op) noexcept {
  if constexpr (folds_itself<T, Op>) return {&combine_typed<T, Op>, &op, &fold_typed<T, Op>};
  else return {&combine_typed<T, Op>, &op, nullptr};
}

/// Whether `op` folds k inputs itself (for an erased op: whether its op did).
template <class T, class Op>
inline bool has_own_fold(const Op& op) noexcept {
  if constexpr (std::is_same_v<Op, erased_op>) return op.fold != nullptr;
  else return (void)op, folds_itself<T, Op>;
}

/// The op's own fold (`has_own_fold`), through the erased op's typed kernel.
template <class T>
inline void fold_rows(T* out, const T* const* rows, int k, std::size_t n, const erased_op& op) {
  op.fold(out, reinterpret_cast<const void* const*>(rows), k, n);
}

/// out[i] = op(a[i], b[i]) for i < n, through the erased op's typed kernel.
template <std::size_t S>
inline void combine(elem<S>* out, const elem<S>* a, const elem<S>* b, std::size_t n, const erased_op& op) {
  op.fn(op.op, out, a, b, n);
}

}  // namespace tutti::detail
