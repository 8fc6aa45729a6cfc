/// \file
/// The collective table: every operation tutti sequences, once, with everything the rest of the
/// library needs to know about it. Everything that lists collectives derives from this table:
/// the communicator's call path (its argument checks, the fingerprint, the one-rank shortcut,
/// which schedule member it calls), `algorithm_for`, `automatic` (its `TUTTI_ALGO` parser,
/// `explain`, the tuned table), the transports' bound checks on the wire, tutti-bench and the
/// conformance suite (their buffers and references come from a row's `layout` and `result`).
///
/// Adding a collective (docs/EXTENDING.md): its enumerator (a new wire value), its row, its
/// `schedule_call`; its public member on the communicator (group/collectives.hpp); then its
/// schedules, and a reference for its `result` kind in the conformance suite if the kind is new.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace tutti {

/// The operations a fingerprint can name. The values travel on the wire: they are explicit, the
/// scheduled collectives are 0, 1, 2, ... in table order, and changing any of them changes
/// `collective_wire_version` (checked below).
enum class collective : std::uint8_t {
  broadcast = 0,
  reduce = 1,
  all_reduce = 2,
  gather = 3,
  all_gather = 4,
  scatter = 5,
  all_to_all = 6,
  reduce_scatter = 7,
  barrier = 8,
  all_gather_v = 9,
  gather_v = 10,
  scatter_v = 11,
  all_to_all_v = 12,
  reduce_scatter_v = 13,
  scan = 14,
  exscan = 15,
  send_recv = 64,  ///< point-to-point (not sequenced)
  group = 65,      ///< new_group / split agreement
};

/// How a collective's element counts are given.
enum class counts_kind : std::uint8_t {
  none,      ///< no data (barrier)
  uniform,   ///< one count every rank agrees on
  per_rank,  ///< a count per rank (the v-collectives): blocks in rank order, offsets the prefix sums
};

/// Where the per-rank counts of a v-collective are passed (`counts_kind::per_rank`).
enum class counts_at : std::uint8_t {
  none,        ///< no per-rank counts
  every_rank,  ///< every rank passes the same counts (agreed through the fingerprint's digest)
  root,        ///< the root's counts matter; the others may pass none
  own_row,     ///< each rank its own: what it sends to each rank and receives from each
};

/// What the size `automatic` chooses by is, for a call of this collective (`comm.explain`'s bytes).
enum class size_basis : std::uint8_t {
  none,           ///< no data: 0 (barrier)
  buffer,         ///< the whole buffer (broadcast, reduce, all_reduce, the scans; reduce_scatter's input)
  block,          ///< one rank's block (gather, all_gather, scatter, all_to_all)
  largest_block,  ///< the largest rank's block: every rank knows the counts (all_gather_v, reduce_scatter_v)
  unknown,        ///< no size every rank knows (gather_v, scatter_v: counts at the root; all_to_all_v:
                  ///< each rank its own row): `automatic` chooses without one (as for 0 bytes)
};

/// How much of its data a rank must move, for bus bandwidth (as nccl-tests counts it): the
/// factor that turns algorithm bandwidth into a figure comparable across collectives and sizes.
enum class traffic : std::uint8_t {
  none,          ///< no data (barrier, point to point)
  whole,         ///< 1: the buffer crosses once (broadcast, reduce, the scans)
  share,         ///< (p-1)/p: all but a rank's own block (gather, all_gather, scatter, ...)
  reduce_share,  ///< 2(p-1)/p: reduce-scatter then all-gather (all_reduce)
};

/// How many elements a buffer of a call holds, given the call's count n (uniform collectives) or
/// its per-rank counts (v-collectives).
enum class extent : std::uint8_t {
  none,    ///< no such buffer
  count,   ///< n (for collectives of one buffer, that buffer)
  blocks,  ///< size() · n: a block of n per rank, in rank order
  own,     ///< counts[rank]: this rank's block (a size the peers expect: else mismatch_error)
  room,    ///< at least the sum of the counts
  total,   ///< exactly the sum of the counts
};

/// How a call's input and output may share memory.
enum class aliasing : std::uint8_t {
  one_buffer,  ///< the call has one buffer (broadcast, reduce, in-place all_reduce)
  disjoint,    ///< in and out must not overlap
  same,        ///< in and out are the same memory (in place) or do not overlap
  own_block,   ///< the smaller may be exactly this rank's block of the larger (in place); nothing else
};

/// The buffers of a call: their sizes, where they matter, how they may overlap.
struct buffer_layout {
  extent in = extent::none;
  extent out = extent::none;
  /// The root's buffer of blocks (gather's out, scatter's in) matters only at the root; the
  /// other ranks may pass an empty one.
  bool blocks_at_root = false;
  aliasing overlap = aliasing::one_buffer;
};

/// What a collective computes: the reference every check compares against, the one-rank
/// shortcut, and where `op::avg`'s division applies (the result kinds that reduce).
enum class result_kind : std::uint8_t {
  none,               ///< no data (barrier, point to point, group agreement)
  copy_root,          ///< every rank gets the root's buffer (broadcast)
  reduce_to_root,     ///< the root gets the reduction of every rank's buffer (reduce)
  reduce_all,         ///< every rank gets the reduction (all_reduce)
  gather_to_root,     ///< the root gets every rank's block, in rank order (gather, gather_v)
  gather_all,         ///< every rank gets every rank's block (all_gather, all_gather_v)
  scatter_from_root,  ///< rank i gets block i of the root's buffer (scatter, scatter_v)
  transpose,          ///< block j of rank i goes to block i of rank j (all_to_all, all_to_all_v)
  reduce_blocks,      ///< rank i gets block i of the reduction (reduce_scatter, reduce_scatter_v)
  prefix_inclusive,   ///< rank r gets op over ranks 0..r, in rank order (scan)
  prefix_exclusive,   ///< rank r gets op over ranks 0..r-1, in rank order; rank 0's out is left as it was (exscan)
};

/// One row of the table.
struct collective_info {
  collective id;
  std::string_view name;
  bool rooted;   ///< has a root rank (every rank passes the same)
  bool reduces;  ///< takes a reduce op
  counts_kind counts;
  size_basis size;
  bool scheduled;  ///< run by an algorithm's schedule (false: point to point, group agreement)
  traffic bus = traffic::none;
  buffer_layout layout = {};
  result_kind result = result_kind::none;
  counts_at where = counts_at::none;
  /// The reduction must be formed in rank order (the scans): `op::avg` has no meaning there, and
  /// a non-commutative op gives the right result.
  bool ordered = false;
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

namespace detail {
using C = collective;
using E = extent;
using A = aliasing;
using R = result_kind;
}  // namespace detail

/// The table: the scheduled collectives in enumerator order, then the others.
inline constexpr collective_info collectives[] = {
    {collective::broadcast, "broadcast", true, false, counts_kind::uniform, size_basis::buffer, true, traffic::whole,
     {detail::E::none, detail::E::count, false, detail::A::one_buffer}, detail::R::copy_root},
    {collective::reduce, "reduce", true, true, counts_kind::uniform, size_basis::buffer, true, traffic::whole,
     {detail::E::none, detail::E::count, false, detail::A::one_buffer}, detail::R::reduce_to_root},
    {collective::all_reduce, "all_reduce", false, true, counts_kind::uniform, size_basis::buffer, true, traffic::reduce_share,
     {detail::E::count, detail::E::count, false, detail::A::same}, detail::R::reduce_all},
    {collective::gather, "gather", true, false, counts_kind::uniform, size_basis::block, true, traffic::share,
     {detail::E::count, detail::E::blocks, true, detail::A::own_block}, detail::R::gather_to_root},
    {collective::all_gather, "all_gather", false, false, counts_kind::uniform, size_basis::block, true, traffic::share,
     {detail::E::count, detail::E::blocks, false, detail::A::own_block}, detail::R::gather_all},
    {collective::scatter, "scatter", true, false, counts_kind::uniform, size_basis::block, true, traffic::share,
     {detail::E::blocks, detail::E::count, true, detail::A::own_block}, detail::R::scatter_from_root},
    {collective::all_to_all, "all_to_all", false, false, counts_kind::uniform, size_basis::block, true, traffic::share,
     {detail::E::blocks, detail::E::blocks, false, detail::A::disjoint}, detail::R::transpose},
    {collective::reduce_scatter, "reduce_scatter", false, true, counts_kind::uniform, size_basis::buffer, true, traffic::share,
     {detail::E::blocks, detail::E::count, false, detail::A::disjoint}, detail::R::reduce_blocks},
    {collective::barrier, "barrier", false, false, counts_kind::none, size_basis::none, true, traffic::none, {}, detail::R::none},
    {collective::all_gather_v, "all_gather_v", false, false, counts_kind::per_rank, size_basis::largest_block, true,
     traffic::share, {detail::E::own, detail::E::room, false, detail::A::own_block}, detail::R::gather_all,
     counts_at::every_rank},
    {collective::gather_v, "gather_v", true, false, counts_kind::per_rank, size_basis::unknown, true, traffic::share,
     {detail::E::own, detail::E::room, true, detail::A::own_block}, detail::R::gather_to_root, counts_at::root},
    {collective::scatter_v, "scatter_v", true, false, counts_kind::per_rank, size_basis::unknown, true, traffic::share,
     {detail::E::room, detail::E::own, true, detail::A::own_block}, detail::R::scatter_from_root, counts_at::root},
    {collective::all_to_all_v, "all_to_all_v", false, false, counts_kind::per_rank, size_basis::unknown, true,
     traffic::share, {detail::E::total, detail::E::total, false, detail::A::disjoint}, detail::R::transpose,
     counts_at::own_row},
    {collective::reduce_scatter_v, "reduce_scatter_v", false, true, counts_kind::per_rank, size_basis::largest_block,
     true, traffic::share, {detail::E::total, detail::E::own, false, detail::A::disjoint}, detail::R::reduce_blocks,
     counts_at::every_rank},
    {collective::scan, "scan", false, true, counts_kind::uniform, size_basis::buffer, true, traffic::whole,
     {detail::E::count, detail::E::count, false, detail::A::same}, detail::R::prefix_inclusive, counts_at::none, true},
    {collective::exscan, "exscan", false, true, counts_kind::uniform, size_basis::buffer, true, traffic::whole,
     {detail::E::count, detail::E::count, false, detail::A::same}, detail::R::prefix_exclusive, counts_at::none, true},
    {collective::send_recv, "send/recv", false, false, counts_kind::uniform, size_basis::none, false},
    {collective::group, "new_group/split", false, false, counts_kind::uniform, size_basis::none, false},
};

/// Every row, and the scheduled ones (a prefix of the table, their values 0 .. scheduled_count-1).
inline constexpr std::size_t collective_count = std::size(collectives);
inline constexpr std::size_t scheduled_count = [] {
  std::size_t n = 0;
  while (n < collective_count && collectives[n].scheduled) ++n;
  return n;
}();

namespace detail {
constexpr bool table_in_order() {
  for (std::size_t i = 0; i < collective_count; ++i)
    if (collectives[i].scheduled != (i < scheduled_count) ||
        (i < scheduled_count && static_cast<std::size_t>(collectives[i].id) != i))
      return false;
  return true;
}
static_assert(table_in_order(), "tutti::collectives must list the scheduled collectives first, in enumerator order, "
                                "with the values 0, 1, 2, ...");

/// FNV-1a over every row's name and wire value: what a peer's table must equal.
constexpr std::uint64_t table_digest() {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](unsigned char c) { h = (h ^ c) * 0x100000001b3ull; };
  for (const auto& row : collectives) {
    for (char ch : row.name) mix(static_cast<unsigned char>(ch));
    mix(static_cast<unsigned char>(row.id));
  }
  return h;
}
}  // namespace detail

/// The version of the collective table's wire values (a fingerprint's `coll`). Transports put it
/// in their hello (tcp's mesh hello, shm's local rendezvous), so ranks of builds whose tables
/// differ refuse each other at start-up instead of misnaming each other's calls.
inline constexpr std::uint32_t collective_wire_version = 2;
/// The table's digest for `collective_wire_version`: a change to a name or a value fails here,
/// until the version is raised and this digest updated (GCC prints the new one).
inline constexpr std::uint64_t collective_wire_digest = 0x694c161ab10d904ull;
static_assert(detail::table_digest() == collective_wire_digest,
              "the collective table's names or wire values changed: raise collective_wire_version and set "
              "collective_wire_digest to the table's new digest (the left-hand value above)");

/// Whether `c` names a row of the table (a byte off the wire may not).
constexpr bool is_collective(std::underlying_type_t<collective> c) noexcept {
  return c < scheduled_count || c == static_cast<std::uint8_t>(collective::send_recv) ||
         c == static_cast<std::uint8_t>(collective::group);
}

/// The row of `c` (which must be a collective: see `is_collective`).
constexpr const collective_info& info(collective c) noexcept {
  const auto v = static_cast<std::size_t>(c);
  return v < scheduled_count ? collectives[v] : collectives[scheduled_count + (c == collective::group ? 1 : 0)];
}

constexpr std::string_view collective_name(collective c) noexcept {
  return is_collective(static_cast<std::uint8_t>(c)) ? info(c).name : std::string_view("unknown collective");
}

/// The scheduled collective named `n` (as `collective_name` spells it), if any.
constexpr std::optional<collective> collective_named(std::string_view n) noexcept {
  for (std::size_t i = 0; i < scheduled_count; ++i)
    if (collectives[i].name == n) return collectives[i].id;
  return std::nullopt;
}

/// "broadcast, reduce, ... or exscan": the scheduled collectives, for messages.
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

// ---- the schedule member of each collective ------------------------------------------------------

/// How the call path hands a call to an algorithm's schedule for collective `C`: `schedule_call<C>(
/// algorithm, channel, call)` calls the member that schedules C with the call's buffers, root,
/// counts and op (`call` is an `algo::call_args`: `in`, `out`, `root`, `counts`, `recv_counts`,
/// `op`). Each is SFINAE-friendly, so `algorithm_for` asks whether the call compiles. The
/// signatures, as an algorithm writes them (docs/EXTENDING.md): broadcast(ch, buf, root),
/// reduce(ch, buf, root, op), all_reduce(ch, buf, op), gather(ch, in, out, root), all_gather(ch,
/// in, out), scatter(ch, in, out, root), all_to_all(ch, in, out), reduce_scatter(ch, in, out, op),
/// barrier(ch), all_gather_v(ch, in, out, counts), gather_v(ch, in, out, counts, root),
/// scatter_v(ch, in, counts, out, root), all_to_all_v(ch, in, send_counts, out, recv_counts),
/// reduce_scatter_v(ch, in, out, counts, op), scan(ch, in, out, op), exscan(ch, in, out, op).
template <collective C>
inline constexpr int schedule_call = 0;  // not callable: no schedule (point to point, group agreement)

#define TUTTI_SCHEDULE_CALL(C, ...)                                                                     \
  template <>                                                                                        \
  inline constexpr auto schedule_call<collective::C> =                                               \
      [](const auto& a, auto& ch, [[maybe_unused]] const auto& x) -> decltype(a.C(ch __VA_OPT__(, ) __VA_ARGS__)) { \
    return a.C(ch __VA_OPT__(, ) __VA_ARGS__);                                                       \
  };
TUTTI_SCHEDULE_CALL(broadcast, x.out, x.root)
TUTTI_SCHEDULE_CALL(reduce, x.out, x.root, x.op)
TUTTI_SCHEDULE_CALL(all_reduce, x.out, x.op)
TUTTI_SCHEDULE_CALL(gather, x.in, x.out, x.root)
TUTTI_SCHEDULE_CALL(all_gather, x.in, x.out)
TUTTI_SCHEDULE_CALL(scatter, x.in, x.out, x.root)
TUTTI_SCHEDULE_CALL(all_to_all, x.in, x.out)
TUTTI_SCHEDULE_CALL(reduce_scatter, x.in, x.out, x.op)
TUTTI_SCHEDULE_CALL(barrier)
TUTTI_SCHEDULE_CALL(all_gather_v, x.in, x.out, x.counts)
TUTTI_SCHEDULE_CALL(gather_v, x.in, x.out, x.counts, x.root)
TUTTI_SCHEDULE_CALL(scatter_v, x.in, x.counts, x.out, x.root)
TUTTI_SCHEDULE_CALL(all_to_all_v, x.in, x.counts, x.out, x.recv_counts)
TUTTI_SCHEDULE_CALL(reduce_scatter_v, x.in, x.out, x.counts, x.op)
TUTTI_SCHEDULE_CALL(scan, x.in, x.out, x.op)
TUTTI_SCHEDULE_CALL(exscan, x.in, x.out, x.op)
#undef TUTTI_SCHEDULE_CALL

/// The optional out-of-place schedule of a collective of one buffer: all_reduce(ch, in, out, op).
/// An algorithm without it runs in place on `out` after a copy.
template <collective C>
inline constexpr int schedule_call_out_of_place = 0;
template <>
inline constexpr auto schedule_call_out_of_place<collective::all_reduce> =
    [](const auto& a, auto& ch, const auto& x) -> decltype(a.all_reduce(ch, x.in, x.out, x.op)) {
  return a.all_reduce(ch, x.in, x.out, x.op);
};

namespace detail {
/// Every scheduled row has its schedule call (a row without one fails here).
template <std::size_t... I>
constexpr bool every_row_has_a_schedule_call(std::index_sequence<I...>) {
  return (!std::is_same_v<std::remove_cv_t<decltype(schedule_call<static_cast<collective>(I)>)>, int> && ...);
}
static_assert(every_row_has_a_schedule_call(std::make_index_sequence<scheduled_count>{}),
              "every scheduled collective of the table needs its schedule_call");
}  // namespace detail

}  // namespace tutti
