/// \file
/// The communicator's collectives as its users call them: one member per collective of the table
/// (core/collective.hpp) and its non-blocking `i` twin. Each names its arguments and hands them,
/// as a `call_desc`, to the one call path (`communicator::call`, group/call_path.hpp), which
/// checks them, makes the fingerprint, runs the schedule and finishes the result; every `i` twin
/// is `post` of the same description (`communicator::icall`). A base of `communicator` (CRTP).
///
/// Buffers are `tutti::view`s, or anything `tutti::viewable`: a contiguous range (`std::vector`,
/// `std::array`, `std::span`, a C array) or a single trivially copyable value. `Algo` is a
/// per-call algorithm (`comm.all_reduce(v, op, tutti::algo::tree{})` or
/// `comm.all_reduce<tutti::algo::tree>(v, op)`); by default the communicator's own. On a
/// `stream_ordered` transport a stream in the algorithm's place enqueues the call on it and
/// returns a request. A non-blocking twin's buffers (and a v-collective's counts) must stay
/// valid, and its inputs unchanged, until its request completes; a temporary container is
/// refused at compile time.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/view.hpp"
#include "tutti/group/request.hpp"
#include "tutti/op/ops.hpp"

namespace tutti {

/// One call of a collective as the user passed it: its buffers (a collective of one buffer
/// passes it as `out` and, read only, as `in`, with `in_place`), root, counts and op. Every
/// member of `collective_calls` fills one and hands it to `communicator::call<C>`, which checks
/// it against the row's `layout`; generic code (the conformance suite, tutti-bench) calls
/// `comm.call<C>(desc)` and `comm.icall<C>(desc)` directly, looping over the table.
template <class T, class M = host_memory, class Op = algo::no_op>
struct call_desc {
  view<const T, M> in;
  view<T, M> out;
  int root = -1;
  std::span<const std::size_t> counts{};       ///< per-rank counts (all_to_all_v: send_counts)
  std::span<const std::size_t> recv_counts{};  ///< all_to_all_v's recv_counts
  Op op{};
  bool in_place = false;  ///< the one-buffer form (`out` is the buffer; `in` views it)
};

namespace detail {

/// The element type of a buffer argument.
template <class X>
using element_of = std::remove_const_t<typename view_of<X>::element_type>;

/// A buffer a non-blocking call may keep: a view, or an lvalue (not a temporary container).
template <class B>
inline constexpr bool lasting = std::is_lvalue_reference_v<B> || is_view<std::remove_cvref_t<B>>::value;

}  // namespace detail

/// The public collectives of `communicator` (see the file comment); `Comm` is the communicator.
template <class Comm, class Memory>
class collective_calls {
  template <class T>
  using view_t = view<T, Memory>;
  template <class B>
  using elem_t = detail::element_of<B>;

  /// The view of an input buffer, read only.
  template <class X>
  static auto in_view(X&& x) {
    auto v = as_view(std::forward<X>(x));
    using V = decltype(v);
    static_assert(std::is_same_v<typename V::memory, Memory>,
                  "tutti: the view's memory kind is not this communicator's transport's (transport_traits::memory)");
    return view_t<const typename V::value_type>(v);
  }
  /// The view of an output buffer, which must be writable.
  template <class X>
  static auto out_view(X&& x) {
    auto v = as_view(std::forward<X>(x));
    using V = decltype(v);
    static_assert(!std::is_const_v<typename V::element_type>,
                  "tutti: this collective writes into the buffer: pass a non-const view, range or value");
    static_assert(std::is_same_v<typename V::memory, Memory>,
                  "tutti: the view's memory kind is not this communicator's transport's (transport_traits::memory)");
    return v;
  }
  template <class T, class Op = algo::no_op>
  using desc = call_desc<T, Memory, Op>;
  /// The description of a one-buffer call (broadcast, reduce, in-place all_reduce and scans).
  template <class T, class Op = algo::no_op>
  static desc<T, Op> one_buffer(view_t<T> buf, int root = -1, Op op = {}) {
    return {view_t<const T>(buf), buf, root, {}, {}, op, true};
  }

  Comm& self() noexcept { return static_cast<Comm&>(*this); }

  template <collective C, class Algo, class T, class Op>
  auto call(const Algo& a, const desc<T, Op>& d) {
    return self().template call<C>(d, a);
  }
  /// The non-blocking twin: the description posted to the progress engine.
  template <collective C, bool Lasting, class Algo, class T, class Op>
  request post(const Algo& a, const desc<T, Op>& d) {
    static_assert(Lasting,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a "
                  "tutti::view, not a temporary");
    return self().template icall<C>(d, a);
  }

 public:
  // ---- collectives ------------------------------------------------------------------------

  /// Copies root's `buf` into every rank's `buf`. Every rank passes the same count and root.
  template <class Algo = algo::inherit, viewable B>
  auto broadcast(B&& buf, int root, const Algo& a = {}) {
    return call<collective::broadcast>(a, one_buffer(out_view(buf), root));
  }

  /// Reduces every rank's `buf` with `op` into root's `buf`; the other ranks' buffers are left
  /// unchanged.
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, elem_t<B>>
  auto reduce(B&& buf, int root, const Op& op = {}, const Algo& a = {}) {
    return call<collective::reduce>(a, one_buffer(out_view(buf), root, op));
  }

  /// Reduces every rank's `buf` with `op`; every rank gets the result in `buf`.
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, elem_t<B>>
  auto all_reduce(B&& buf, const Op& op = {}, const Algo& a = {}) {
    return call<collective::all_reduce>(a, one_buffer(out_view(buf), -1, op));
  }

  /// Out of place: `out` (same size as `in`) gets the reduction of every rank's `in`.
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<elem_t<In>, elem_t<Out>> && reduce_op<Op, elem_t<Out>>
  auto all_reduce(In&& in, Out&& out, const Op& op = {}, const Algo& a = {}) {
    return call<collective::all_reduce>(a, desc<elem_t<Out>, Op>{in_view(in), out_view(out), -1, {}, {}, op});
  }

  /// Root's `out` (size() · in.size() elements, rank i's block at i · in.size()) gets every
  /// rank's `in`; `out` is ignored (may be empty) elsewhere. `in` may be the root's own block of
  /// `out`.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  auto gather(In&& in, Out&& out, int root, const Algo& a = {}) {
    return call<collective::gather>(a, desc<elem_t<Out>>{in_view(in), out_view(out), root});
  }

  /// Every rank's `out` (size() · in.size() elements) gets every rank's `in`, in rank order.
  /// `in` may be this rank's own block of `out`.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  auto all_gather(In&& in, Out&& out, const Algo& a = {}) {
    return call<collective::all_gather>(a, desc<elem_t<Out>>{in_view(in), out_view(out)});
  }

  /// Rank i's `out` gets block i of root's `in` (size() · out.size() elements); `in` is ignored
  /// (may be empty) elsewhere. `out` may be the root's own block of `in`.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  auto scatter(In&& in, Out&& out, int root, const Algo& a = {}) {
    return call<collective::scatter>(a, desc<elem_t<Out>>{in_view(in), out_view(out), root});
  }

  /// Rank j's block i of `out` gets rank i's block j of `in`; `in` and `out` have the same size,
  /// a multiple of size(), and must not overlap.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  auto all_to_all(In&& in, Out&& out, const Algo& a = {}) {
    return call<collective::all_to_all>(a, desc<elem_t<Out>>{in_view(in), out_view(out)});
  }

  /// Rank i's `out` gets block i of the reduction of every rank's `in` (size() · out.size()
  /// elements); `in` and `out` must not overlap.
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<elem_t<In>, elem_t<Out>> && reduce_op<Op, elem_t<Out>>
  auto reduce_scatter(In&& in, Out&& out, const Op& op = {}, const Algo& a = {}) {
    return call<collective::reduce_scatter>(a, desc<elem_t<Out>, Op>{in_view(in), out_view(out), -1, {}, {}, op});
  }

  /// Returns once every rank of the group has entered the barrier.
  template <class Algo = algo::inherit>
  auto barrier(const Algo& a = {}) {
    return call<collective::barrier>(a, desc<char>{});
  }

  /// Inclusive prefix reduction: rank r's `out` gets `in` of ranks 0..r reduced with `op` in rank
  /// order, `op(op(in_0, in_1), ..., in_r)`, so non-commutative ops are right. Every rank passes
  /// the same count; `out` has `in`'s size and may be `in` (in place). `op::avg` is refused.
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<elem_t<In>, elem_t<Out>> && reduce_op<Op, elem_t<Out>>
  auto scan(In&& in, Out&& out, const Op& op = {}, const Algo& a = {}) {
    return call<collective::scan>(a, desc<elem_t<Out>, Op>{in_view(in), out_view(out), -1, {}, {}, op});
  }
  /// `scan` in place on `buf`.
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, elem_t<B>>
  auto scan(B&& buf, const Op& op = {}, const Algo& a = {}) {
    return call<collective::scan>(a, one_buffer(out_view(buf), -1, op));
  }

  /// Exclusive prefix reduction: rank r's `out` gets `in` of ranks 0..r−1 reduced with `op` in
  /// rank order; rank 0's `out` is left unchanged (as MPI_Exscan's). Otherwise as `scan`.
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<elem_t<In>, elem_t<Out>> && reduce_op<Op, elem_t<Out>>
  auto exscan(In&& in, Out&& out, const Op& op = {}, const Algo& a = {}) {
    return call<collective::exscan>(a, desc<elem_t<Out>, Op>{in_view(in), out_view(out), -1, {}, {}, op});
  }
  /// `exscan` in place on `buf`.
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, elem_t<B>>
  auto exscan(B&& buf, const Op& op = {}, const Algo& a = {}) {
    return call<collective::exscan>(a, one_buffer(out_view(buf), -1, op));
  }

  // ---- v-collectives: a count per rank -----------------------------------------------------
  // Counts are elements, one per rank of the group, 64-bit; blocks lie in rank order at the
  // prefix sums of the counts (`tutti::displacements`); zero counts are valid. Disagreement is a
  // `mismatch_error` naming both ranks and both values (counts that differ where every rank
  // passes them; a view whose size is not this rank's count; all_to_all_v's send_counts[j] of
  // rank i against rank j's recv_counts[i]); what a rank can see alone is a `usage_error`.

  /// Rank i contributes `counts[i]` elements (`in`, exactly that many); every rank's `out` (at
  /// least the sum of the counts) gets every block in rank order. Every rank passes the same
  /// counts. `in` may be this rank's own block of `out` (in place).
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  auto all_gather_v(In&& in, Out&& out, std::span<const std::size_t> counts, const Algo& a = {}) {
    return call<collective::all_gather_v>(a, desc<elem_t<Out>>{in_view(in), out_view(out), -1, counts});
  }

  /// Root's `out` (at least the sum of the counts) gets rank i's `in` (`counts[i]` elements) as
  /// block i. The counts matter at the root; the others may pass an empty span (or the root's
  /// counts). `in` may be the root's own block of `out`.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  auto gather_v(In&& in, Out&& out, std::span<const std::size_t> counts, int root, const Algo& a = {}) {
    return call<collective::gather_v>(a, desc<elem_t<Out>>{in_view(in), out_view(out), root, counts});
  }

  /// Rank i's `out` (`counts[i]` elements) gets block i of root's `in` (at least the sum of the
  /// counts). The counts matter at the root; the others may pass an empty span. `out` may be
  /// the root's own block of `in`.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  auto scatter_v(In&& in, std::span<const std::size_t> counts, Out&& out, int root, const Algo& a = {}) {
    return call<collective::scatter_v>(a, desc<elem_t<Out>>{in_view(in), out_view(out), root, counts});
  }

  /// Block j of `in` (`send_counts[j]` elements, at the prefix sum) goes to rank j; block i of
  /// `out` (`recv_counts[i]` elements) comes from rank i. `in` holds exactly the sum of
  /// send_counts and `out` the sum of recv_counts; they must not overlap. Rank i's
  /// send_counts[j] must equal rank j's recv_counts[i].
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  auto all_to_all_v(In&& in, std::span<const std::size_t> send_counts, Out&& out,
                    std::span<const std::size_t> recv_counts, const Algo& a = {}) {
    return call<collective::all_to_all_v>(a, desc<elem_t<Out>>{in_view(in), out_view(out), -1, send_counts, recv_counts});
  }

  /// `in` holds the sum of the counts; rank i's `out` (`counts[i]` elements) gets block i of the
  /// reduction of every rank's `in`. Every rank passes the same counts; `in` and `out` must not
  /// overlap.
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<elem_t<In>, elem_t<Out>> && reduce_op<Op, elem_t<Out>>
  auto reduce_scatter_v(In&& in, Out&& out, std::span<const std::size_t> counts, const Op& op = {},
                        const Algo& a = {}) {
    return call<collective::reduce_scatter_v>(a, desc<elem_t<Out>, Op>{in_view(in), out_view(out), -1, counts, {}, op});
  }

  // ---- non-blocking twins ------------------------------------------------------------------
  // Each posts its blocking twin, with the same arguments, to the communicator's progress
  // engine and returns at once; see tutti::request.

  template <class Algo = algo::inherit, viewable B>
  request ibroadcast(B&& buf, int root, const Algo& a = {}) {
    return post<collective::broadcast, detail::lasting<B>>(a, one_buffer(out_view(buf), root));
  }
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, elem_t<B>>
  request ireduce(B&& buf, int root, const Op& op = {}, const Algo& a = {}) {
    return post<collective::reduce, detail::lasting<B>>(a, one_buffer(out_view(buf), root, op));
  }
  /// In place; posted in a batch (`fuse()`), runs of these fuse into one transfer.
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, elem_t<B>>
  request iall_reduce(B&& buf, const Op& op = {}, const Algo& a = {}) {
    static_assert(detail::lasting<B>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a "
                  "tutti::view, not a temporary");
    return self().post_all_reduce(a, one_buffer(out_view(buf), -1, op));
  }
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<elem_t<In>, elem_t<Out>> && reduce_op<Op, elem_t<Out>>
  request iall_reduce(In&& in, Out&& out, const Op& op = {}, const Algo& a = {}) {
    return post<collective::all_reduce, detail::lasting<In> && detail::lasting<Out>>(
        a, desc<elem_t<Out>, Op>{in_view(in), out_view(out), -1, {}, {}, op});
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  request igather(In&& in, Out&& out, int root, const Algo& a = {}) {
    return post<collective::gather, detail::lasting<In> && detail::lasting<Out>>(a, desc<elem_t<Out>>{in_view(in), out_view(out), root});
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  request iall_gather(In&& in, Out&& out, const Algo& a = {}) {
    return post<collective::all_gather, detail::lasting<In> && detail::lasting<Out>>(a, desc<elem_t<Out>>{in_view(in), out_view(out)});
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  request iscatter(In&& in, Out&& out, int root, const Algo& a = {}) {
    return post<collective::scatter, detail::lasting<In> && detail::lasting<Out>>(a, desc<elem_t<Out>>{in_view(in), out_view(out), root});
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  request iall_to_all(In&& in, Out&& out, const Algo& a = {}) {
    return post<collective::all_to_all, detail::lasting<In> && detail::lasting<Out>>(a, desc<elem_t<Out>>{in_view(in), out_view(out)});
  }
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<elem_t<In>, elem_t<Out>> && reduce_op<Op, elem_t<Out>>
  request ireduce_scatter(In&& in, Out&& out, const Op& op = {}, const Algo& a = {}) {
    return post<collective::reduce_scatter, detail::lasting<In> && detail::lasting<Out>>(
        a, desc<elem_t<Out>, Op>{in_view(in), out_view(out), -1, {}, {}, op});
  }
  template <class Algo = algo::inherit>
  request ibarrier(const Algo& a = {}) {
    return post<collective::barrier, true>(a, desc<char>{});
  }
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<elem_t<In>, elem_t<Out>> && reduce_op<Op, elem_t<Out>>
  request iscan(In&& in, Out&& out, const Op& op = {}, const Algo& a = {}) {
    return post<collective::scan, detail::lasting<In> && detail::lasting<Out>>(
        a, desc<elem_t<Out>, Op>{in_view(in), out_view(out), -1, {}, {}, op});
  }
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, elem_t<B>>
  request iscan(B&& buf, const Op& op = {}, const Algo& a = {}) {
    return post<collective::scan, detail::lasting<B>>(a, one_buffer(out_view(buf), -1, op));
  }
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<elem_t<In>, elem_t<Out>> && reduce_op<Op, elem_t<Out>>
  request iexscan(In&& in, Out&& out, const Op& op = {}, const Algo& a = {}) {
    return post<collective::exscan, detail::lasting<In> && detail::lasting<Out>>(
        a, desc<elem_t<Out>, Op>{in_view(in), out_view(out), -1, {}, {}, op});
  }
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, elem_t<B>>
  request iexscan(B&& buf, const Op& op = {}, const Algo& a = {}) {
    return post<collective::exscan, detail::lasting<B>>(a, one_buffer(out_view(buf), -1, op));
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  request iall_gather_v(In&& in, Out&& out, std::span<const std::size_t> counts, const Algo& a = {}) {
    return post<collective::all_gather_v, detail::lasting<In> && detail::lasting<Out>>(
        a, desc<elem_t<Out>>{in_view(in), out_view(out), -1, counts});
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  request igather_v(In&& in, Out&& out, std::span<const std::size_t> counts, int root, const Algo& a = {}) {
    return post<collective::gather_v, detail::lasting<In> && detail::lasting<Out>>(
        a, desc<elem_t<Out>>{in_view(in), out_view(out), root, counts});
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  request iscatter_v(In&& in, std::span<const std::size_t> counts, Out&& out, int root, const Algo& a = {}) {
    return post<collective::scatter_v, detail::lasting<In> && detail::lasting<Out>>(
        a, desc<elem_t<Out>>{in_view(in), out_view(out), root, counts});
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<elem_t<In>, elem_t<Out>>
  request iall_to_all_v(In&& in, std::span<const std::size_t> send_counts, Out&& out,
                        std::span<const std::size_t> recv_counts, const Algo& a = {}) {
    return post<collective::all_to_all_v, detail::lasting<In> && detail::lasting<Out>>(
        a, desc<elem_t<Out>>{in_view(in), out_view(out), -1, send_counts, recv_counts});
  }
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<elem_t<In>, elem_t<Out>> && reduce_op<Op, elem_t<Out>>
  request ireduce_scatter_v(In&& in, Out&& out, std::span<const std::size_t> counts, const Op& op = {},
                            const Algo& a = {}) {
    return post<collective::reduce_scatter_v, detail::lasting<In> && detail::lasting<Out>>(
        a, desc<elem_t<Out>, Op>{in_view(in), out_view(out), -1, counts, {}, op});
  }
};

}  // namespace tutti
