/// \file
/// Reduction kernels: `combine(out, a, b, n, op)` computes out[i] = op(a[i], b[i]); `out` may be
/// `a` or `b` (in place). Built-in ops on built-in arithmetic types run on 64-byte SIMD vectors
/// (GCC/Clang vector extensions: AVX-512 or AVX2 or SSE, whatever the compiler targets), four
/// vectors per iteration. float16/bfloat16 widen to float, combine, and narrow with round to
/// nearest even. Anything else (user ops, user types) is a plain loop the compiler may vectorise.
#pragma once

#include <cstddef>
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
#undef TUTTI_VECTOR_OP
#endif

/// float16/bfloat16: widen a block to float, combine in float, narrow once.
template <class H, class Op>
inline void combine_half(H* out, const H* a, const H* b, std::size_t n, const Op& op) noexcept {
  constexpr std::size_t block = 256;
  float fa[block], fb[block];
  for (std::size_t i = 0; i < n; i += block) {
    const std::size_t m = n - i < block ? n - i : block;
    for (std::size_t k = 0; k < m; ++k) {
      fa[k] = H::to_float(a[i + k].bits);
      fb[k] = H::to_float(b[i + k].bits);
    }
#ifdef TUTTI_HAVE_VECTOR_EXT
    combine_simd(fa, fa, fb, m, op);
#else
    for (std::size_t k = 0; k < m; ++k) fa[k] = op(fa[k], fb[k]);
#endif
    for (std::size_t k = 0; k < m; ++k) out[i + k].bits = H::from_float(fa[k]);
  }
}

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
