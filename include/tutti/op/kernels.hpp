/// \file
/// Reduction kernels: `combine(out, a, b, n, op)` computes out[i] = op(a[i], b[i]); `out` may be
/// `a` or `b` (in place). Built-in ops on built-in arithmetic types run on 64-byte SIMD vectors
/// (GCC/Clang vector extensions: AVX-512 or AVX2 or SSE, whatever the compiler targets), four
/// vectors per iteration. float16/bfloat16 widen to float, combine, and narrow with round to
/// nearest even. Anything else (user ops, user types) is a plain loop the compiler may vectorise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tutti/core/float16.hpp"
#include "tutti/op/ops.hpp"

namespace tutti::detail {

template <class T>
inline constexpr bool simd_element =
    std::is_arithmetic_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, long double>;

template <class Op, class T>
inline constexpr bool simd_op = op_traits<Op>::builtin && simd_element<T> &&
                                (!is_bitwise_op<Op> || std::is_integral_v<T>);

#if defined(__GNUC__) || defined(__clang__)
#define TUTTI_HAVE_VECTOR_EXT 1
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
  using vec [[gnu::vector_size(64)]] = T;
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

/// The 16-bit conversions on 16 lanes at once: the exact functions of float16.hpp, written
/// without branches (every lane computes every case, then a mask picks one), so they vectorise.
/// Results are bitwise identical to H::to_float / H::from_float, independent of the FP
/// environment (rounding mode, FTZ/DAZ): only integer operations, and one exact int-to-float
/// conversion and one exact scaling for float16 subnormals.
namespace half_simd {
using u16x16 [[gnu::vector_size(32)]] = std::uint16_t;
using u32x16 [[gnu::vector_size(64)]] = std::uint32_t;
using i32x16 [[gnu::vector_size(64)]] = std::int32_t;
using f32x16 [[gnu::vector_size(64)]] = float;
inline constexpr std::size_t width = 16;
// Comparisons are signed, on values below 2^31: x86 before AVX-512 has no unsigned compare.
/// f32x16, spelled so that it depends on H: then TUTTI_VECTOR_OP's branches for other ops (the
/// bitwise ones, invalid on float) are discarded rather than checked.
template <class H>
struct vec {
  using f32x16 = half_simd::f32x16;
};

// Vectors are passed by reference only, so nothing depends on the target's vector ABI.
inline void widen(f32x16& x, const bfloat16* p) noexcept {
  u16x16 h;
  std::memcpy(&h, p, sizeof h);
  const u32x16 u = __builtin_convertvector(h, u32x16) << 16;
  std::memcpy(&x, &u, sizeof x);
}

inline void narrow(bfloat16* p, const f32x16& x) noexcept {
  u32x16 u;
  std::memcpy(&u, &x, sizeof u);
  const u32x16 nan = (i32x16)(u & 0x7fffffffu) > 0x7f800000;  // all ones where NaN
  const u32x16 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const u32x16 r = (nan & ((u >> 16) | 0x40u)) | (~nan & rounded);
  const u16x16 h = __builtin_convertvector(r, u16x16);
  std::memcpy(static_cast<void*>(p), &h, sizeof h);  // bfloat16 is trivially copyable
}

inline void widen(f32x16& x, const float16* p) noexcept {
  u16x16 h16;
  std::memcpy(&h16, p, sizeof h16);
  const u32x16 h = __builtin_convertvector(h16, u32x16);
  const u32x16 sign = (h & 0x8000u) << 16;
  const u32x16 exp = (h >> 10) & 0x1fu;
  const u32x16 mant = h & 0x3ffu;
  const u32x16 infnan = sign | 0x7f800000u | (mant << 13);
  const u32x16 normal = sign | ((exp + 112u) << 23) | (mant << 13);
  // Subnormal or zero: mant * 2^-24, exact (mant < 2^10 converts exactly; the product is a
  // normal float or zero), with the sign or-ed in (the scalar code's sign ? -v : v).
  const i32x16 imant = (i32x16)mant;
  const f32x16 sub = __builtin_convertvector(imant, f32x16) * 5.9604644775390625e-8f;
  const u32x16 subnormal = (u32x16)sub | sign;
  const u32x16 is_infnan = exp == 0x1fu, is_zero_exp = exp == 0u;
  const u32x16 u =
      (is_infnan & infnan) | (is_zero_exp & subnormal) | (~(is_infnan | is_zero_exp) & normal);
  std::memcpy(&x, &u, sizeof x);
}

inline void narrow(float16* p, const f32x16& x) noexcept {
  u32x16 u;
  std::memcpy(&u, &x, sizeof u);
  const u32x16 sign = (u >> 16) & 0x8000u;
  const u32x16 a = u & 0x7fffffffu;
  // a >= 2^-14: rebias the exponent 127 -> 15, round to nearest even on the 13 dropped bits.
  const u32x16 rebiased = a - 0x38000000u;
  const u32x16 normal = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
  // 2^-25 <= a < 2^-14: the 24-bit significand shifted right by 14..24, rounded to nearest even
  // (adding half - 1 plus the kept lsb, then truncating). The shift is masked into 0..31 so it
  // stays defined in lanes that take another case.
  const u32x16 shift = (126u - (a >> 23)) & 31u;
  const u32x16 mant = (a & 0x7fffffu) | 0x800000u;
  const u32x16 subnormal = (mant + (((1u << shift) >> 1) - 1u) + ((mant >> shift) & 1u)) >> shift;
  const i32x16 sa = (i32x16)a;
  const u32x16 is_nan = sa > 0x7f800000, is_inf = sa >= 0x477ff000, is_sub = sa < 0x38800000,
               is_zero = sa < 0x33000000;
  const u32x16 r = (is_nan & 0x7e00u) | (~is_nan & is_inf & 0x7c00u) |
                   (is_sub & ~is_zero & subnormal) | (~is_inf & ~is_sub & normal);
  const u16x16 h = __builtin_convertvector(r | sign, u16x16);
  std::memcpy(static_cast<void*>(p), &h, sizeof h);  // float16 is trivially copyable
}
}  // namespace half_simd
#endif

/// float16/bfloat16: widen to float, combine in float, narrow with round to nearest even; 32
/// elements per iteration, the tail element by element with the same scalar conversions.
template <class H, class Op>
inline void combine_half(H* out, const H* a, const H* b, std::size_t n, const Op& op) noexcept {
  std::size_t i = 0;
#ifdef TUTTI_HAVE_VECTOR_EXT
  using f32x16 = typename half_simd::vec<H>::f32x16;
  constexpr std::size_t w = half_simd::width;
  for (; i + 2 * w <= n; i += 2 * w) {
    f32x16 x0, x1, y0, y1;
    half_simd::widen(x0, a + i);
    half_simd::widen(x1, a + i + w);
    half_simd::widen(y0, b + i);
    half_simd::widen(y1, b + i + w);
    TUTTI_VECTOR_OP(x0, y0);
    TUTTI_VECTOR_OP(x1, y1);
    half_simd::narrow(out + i, x0);
    half_simd::narrow(out + i + w, x1);
  }
  for (; i + w <= n; i += w) {
    f32x16 x, y;
    half_simd::widen(x, a + i);
    half_simd::widen(y, b + i);
    TUTTI_VECTOR_OP(x, y);
    half_simd::narrow(out + i, x);
  }
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

}  // namespace tutti::detail
