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
    // Unsigned types narrower than int are promoted to int, where 65535 * 65535 overflows
    // (undefined behaviour): they multiply as unsigned int, which wraps as they do.
    if constexpr (std::is_unsigned_v<T> && sizeof(T) < sizeof(unsigned))
      return static_cast<T>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
    else
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

namespace op {
/// `Op` applied in rank order: every element's result is bitwise the serial left fold
/// `((x0 ∘ x1) ∘ x2) ∘ … ∘ x(p−1)` over the ranks' values, whatever the algorithm, message size,
/// chunking, transport or fusion (reduce, all_reduce, reduce_scatter and their v-forms; scan and
/// exscan are in rank order for every op). Each rank's values are moved raw to where they are
/// reduced, and reduced there in one fixed order; `Op` need be neither commutative nor
/// associative. float16 and bfloat16 accumulate in float and round once, at the end, as
/// `detail::fold_rows` says. `ordered<op::sum>` is the common case (`op::ordered_sum`).
template <class Op>
struct ordered {
  static constexpr std::string_view name = "ordered";
  Op op{};
  template <class T>
  constexpr T operator()(const T& a, const T& b) const {
    return op(a, b);
  }
};
using ordered_sum = ordered<sum>;
}  // namespace op

namespace detail {
/// Whether `Op` is reduced by moving every rank's values raw to where they are reduced, in one
/// fixed order (`op::ordered<Inner>`, or an op with a `rank_ordered` member that is true, such as
/// `op::reproducible_sum`): the communicator runs such calls through `run_ordered`.
template <class Op>
struct ordered_of {
  static constexpr bool value = requires { requires Op::rank_ordered; };
  using inner = Op;
};
template <class Op>
struct ordered_of<op::ordered<Op>> {
  static constexpr bool value = true;
  using inner = Op;
};
template <class Op>
inline constexpr bool rank_ordered_op = ordered_of<Op>::value;
/// The op an `ordered` op applies (`Op` itself for any other).
template <class Op>
using inner_op_t = typename ordered_of<Op>::inner;
}  // namespace detail

/// `op::ordered<Op>`: its own id (so a rank that passes `Op` plain and one that passes it
/// ordered get a mismatch error), derived from `Op`'s.
template <class Op>
struct op_traits<op::ordered<Op>> {
  static constexpr bool builtin = false;
  static std::uint32_t id() noexcept {
    return op_traits<Op>::builtin ? detail::ordered_op_base + op_traits<Op>::id() : op_traits<Op>::id() ^ 0x40000000u;
  }
  static std::string_view name() noexcept { return "ordered"; }
};

/// A reduce op for element type `T`: a copyable function object callable as `T(T, T)`.
/// The bitwise built-ins only apply to integral types.
template <class Op, class T>
concept reduce_op =
    std::copy_constructible<Op> && std::is_invocable_r_v<T, const Op&, const T&, const T&> &&
    (!detail::is_bitwise_op<Op> || std::is_integral_v<T>);

}  // namespace tutti
