/// \file
/// Reduce ops. The built-ins are small function objects, generic over the element type (the
/// kernels run the built-ins on SIMD vectors; compiled by nvcc they are device functions too,
/// for the device transports' kernels). Any user function object callable
/// as `T(T, T)` on a trivially copyable `T` is a reduce op too; ops are assumed associative and
/// commutative, as in MPI and torch.distributed (algorithms reorder operands).
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <typeinfo>

#include "tutti/core/dtype.hpp"
#include "tutti/core/op_id.hpp"
#include "tutti/detail/attributes.hpp"

namespace tutti {

namespace op {

/// a + b
struct sum {
  static constexpr std::string_view name = "sum";
  template <class T>
  TUTTI_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const {
    return static_cast<T>(a + b);
  }
};
/// a * b
struct prod {
  static constexpr std::string_view name = "prod";
  template <class T>
  TUTTI_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const {
    return static_cast<T>(a * b);
  }
};
/// the smaller of a and b
struct min {
  static constexpr std::string_view name = "min";
  template <class T>
  TUTTI_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const {
    return b < a ? b : a;
  }
};
/// the larger of a and b
struct max {
  static constexpr std::string_view name = "max";
  template <class T>
  TUTTI_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const {
    return a < b ? b : a;
  }
};
/// bitwise and (integral element types only)
struct band {
  static constexpr std::string_view name = "band";
  template <class T>
  TUTTI_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const {
    return static_cast<T>(a & b);
  }
};
/// bitwise or (integral element types only)
struct bor {
  static constexpr std::string_view name = "bor";
  template <class T>
  TUTTI_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const {
    return static_cast<T>(a | b);
  }
};
/// bitwise xor (integral element types only)
struct bxor {
  static constexpr std::string_view name = "bxor";
  template <class T>
  TUTTI_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const {
    return static_cast<T>(a ^ b);
  }
};
/// the mean over ranks: reduced as a sum, then divided by the group size (integer division for
/// integral types), like torch's ReduceOp.AVG.
struct avg {
  static constexpr std::string_view name = "avg";
  template <class T>
  TUTTI_HOST_DEVICE constexpr T operator()(const T& a, const T& b) const {
    return static_cast<T>(a + b);
  }
};

}  // namespace op

namespace detail {
template <class Op>
inline constexpr std::uint32_t builtin_op_id = 0;
template <>
inline constexpr std::uint32_t builtin_op_id<op::sum> = 1;
template <>
inline constexpr std::uint32_t builtin_op_id<op::prod> = 2;
template <>
inline constexpr std::uint32_t builtin_op_id<op::min> = 3;
template <>
inline constexpr std::uint32_t builtin_op_id<op::max> = 4;
template <>
inline constexpr std::uint32_t builtin_op_id<op::band> = 5;
template <>
inline constexpr std::uint32_t builtin_op_id<op::bor> = 6;
template <>
inline constexpr std::uint32_t builtin_op_id<op::bxor> = 7;
template <>
inline constexpr std::uint32_t builtin_op_id<op::avg> = 8;

template <class Op>
inline constexpr bool is_bitwise_op =
    std::is_same_v<Op, op::band> || std::is_same_v<Op, op::bor> || std::is_same_v<Op, op::bxor>;
}  // namespace detail

/// What tutti knows about an op: a stable id (for the fingerprint) and a name.
template <class Op>
struct op_traits {
  static constexpr bool builtin = detail::builtin_op_id<Op> != 0;
  static std::uint32_t id() noexcept {
    if constexpr (builtin) {
      return detail::builtin_op_id<Op>;
    } else {
      static const std::uint32_t h =
          static_cast<std::uint32_t>(detail::fnv1a(typeid(Op).name()) | 0x80000000u);
      return h;
    }
  }
  static std::string_view name() noexcept {
    if constexpr (requires { Op::name; }) {
      return Op::name;
    } else {
      return "user op";
    }
  }
};

/// A reduce op for element type `T`: a copyable function object callable as `T(T, T)`.
/// The bitwise built-ins only apply to integral types.
template <class Op, class T>
concept reduce_op =
    std::copy_constructible<Op> && std::is_invocable_r_v<T, const Op&, const T&, const T&> &&
    (!detail::is_bitwise_op<Op> || std::is_integral_v<T>);

}  // namespace tutti
