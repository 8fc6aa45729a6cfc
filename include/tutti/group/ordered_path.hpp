/// \file
/// The call path of rank-ordered ops (`op::ordered<Op>`, `op::reproducible_sum`): reduce,
/// all_reduce, reduce_scatter and reduce_scatter_v whose every element is reduced in one fixed
/// order, the same whatever the algorithm, the message size, the transport or fusion.
///
/// No reducing schedule runs. Each rank's values move raw, by collectives that only move bytes
/// (all_gather, all_to_all, gather and their v-forms, with the call's algorithm where it has them
/// on the transport, else `algo::direct`), to where they are reduced, and are folded there by
/// `detail::fold_rows`, rank 0's values first: the order is a property of the fold, not of the
/// schedule, so every algorithm gives the same bits. An algorithm's reducing schedules are thus
/// never candidates for these ops, which is what makes the promise checkable:
///   - all_reduce: below `ordered_gather_bytes` of p·n, an all_gather of the whole buffers and a
///     fold of all of them on every rank (one collective: its latency); above it, the blocks of
///     a reduce-scatter (rank r's block of every rank, by all_to_all_v), folded by their owner,
///     then an all_gather_v of the folded blocks: the bytes of a ring all_reduce, 2(p−1)/p·n;
///   - reduce: the same, with a gather (small) or a gather_v of the folded blocks (large) to the
///     root;
///   - reduce_scatter(_v): an all_to_all(_v) of the blocks, folded by their owner;
///   - two ranks and an op that commutes bitwise (sum, prod, avg of built-in arithmetic types:
///     one combination per element, and IEEE addition and multiplication commute): the plain
///     schedules, which are exact there;
///   - a transport with shared windows: `algo::shared_memory`'s schedules, which fold in rank
///     order where they read every rank's values (`folds_in_rank_order`).
/// Each movement has a sequence number of its own (every rank takes the same ones), the call's
/// collective, count and op in its fingerprint, so a rank that passes the op plain while another
/// passes it ordered, or another count, gets a mismatch error at the first message.
/// Members of `communicator`, defined here out of its class.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/shared_memory.hpp"
#include "tutti/algorithm/schedule.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/float16.hpp"
#include "tutti/group/communicator.hpp"
#include "tutti/op/kernels.hpp"

namespace tutti {

namespace detail {
/// Ops for which any two-rank schedule already forms x0 ∘ x1 bitwise: one combination per
/// element, and the built-in sum and product of built-in arithmetic types commute in IEEE
/// arithmetic (NaN payloads aside). A user type's `+` need not commute.
template <class Op, class T>
inline constexpr bool commutes_bitwise =
    (std::is_same_v<Op, op::sum> || std::is_same_v<Op, op::prod> || std::is_same_v<Op, op::avg>) &&
    (std::is_arithmetic_v<T> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>);
}  // namespace detail

namespace detail {
/// shared_memory with its default settings, for a call whose algorithm has none.
inline constexpr algo::shared_memory default_shared_memory{};
}  // namespace detail

template <transport Transport, algorithm Algorithm>
template <collective C, class A, class T, class K, class Counts>
void communicator<Transport, Algorithm>::run_ordered(const A& a, const fingerprint& fp, std::size_t bytes,
                                                     const algo::call_args<T, memory, K, Counts>& x) {
  static_assert(std::is_same_v<memory, host_memory>,
                "tutti: rank-ordered ops (op::ordered, op::reproducible_sum) fold on the host; the device "
                "transports do not run them");
  using inner = detail::inner_op_t<K>;
  const int p = size(), me = rank();
  const auto P = static_cast<std::size_t>(p);
  if constexpr (detail::commutes_bitwise<inner, T>) {
    if (p == 2) {
      const algo::call_args<T, memory, inner, Counts> plain{x.in, x.out, x.root, x.counts, x.recv_counts, x.op.op};
      return run<C>(a, fp, bytes, plain);
    }
  }
  // Shared windows: shared_memory's schedules fold in rank order themselves, reading every
  // rank's values where they lie (and hand an op that folds itself all of them at once); the call
  // runs there as it is. (Not for the 16-bit floats under op::ordered, which it would round at
  // every step.)
  constexpr bool plain_fold = std::is_same_v<K, op::ordered<inner>> && !std::is_same_v<T, float16> &&
                              !std::is_same_v<T, bfloat16>;
  if constexpr (shared_window<Transport> && (plain_fold || detail::folds_itself<T, K>) &&
                algo::shared_memory::folds_in_rank_order && algorithm_for<algo::shared_memory, C, Transport>) {
    if (t_.has_window()) {
      const auto& ra = [&]() -> const auto& {
        if constexpr (std::is_same_v<A, algo::inherit>) return algo_;
        else return a;
      }();
      using RA = std::remove_cvref_t<decltype(ra)>;
      const auto& sm = [&]() -> const algo::shared_memory& {
        if constexpr (std::is_same_v<RA, algo::shared_memory>) return ra;
        else if constexpr (detail::is_candidate<algo::shared_memory, RA>) return ra.template get<algo::shared_memory>();
        else return detail::default_shared_memory;
      }();
      if constexpr (plain_fold)
        return run<C>(sm, fp, bytes, algo::call_args<T, memory, inner, Counts>{x.in, x.out, x.root, x.counts, x.recv_counts, x.op.op});
      else
        return run<C>(sm, fp, bytes, x);
    }
  }
  const auto& op = x.op;
  using none = algo::no_op;
  using moving = algo::call_args<T, memory, none>;
  const auto rows_of = [&](std::size_t n) {  // p rows of n elements, reused between calls
    return reinterpret_cast<T*>(ordered_scratch_.reserve(P * n * sizeof(T) + 64));
  };
  const auto fold = [&](T* out, const T* rows, std::size_t n) {
    std::vector<const T*> at(P);
    for (std::size_t r = 0; r < P; ++r) at[r] = rows + r * n;
    if constexpr (std::is_same_v<K, op::ordered<inner>>) detail::fold_rows(out, at.data(), p, n, op.op);
    else detail::fold_rows(out, at.data(), p, n, op);
  };
  // The blocks of an n-element buffer, one per rank, as the v-collectives take them.
  std::vector<std::size_t> blk(P), mine(P), offsets_blk, offsets_mine;
  const auto blocks_of = [&](std::size_t n) {
    for (int r = 0; r < p; ++r) blk[static_cast<std::size_t>(r)] = schedule::block(n, p, r).size();
    for (auto& m : mine) m = blk[static_cast<std::size_t>(me)];
    offsets_blk = displacements(blk);
    offsets_mine = displacements(mine);
    return std::pair{block_counts{blk, offsets_blk, n, blk[0]},
                     block_counts{mine, offsets_mine, P * blk[static_cast<std::size_t>(me)], mine[0]}};
  };
  const auto next = [&] {
    fingerprint f = fp;
    f.seq = seq_++;
    return f;
  };

  if constexpr (C == collective::all_reduce || C == collective::reduce) {
    constexpr bool to_root = C == collective::reduce;
    const std::size_t n = x.out.size();
    if (P * n * sizeof(T) <= ordered_gather_bytes) {
      T* rows = rows_of(n);
      const view<T, memory> all(rows, P * n);
      if constexpr (to_root) {
        run_moving<collective::gather>(a, fp, n * sizeof(T), moving{x.in, all, x.root});
        if (me == x.root) fold(x.out.data(), rows, n);
      } else {
        run_moving<collective::all_gather>(a, fp, n * sizeof(T), moving{x.in, all});
        fold(x.out.data(), rows, n);
      }
      return;
    }
    const auto [b, m] = blocks_of(n);
    const std::size_t own = b.count(me);
    T* rows = rows_of(own);
    run_moving<collective::all_to_all_v>(a, fp, 0, moving{x.in, view<T, memory>(rows, P * own), -1, b, m});
    if constexpr (to_root) {
      // The folded block goes to the root; the root's own lands in place.
      T* folded = me == x.root ? x.out.data() + b.offset(me) : rows;
      fold(folded, rows, own);
      const view<T, memory> out = me == x.root ? x.out : view<T, memory>();
      run_moving<collective::gather_v>(a, next(), 0,
                                 moving{view<const T, memory>(folded, own), out, x.root, me == x.root ? b : block_counts{}});
    } else {
      T* folded = x.out.data() + b.offset(me);
      fold(folded, rows, own);
      run_moving<collective::all_gather_v>(a, next(), b.largest * sizeof(T),
                                     moving{view<const T, memory>(folded, own), x.out, -1, b});
    }
  } else if constexpr (C == collective::reduce_scatter) {
    const std::size_t own = x.out.size();
    T* rows = rows_of(own);
    run_moving<collective::all_to_all>(a, fp, own * sizeof(T), moving{x.in, view<T, memory>(rows, P * own)});
    fold(x.out.data(), rows, own);
  } else if constexpr (C == collective::reduce_scatter_v) {
    const std::size_t own = x.counts.count(me);
    std::vector<std::size_t> each(P, own);
    std::vector<std::size_t> each_offsets = displacements(each);
    T* rows = rows_of(own);
    run_moving<collective::all_to_all_v>(a, fp, 0,
                                   moving{x.in, view<T, memory>(rows, P * own), -1, x.counts,
                                          block_counts{each, each_offsets, P * own, own}});
    fold(x.out.data(), rows, own);
  } else {
    static_assert(C == collective::all_reduce, "tutti: run_ordered runs reduce, all_reduce and reduce_scatter(_v)");
  }
}

template <transport Transport, algorithm Algorithm>
template <collective C, class A, class X>
void communicator<Transport, Algorithm>::run_moving(const A& a, const fingerprint& fp, std::size_t bytes, const X& x) {
  if constexpr (supports<A, C>) run<C>(a, fp, bytes, x);
  else run<C>(algo::direct{}, fp, bytes, x);
}

}  // namespace tutti
