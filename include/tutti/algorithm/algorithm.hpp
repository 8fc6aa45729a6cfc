/// \file
/// What makes an algorithm: a small aggregate with a `name` and, for each collective it can
/// run, a const member function template taking the call's `channel` and the user's views:
///
///     struct my_algo {
///       static constexpr std::string_view name = "my_algo";
///       template <class Channel, class T, class M, class Op>
///       void all_reduce(Channel& ch, tutti::view<T, M> buf, const Op& op) const;
///     };
///
/// The schedules' signatures, one per collective of the table (core/collective.hpp); p =
/// ch.size() >= 2: the communicator handles p = 1 and checks every size before calling. `M` is
/// the transport's memory kind (`host_memory` for every transport tutti ships; a schedule
/// written for host memory only may take `view<T>`):
///
/// | collective       | schedule                                                        |
/// |------------------|-----------------------------------------------------------------|
/// | broadcast        | broadcast(ch, view<T, M> buf, int root)                         |
/// | reduce           | reduce(ch, view<T, M> buf, int root, op)                        |
/// | all_reduce       | all_reduce(ch, view<T, M> buf, op)                              |
/// | gather           | gather(ch, view<const T, M> in, view<T, M> out, int root)       |
/// | all_gather       | all_gather(ch, in, out)                                         |
/// | scatter          | scatter(ch, in, out, int root)                                  |
/// | all_to_all       | all_to_all(ch, in, out)                                         |
/// | reduce_scatter   | reduce_scatter(ch, in, out, op)                                 |
/// | barrier          | barrier(ch)                                                     |
/// | all_gather_v     | all_gather_v(ch, in, out, const block_counts& counts)           |
/// | gather_v         | gather_v(ch, in, out, const block_counts& counts, int root)     |
/// | scatter_v        | scatter_v(ch, in, const block_counts& counts, out, int root)    |
/// | all_to_all_v     | all_to_all_v(ch, in, const block_counts& send, out, const block_counts& recv) |
/// | reduce_scatter_v | reduce_scatter_v(ch, in, out, const block_counts& counts, op)   |
///
/// gather_v's and scatter_v's counts are the root's; on the other ranks they may be empty (a
/// rank's own count is the size of its view). all_to_all_v's are this rank's row (what it sends
/// to each rank) and column (what it receives from each).
/// A collective an algorithm lacks is a compile error naming it (`algorithm_for`).
///
/// Contracts an algorithm keeps (the communicator promises them to users):
/// - it moves and reduces bytes only through the channel (`ch.send`, `ch.recv_reduce`,
///   `ch.copy`, `ch.combine`, `ch.scratch`), never by loading or storing through a view;
/// - reduce leaves every non-root rank's `buf` unchanged (use `ch.scratch` to accumulate);
/// - all_reduce leaves bitwise-identical results on every rank: reduce each element in an order
///   that does not depend on the rank (or compute it once and distribute it);
/// - every rank makes the same sequence of channel calls with its peers that the schedule
///   implies for the same (collective, count, root, size): the fingerprint makes a divergence an
///   error, but only a schedule that all ranks agree on completes.
/// Note the argument order: `ch.send(peer, view)` here, `comm.send(view, peer, tag)` for users.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "tutti/algorithm/channel.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/core/dtype.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/core/view.hpp"
#include "tutti/op/ops.hpp"

namespace tutti {

namespace algo {
/// Per-call placeholder: "use the communicator's algorithm".
struct inherit {};
}  // namespace algo

namespace detail {
/// The plainest transport: what an algorithm may rely on when it asks for no capability.
struct probe_transport {
  int rank() const;
  int size() const;
  void send(int, const header&, const std::byte*, const wait_context&);
  void recv(int, const header&, std::byte*, const wait_context&);
  void sendrecv(int, const header&, const std::byte*, int, const header&, std::byte*, const wait_context&);
  probe_transport sub(std::span<const int>, std::uint64_t) const;
};
static_assert(transport<probe_transport>);
}  // namespace detail

/// Whether `A` has the schedule of collective `C` on channel `Ch` (the signatures above).
template <class A, collective C, class Ch>
constexpr bool schedule_probe() {
  using M = typename Ch::memory;
  using out_t = view<float, M>;
  using in_t = view<const float, M>;
  if constexpr (C == collective::broadcast) return requires(const A& a, Ch& ch, out_t o) { a.broadcast(ch, o, 0); };
  else if constexpr (C == collective::reduce) return requires(const A& a, Ch& ch, out_t o) { a.reduce(ch, o, 0, op::sum{}); };
  else if constexpr (C == collective::all_reduce) return requires(const A& a, Ch& ch, out_t o) { a.all_reduce(ch, o, op::sum{}); };
  else if constexpr (C == collective::gather) return requires(const A& a, Ch& ch, in_t i, out_t o) { a.gather(ch, i, o, 0); };
  else if constexpr (C == collective::all_gather) return requires(const A& a, Ch& ch, in_t i, out_t o) { a.all_gather(ch, i, o); };
  else if constexpr (C == collective::scatter) return requires(const A& a, Ch& ch, in_t i, out_t o) { a.scatter(ch, i, o, 0); };
  else if constexpr (C == collective::all_to_all) return requires(const A& a, Ch& ch, in_t i, out_t o) { a.all_to_all(ch, i, o); };
  else if constexpr (C == collective::reduce_scatter)
    return requires(const A& a, Ch& ch, in_t i, out_t o) { a.reduce_scatter(ch, i, o, op::sum{}); };
  else if constexpr (C == collective::barrier) return requires(const A& a, Ch& ch) { a.barrier(ch); };
  else if constexpr (C == collective::all_gather_v)
    return requires(const A& a, Ch& ch, in_t i, out_t o, const block_counts& b) { a.all_gather_v(ch, i, o, b); };
  else if constexpr (C == collective::gather_v)
    return requires(const A& a, Ch& ch, in_t i, out_t o, const block_counts& b) { a.gather_v(ch, i, o, b, 0); };
  else if constexpr (C == collective::scatter_v)
    return requires(const A& a, Ch& ch, in_t i, out_t o, const block_counts& b) { a.scatter_v(ch, i, b, o, 0); };
  else if constexpr (C == collective::all_to_all_v)
    return requires(const A& a, Ch& ch, in_t i, out_t o, const block_counts& b) { a.all_to_all_v(ch, i, b, o, b); };
  else if constexpr (C == collective::reduce_scatter_v)
    return requires(const A& a, Ch& ch, in_t i, out_t o, const block_counts& b) {
      a.reduce_scatter_v(ch, i, o, b, op::sum{});
    };
  else return false;  // point to point and group agreement have no schedule
}

namespace detail {
/// `algorithm_for`'s answer; `automatic_of` specialises it (it runs whatever its candidates run).
template <class A, collective C, class Transport>
struct has_schedule : std::bool_constant<schedule_probe<A, C, channel<Transport>>()> {};
}  // namespace detail

/// `A` has a schedule for collective `C` on `Transport` (by default: on any transport).
template <class A, collective C, class Transport = detail::probe_transport>
concept algorithm_for = detail::has_schedule<A, C, Transport>::value;

/// `A`'s all_reduce also reads a separate input itself (out of place), instead of running in
/// place on the output after a copy.
template <class A, class Ch, class T, class Op>
concept all_reduce_out_of_place = requires(const A& a, Ch& ch, view<const T, typename Ch::memory> in,
                                           view<T, typename Ch::memory> out, const Op& op) {
  a.all_reduce(ch, in, out, op);
};

/// Any algorithm: a type with a name.
template <class A>
concept algorithm = std::is_default_constructible_v<A> && std::is_copy_constructible_v<A> &&
                    requires {
                      { A::name } -> std::convertible_to<std::string_view>;
                    };

/// The id an algorithm puts in the fingerprint, so ranks that run different schedules (say,
/// through a different `TUTTI_ALGO`) get a mismatch error instead of a hang.
template <class A>
constexpr std::uint32_t algorithm_id() noexcept {
  return static_cast<std::uint32_t>(detail::fnv1a(A::name) & 0xffffffffu);
}

}  // namespace tutti
