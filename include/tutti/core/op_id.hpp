/// \file
/// Reduce-op identity on the wire: the ids of the built-in ops and their names, so a fingerprint
/// can say "rank 0 reduced with max, rank 1 with sum" without knowing the ops themselves
/// (`op/ops.hpp` maps each op type to its id).
#pragma once

#include <cstdint>
#include <iterator>
#include <string_view>

namespace tutti {

namespace detail {
/// The built-in ops' ids, in this order: 0 is "no op"; user ops get a hash with the top bit set.
inline constexpr std::string_view builtin_op_names[] = {"none", "sum", "prod", "min", "max",
                                                        "band", "bor", "bxor", "avg"};
}  // namespace detail

namespace detail {
/// `op::ordered<Op>` of a built-in `Op` has the id 0x100 + Op's (ops.hpp).
inline constexpr std::uint32_t ordered_op_base = 0x100;
inline constexpr std::string_view ordered_op_names[] = {"ordered", "ordered<sum>", "ordered<prod>", "ordered<min>",
                                                        "ordered<max>", "ordered<band>", "ordered<bor>",
                                                        "ordered<bxor>", "ordered<avg>"};
}  // namespace detail

/// The op name of an id, or "user op" (for error messages).
constexpr std::string_view op_name(std::uint32_t id) noexcept {
  if (id < std::size(detail::builtin_op_names)) return detail::builtin_op_names[id];
  if (id >= detail::ordered_op_base && id - detail::ordered_op_base < std::size(detail::ordered_op_names))
    return detail::ordered_op_names[id - detail::ordered_op_base];
  return "user op";
}

}  // namespace tutti
