/// \file
/// What makes an algorithm: a small aggregate with a `name` and, for each collective it can
/// run, a const member function template taking the call's `channel` and the user's views:
///
///     struct my_algo {
///       static constexpr std::string_view name = "my_algo";
///       template <class Channel, class T, class Op>
///       void all_reduce(Channel& ch, tutti::view<T> buf, const Op& op) const;
///     };
///
/// Signatures, for reference (p = ch.size() >= 2; the communicator handles p = 1 and checks
/// every size before calling):
///   broadcast(ch, view<T> buf, int root)          reduce(ch, view<T> buf, int root, op)
///   all_reduce(ch, view<T> buf, op)               barrier(ch)
///   gather(ch, view<const T> in, view<T> out, int root)      all_gather(ch, in, out)
///   scatter(ch, view<const T> in, view<T> out, int root)     all_to_all(ch, in, out)
///   reduce_scatter(ch, view<const T> in, view<T> out, op)
/// A collective an algorithm lacks is a compile error naming it (`algorithm_for`).
///
/// Contracts an algorithm keeps (the communicator promises them to users):
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

/// `A` has a schedule for collective `C` on `Transport` (by default: on any transport).
template <class A, collective C, class Transport = detail::probe_transport>
concept algorithm_for = requires(const A& a, channel<Transport>& ch, view<float> out,
                                 view<const float> in) {
  requires(C != collective::broadcast || requires { a.broadcast(ch, out, 0); });
  requires(C != collective::reduce || requires { a.reduce(ch, out, 0, op::sum{}); });
  requires(C != collective::all_reduce || requires { a.all_reduce(ch, out, op::sum{}); });
  requires(C != collective::gather || requires { a.gather(ch, in, out, 0); });
  requires(C != collective::all_gather || requires { a.all_gather(ch, in, out); });
  requires(C != collective::scatter || requires { a.scatter(ch, in, out, 0); });
  requires(C != collective::all_to_all || requires { a.all_to_all(ch, in, out); });
  requires(C != collective::reduce_scatter || requires { a.reduce_scatter(ch, in, out, op::sum{}); });
  requires(C != collective::barrier || requires { a.barrier(ch); });
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
