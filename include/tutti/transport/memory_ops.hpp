/// \file
/// The memory seam: the only way tutti's schedules and the communicator copy, reduce and scale
/// elements. On host memory these are memcpy and the SIMD kernels (`op/kernels.hpp`); a
/// transport whose memory the CPU may not touch (`own_memory`) supplies its own.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "tutti/detail/copy.hpp"
#include "tutti/op/kernels.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/capabilities.hpp"

namespace tutti::detail {

/// `bytes` from `src` to `dst` (distinct or identical: identical is a no-op).
template <class Transport>
void copy_bytes(Transport& t, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if constexpr (own_memory<Transport>) t.copy(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), bytes);
  else copy_host(dst, src, bytes);
}

/// out[i] = op(a[i], b[i]) for i < n; `out` may be `a` or `b`.
template <class Transport, class T, class Op>
void combine_elements(Transport& t, T* out, const T* a, const T* b, std::size_t n, const Op& op) {
  if constexpr (own_memory<Transport>) t.combine(out, a, b, n, op);
  else detail::combine(out, a, b, n, op);
}

/// data[i] /= divisor for i < n (op::avg's one division, on the result).
template <class Transport, class T>
void divide_elements(Transport& t, T* data, std::size_t n, int divisor) {
  if constexpr (own_memory<Transport>) {
    t.divide(data, n, divisor);
  } else {
    using D = std::conditional_t<std::is_arithmetic_v<T>, T, float>;
    for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<T>(data[i] / static_cast<D>(divisor));
  }
}

}  // namespace tutti::detail
