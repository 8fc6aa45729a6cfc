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
/// The schedules' signatures are those `schedule_call` (core/collective.hpp) makes, one per
/// collective of the table; p = ch.size() >= 2 (the communicator handles p = 1 and checks every
/// size before calling). `M` is the transport's memory kind (`host_memory` for every transport
/// tutti ships; a schedule written for host memory only may take `view<T>`). For tutti's own
/// host-memory transports the call path hands schedules an opaque element type of the real one's
/// size (`detail::elem<S>`) and an erased op, so a schedule is compiled once per element size:
/// a schedule must be a template over the element type and op, and never dereference a view.
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
/// - scan and exscan apply the op in rank order (`op(lower ranks, higher ranks)`), so that
///   non-commutative ops give the serial prefix;
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
#include "tutti/op/kernels.hpp"
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

namespace algo {
/// The counts of a call of a collective that has none (`counts_for`): no bytes to fill.
struct no_counts {};
/// One call of a collective as the call path hands it to a schedule through `schedule_call<C>`:
/// its buffers (for a collective of one buffer, `out`), root, counts and op. The call path
/// passes `Counts = counts_for<C>`: a uniform collective's call carries no counts (zeroing two
/// empty `block_counts`, 96 bytes, was a `rep stos` of 31 steps on every call).
template <class T, class M, class Op, class Counts = block_counts>
struct call_args {
  view<const T, M> in;
  view<T, M> out;
  int root = -1;
  [[no_unique_address]] Counts counts{};       ///< a v-collective's counts (all_to_all_v: what this rank sends)
  [[no_unique_address]] Counts recv_counts{};  ///< all_to_all_v: what this rank receives from each rank
  Op op{};
};
/// `call_args`' counts for collective `C`: `block_counts` where it takes counts, else none.
template <collective C>
using counts_for = std::conditional_t<info(C).counts == counts_kind::uniform, no_counts, block_counts>;
/// The op of a call that takes none.
struct no_op {};
}  // namespace algo

/// Whether `A` has the schedule of collective `C` on channel `Ch` (`schedule_call<C>` compiles
/// for it, with float views and op::sum).
template <class A, collective C, class Ch>
constexpr bool schedule_probe() {
  using x_t = algo::call_args<float, typename Ch::memory, op::sum, algo::counts_for<C>>;
  return requires(const A& a, Ch& ch, const x_t& x) { schedule_call<C>(a, ch, x); };
}

/// Whether `A`'s schedule of `C` on channel `Ch` also runs on erased elements (`detail::elem<S>`
/// and `detail::erased_op`), as the call path hands host-memory calls to schedules of tutti's.
template <class A, collective C, class Ch>
constexpr bool schedule_probe_erased() {
  using x_t = algo::call_args<detail::elem<4>, typename Ch::memory, detail::erased_op, algo::counts_for<C>>;
  return requires(const A& a, Ch& ch, const x_t& x) { schedule_call<C>(a, ch, x); };
}

namespace detail {
/// Whether `A`'s schedules need the real element type and op (`static constexpr bool needs_types
/// = true`: `algo::native` maps them to the transport's own collectives); such an algorithm gets
/// the typed call, compiled per element type and op.
template <class A>
constexpr bool needs_types() {
  if constexpr (requires { { A::needs_types } -> std::convertible_to<bool>; }) return A::needs_types;
  else return false;
}

/// `algorithm_for`'s answer; `automatic_of` specialises it (it runs whatever its candidates run).
template <class A, collective C, class Transport>
struct has_schedule : std::bool_constant<schedule_probe<A, C, channel<Transport>>()> {};
}  // namespace detail

/// `A` has a schedule for collective `C` on `Transport` (by default: on any transport).
template <class A, collective C, class Transport = detail::probe_transport>
concept algorithm_for = detail::has_schedule<A, C, Transport>::value;

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
