/// \file
/// The collective table: every operation tutti sequences, once, with what the rest of the library
/// needs to know about it. Everything that lists collectives derives from this table: the
/// fingerprint's names, `algorithm_for`, `automatic` (its `TUTTI_ALGO` parser, `explain`, the
/// tuned table), the transports' bound checks on the wire, tutti-bench and its `--tune`.
///
/// Adding a collective: a row here (and its enumerator), its schedule signature in
/// `algorithm/algorithm.hpp` (`schedule_probe`), its call on `communicator`, and its measuring
/// code in tutti-bench; then the schedules and the tests (docs/EXTENDING.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace tutti {

/// The operations a fingerprint can name: the scheduled collectives first (in table order), then
/// point to point and group agreement, which no algorithm schedules.
enum class collective : std::uint8_t {
  broadcast,
  reduce,
  all_reduce,
  gather,
  all_gather,
  scatter,
  all_to_all,
  reduce_scatter,
  barrier,
  all_gather_v,
  gather_v,
  scatter_v,
  all_to_all_v,
  reduce_scatter_v,
  send_recv,  ///< point-to-point (not sequenced)
  group,      ///< new_group / split agreement
};

/// How a collective's element counts are given.
enum class counts_kind : std::uint8_t {
  none,      ///< no data (barrier)
  uniform,   ///< one count every rank agrees on
  per_rank,  ///< a count per rank (the v-collectives): blocks in rank order, offsets the prefix sums
};

/// What the size `automatic` chooses by is, for a call of this collective (`comm.explain`'s bytes).
enum class size_basis : std::uint8_t {
  none,           ///< no data: 0 (barrier)
  buffer,         ///< the whole buffer (broadcast, reduce, all_reduce; reduce_scatter's input)
  block,          ///< one rank's block (gather, all_gather, scatter, all_to_all)
  largest_block,  ///< the largest rank's block: every rank knows the counts (all_gather_v, reduce_scatter_v)
  unknown,        ///< no size every rank knows (gather_v, scatter_v: counts at the root; all_to_all_v:
                  ///< each rank its own row): `automatic` chooses without one (as for 0 bytes)
};

/// How much of its data a rank must move, for bus bandwidth (as nccl-tests counts it): the
/// factor that turns algorithm bandwidth into a figure comparable across collectives and sizes.
enum class traffic : std::uint8_t {
  none,          ///< no data (barrier, point to point)
  whole,         ///< 1: the buffer crosses once (broadcast, reduce)
  share,         ///< (p-1)/p: all but a rank's own block (gather, all_gather, scatter, ...)
  reduce_share,  ///< 2(p-1)/p: reduce-scatter then all-gather (all_reduce)
};

/// One row of the table.
struct collective_info {
  collective id;
  std::string_view name;
  bool rooted;       ///< has a root rank (every rank passes the same)
  bool reduces;      ///< takes a reduce op
  counts_kind counts;
  size_basis size;
  bool scheduled;    ///< run by an algorithm's schedule (false: point to point, group agreement)
  traffic bus = traffic::none;
};

/// The bus bandwidth factor of `t` on `p` ranks.
constexpr double bus_factor(traffic t, int p) noexcept {
  switch (t) {
    case traffic::whole: return 1.0;
    case traffic::share: return p > 0 ? static_cast<double>(p - 1) / p : 0.0;
    case traffic::reduce_share: return p > 0 ? 2.0 * (p - 1) / p : 0.0;
    default: return 0.0;
  }
}

/// The table, in enumerator order.
inline constexpr collective_info collectives[] = {
    {collective::broadcast, "broadcast", true, false, counts_kind::uniform, size_basis::buffer, true, traffic::whole},
    {collective::reduce, "reduce", true, true, counts_kind::uniform, size_basis::buffer, true, traffic::whole},
    {collective::all_reduce, "all_reduce", false, true, counts_kind::uniform, size_basis::buffer, true, traffic::reduce_share},
    {collective::gather, "gather", true, false, counts_kind::uniform, size_basis::block, true, traffic::share},
    {collective::all_gather, "all_gather", false, false, counts_kind::uniform, size_basis::block, true, traffic::share},
    {collective::scatter, "scatter", true, false, counts_kind::uniform, size_basis::block, true, traffic::share},
    {collective::all_to_all, "all_to_all", false, false, counts_kind::uniform, size_basis::block, true, traffic::share},
    {collective::reduce_scatter, "reduce_scatter", false, true, counts_kind::uniform, size_basis::buffer, true, traffic::share},
    {collective::barrier, "barrier", false, false, counts_kind::none, size_basis::none, true},
    {collective::all_gather_v, "all_gather_v", false, false, counts_kind::per_rank, size_basis::largest_block, true, traffic::share},
    {collective::gather_v, "gather_v", true, false, counts_kind::per_rank, size_basis::unknown, true, traffic::share},
    {collective::scatter_v, "scatter_v", true, false, counts_kind::per_rank, size_basis::unknown, true, traffic::share},
    {collective::all_to_all_v, "all_to_all_v", false, false, counts_kind::per_rank, size_basis::unknown, true, traffic::share},
    {collective::reduce_scatter_v, "reduce_scatter_v", false, true, counts_kind::per_rank, size_basis::largest_block,
     true, traffic::share},
    {collective::send_recv, "send/recv", false, false, counts_kind::uniform, size_basis::none, false},
    {collective::group, "new_group/split", false, false, counts_kind::uniform, size_basis::none, false},
};

/// Every enumerator, and the scheduled ones (a prefix of the table).
inline constexpr std::size_t collective_count = std::size(collectives);
inline constexpr std::size_t scheduled_count = [] {
  std::size_t n = 0;
  while (n < collective_count && collectives[n].scheduled) ++n;
  return n;
}();

namespace detail {
constexpr bool table_in_order() {
  for (std::size_t i = 0; i < collective_count; ++i)
    if (static_cast<std::size_t>(collectives[i].id) != i || (collectives[i].scheduled != (i < scheduled_count)))
      return false;
  return true;
}
static_assert(table_in_order(), "tutti::collectives must list every collective in enumerator order, scheduled ones first");
}  // namespace detail

/// Whether `c` names an entry of the table (a byte off the wire may not).
constexpr bool is_collective(std::underlying_type_t<collective> c) noexcept { return c < collective_count; }

/// The row of `c`.
constexpr const collective_info& info(collective c) noexcept { return collectives[static_cast<std::size_t>(c)]; }

constexpr std::string_view collective_name(collective c) noexcept {
  return is_collective(static_cast<std::uint8_t>(c)) ? info(c).name : std::string_view("unknown collective");
}

/// The scheduled collective named `n` (as `collective_name` spells it), if any.
constexpr std::optional<collective> collective_named(std::string_view n) noexcept {
  for (std::size_t i = 0; i < scheduled_count; ++i)
    if (collectives[i].name == n) return collectives[i].id;
  return std::nullopt;
}

/// "broadcast, reduce, ... or reduce_scatter_v": the scheduled collectives, for messages.
inline std::string_view scheduled_names() {
  static const auto text = [] {
    std::array<char, 512> buf{};
    std::size_t at = 0;
    for (std::size_t i = 0; i < scheduled_count; ++i) {
      const std::string_view sep = i == 0 ? "" : i + 1 == scheduled_count ? " or " : ", ";
      for (char ch : sep) buf[at++] = ch;
      for (char ch : collectives[i].name) buf[at++] = ch;
    }
    return std::pair{buf, at};
  }();
  return {text.first.data(), text.second};
}

/// `f(std::integral_constant<collective, C>{})` for every scheduled collective, in table order.
template <class F>
constexpr void for_each_collective(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(std::integral_constant<collective, static_cast<collective>(I)>{}), ...);
  }(std::make_index_sequence<scheduled_count>{});
}

/// `f(std::integral_constant<collective, C>{})` for the scheduled collective `c` (run-time to
/// compile-time), returning what `f` returns.
template <class F>
constexpr decltype(auto) with_collective(collective c, F&& f) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
    using R = decltype(f(std::integral_constant<collective, collective::broadcast>{}));
    if constexpr (std::is_void_v<R>) {
      (void)((static_cast<std::size_t>(c) == I ? (f(std::integral_constant<collective, static_cast<collective>(I)>{}), true)
                                                : false) ||
             ...);
    } else {
      R out{};
      (void)((static_cast<std::size_t>(c) == I
                  ? (out = f(std::integral_constant<collective, static_cast<collective>(I)>{}), true)
                  : false) ||
             ...);
      return out;
    }
  }(std::make_index_sequence<scheduled_count>{});
}

}  // namespace tutti
