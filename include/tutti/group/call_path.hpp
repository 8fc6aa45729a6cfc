/// \file
/// The communicator's one call path. Every collective call goes through `call<C>`:
///
///   1. `ordered()`: wait for what was posted before it, and hold the communicator for this
///      thread (another thread's call meanwhile is a `usage_error`: see `in_use`);
///   2. the checks every rank can make alone, derived from the row's `layout` (sizes, root,
///      counts, overlaps): `usage_error` before any traffic, which breaks the communicator and
///      tells the peers (they may be in the call already);
///   3. the fingerprint (`next_fp`; for counts every rank passes, their digest in `shape`), then
///      the checks whose failure the peers must hear of (a view whose size is not this rank's
///      count of a v-collective: `mismatch_error`, announced as this rank's failure);
///   4. one rank: the local copy the row's result implies, nothing else;
///   5. `run<C>`: the algorithm (automatic: the one it chooses, `TUTTI_DEBUG=info` saying why),
///      in the flight recorder and `guarded`. On host memory, schedules of tutti's run on erased
///      elements (`run_erased`: compiled once per element size, not per type and op);
///   6. `finish`: `op::avg`'s division, once, where the row's result is a reduction.
///
/// `icall<C>` posts the same description to the progress engine. Members of
/// `communicator`, defined here out of its class.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tutti/core/collective.hpp"
#include "tutti/group/communicator.hpp"

namespace tutti {

template <transport Transport, algorithm Algorithm>
template <collective C, class T, class Op, class Arg>
auto communicator<Transport, Algorithm>::call(const call_desc<T, memory, Op>& d, const Arg& arg) {
  return with_stream(arg, [&](const auto& a) { run_call<C>(a, d); });
}

template <transport Transport, algorithm Algorithm>
template <collective C, class T, class Op, class Algo>
request communicator<Transport, Algorithm>::icall(const call_desc<T, memory, Op>& d, const Algo& a) {
  return post([this, d, a] { call<C>(d, a); });
}

template <transport Transport, algorithm Algorithm>
template <class Algo, class T, class Op>
request communicator<Transport, Algorithm>::post_all_reduce(const Algo& a, const desc<T, Op>& d) {
  using task = detail::reduce_task<communicator, T, memory, Op, Algo>;
  auto t = std::make_unique<task>(this, d.out, d.op, a);
  auto state = t->state;
  if (fusing_ && d.out.size_bytes() <= fusion_piece_bytes && fuses_exactly<T, Op>())
    hold({std::move(t), &task::kind, d.out.size_bytes(), &task::fuse});
  else
    submit(std::move(t));
  return request(std::move(state));
}

template <transport Transport, algorithm Algorithm>
template <collective C, class A, class T, class Op>
void communicator<Transport, Algorithm>::run_call(const A& a, const desc<T, Op>& d) {
  static_assert(supports<A, C>,
                "tutti: this algorithm has no schedule for this collective (the collective is named in the "
                "instantiation above; see the table in README.md); use tutti::algo::automatic or one that has it");
  static_assert(!(info(C).ordered && std::is_same_v<detail::inner_op_t<Op>, op::avg>),
                "tutti: scan and exscan reduce in rank order; op::avg (a sum divided by the group size) has no "
                "meaning there: use op::sum and divide by rank() + 1 where you need a running mean");
  const auto busy = ordered(collective_name(C).data());
  const auto c = checked<C>(d);
  if (c.alone) [[unlikely]]
    record_alone(c.fp, d.in.size_bytes(), d.out.size_bytes());
  if constexpr (detail::rank_ordered_op<Op> && info(C).reduces && !info(C).ordered) {
    using K = std::remove_cvref_t<decltype(c.x.op)>;
    if (!c.alone) run_ordered<C>(a, c.fp, c.basis, c.x);
    else fold_alone<K>(c.x.out);
  } else if constexpr (detail::rank_ordered_op<Op> && info(C).reduces) {
    // scan, exscan: direct's chain is the serial left fold on every rank
    using K = std::remove_cvref_t<decltype(c.x.op)>;
    static_assert(std::is_same_v<K, op::ordered<detail::inner_op_t<K>>>,
                  "tutti: scan and exscan take op::ordered<Op> (any op is in rank order there), not this op");
    const algo::call_args<T, memory, detail::inner_op_t<K>, algo::counts_for<C>> x{c.x.in, c.x.out, c.x.root, {}, {},
                                                                                    c.x.op.op};
    if (!c.alone) run<C>(algo::direct{}, c.fp, c.basis, x);
  } else {
    if (!c.alone) run<C>(a, c.fp, c.basis, c.x);
  }
  if constexpr (info(C).reduces && std::is_same_v<detail::inner_op_t<Op>, op::avg>) {
    if (info(C).result != result_kind::reduce_to_root || d.root == rank()) finish(d.out, d.op);
  }
}

template <transport Transport, algorithm Algorithm>
template <collective C, class T, class Op>
auto communicator<Transport, Algorithm>::checked(const desc<T, Op>& d) {
  constexpr collective_info row = info(C);
  constexpr buffer_layout lay = row.layout;
  const int p = size(), me = rank();
  const auto P = static_cast<std::size_t>(p);
  const bool at_root = me == d.root;
  const bool in_place = d.in_place || (lay.overlap == aliasing::same &&
                                       static_cast<const void*>(d.in.data()) == static_cast<const void*>(d.out.data()));
  if constexpr (row.rooted) check_root(d.root, C);

  // The call's count n (what every rank agrees on), the fingerprint's count and the bytes
  // automatic chooses by.
  std::size_t n = 0, fp_count = 0, basis = 0;
  block_counts b, r;  // per-rank counts (all_to_all_v: send, receive)
  if constexpr (row.counts == counts_kind::uniform) {
    constexpr bool in_blocks = lay.in == extent::blocks, out_blocks = lay.out == extent::blocks;
    if constexpr (lay.in == extent::count) n = d.in.size();
    else if constexpr (lay.out == extent::count) n = d.out.size();
    if constexpr (in_blocks && out_blocks) {  // all_to_all: a block for every rank each way
      check_size(d.out.size(), d.in.size(), "out", "in.size()", C);
      if (d.in.size() % P != 0)
        usage(what(C) + ": in has " + std::to_string(d.in.size()) + " elements, not a multiple of the group size " +
              std::to_string(p));
      n = d.in.size() / P;
      fp_count = d.in.size();
    } else {
      fp_count = n;
      if (!lay.blocks_at_root || at_root) {
        if constexpr (out_blocks) check_size(d.out.size(), n * P, "out", "size() * in.size()", C);
        if constexpr (in_blocks) check_size(d.in.size(), n * P, "in", "size() * out.size()", C);
      }
      if constexpr (lay.in == extent::count && lay.out == extent::count)
        if (!in_place) check_size(d.out.size(), d.in.size(), "out", "in.size()", C);
    }
    if constexpr (row.size == size_basis::buffer) basis = (in_blocks && !out_blocks ? n * P : n) * sizeof(T);
    else if constexpr (row.size == size_basis::block) basis = n * sizeof(T);
  } else if constexpr (row.counts == counts_kind::per_rank) {
    if constexpr (row.where == counts_at::own_row) {
      b = blocks(d.counts, "send_counts", C, offsets_a_);
      r = blocks(d.recv_counts, "recv_counts", C, offsets_b_);
      check_size(d.in.size(), b.total, "in", "the sum of send_counts", C);
      check_size(d.out.size(), r.total, "out", "the sum of recv_counts", C);
      if (b.count(me) != r.count(me))
        usage(what(C) + ": send_counts[" + std::to_string(me) + "] = " + std::to_string(b.count(me)) +
              " but recv_counts[" + std::to_string(me) + "] = " + std::to_string(r.count(me)) +
              " (this rank's block to itself)");
    } else {
      if (row.where == counts_at::every_rank || at_root || !d.counts.empty())
        b = blocks(d.counts, "counts", C, offsets_a_);
      if (!lay.blocks_at_root || at_root) {
        if constexpr (lay.out == extent::room) check_room(d.out.size(), b.total, "out", "the sum of the counts", C);
        if constexpr (lay.in == extent::room) check_room(d.in.size(), b.total, "in", "the sum of the counts", C);
        if constexpr (lay.in == extent::total) check_size(d.in.size(), b.total, "in", "the sum of the counts", C);
        if constexpr (lay.out == extent::total) check_size(d.out.size(), b.total, "out", "the sum of the counts", C);
      }
    }
    if constexpr (row.where == counts_at::every_rank) fp_count = b.total;
    if constexpr (row.size == size_basis::largest_block) basis = b.largest * sizeof(T);
  }

  // Overlaps.
  if (!lay.blocks_at_root || at_root) {
    if constexpr (lay.overlap == aliasing::disjoint) {
      check_disjoint(d.in, view<const T, memory>(d.out), C, false);
    } else if constexpr (lay.overlap == aliasing::same) {
      if (!d.in_place) check_disjoint(d.in, view<const T, memory>(d.out), C, true);
    } else if constexpr (lay.overlap == aliasing::own_block) {
      const std::size_t own = row.counts == counts_kind::per_rank ? (b.size() ? b.offset(me) : 0)
                                                                  : n * static_cast<std::size_t>(me);
      // The smaller buffer may be exactly this rank's block of the larger one.
      if constexpr (lay.out == extent::blocks || lay.out == extent::room)
        check_disjoint_or_own_block(d.in, view<const T, memory>(d.out), own, C);
      else
        check_disjoint_or_own_block(view<const T, memory>(d.out), d.in, own, C);
    }
  }

  // The call as a schedule takes it: the op as the kernels run it (avg as sum).
  const auto kop = [&] {  // (info(C), not row: nvcc's front end takes no constexpr local in a lambda)
    if constexpr (info(C).reduces) return kernel_op(d.op);
    else return algo::no_op{};
  }();
  using K = std::remove_const_t<decltype(kop)>;

  // The fingerprint, made where the call keeps it (each copy of it is seven stores and loads on
  // every call), then what the peers must hear of.
  std::uint32_t op_id = 0;
  if constexpr (row.reduces) op_id = op_traits<Op>::id();
  using Counts = algo::counts_for<C>;
  const auto counts = [](const block_counts& k) {  // (a uniform collective's call carries none)
    if constexpr (std::is_same_v<Counts, block_counts>) return k;
    else return Counts{};
  };
  checked_call<T, K, Counts> c{next_fp(C, dtype_of<T>(), fp_count, row.rooted ? d.root : -1, op_id), basis,
                               {d.in, d.out, d.root, counts(b), counts(r), kop}, p == 1};
  fingerprint& fp = c.fp;
  if constexpr (row.where == counts_at::every_rank) fp.shape = detail::counts_digest(d.counts);
  if constexpr (row.counts == counts_kind::per_rank && row.where != counts_at::own_row) {
    // this rank's own block: a size its peers expect
    constexpr bool own_in = lay.in == extent::own;
    const std::size_t has = own_in ? d.in.size() : d.out.size();
    if (b.size() && has != b.count(me)) {
      std::string tail;
      if (row.where == counts_at::every_rank)
        tail = own_in ? ", the count " + other_ranks() + " expect from rank " + std::to_string(me)
                      : ", the block " + other_ranks() + (row.reduces ? " reduce" : " send") + " for rank " +
                            std::to_string(me);
      else if (!at_root)
        tail = " (the counts passed here; the root, rank " + std::to_string(d.root) + ", " +
               (own_in ? "expects" : "sends") + " its own)";
      own_count_mismatch(fp, own_in ? "in" : "out", has, b.count(me), tail);
    }
  }

  if (c.alone) {
    if (!broken_.empty() || aborted()) [[unlikely]]
      refuse_alone();
    if constexpr (row.result != result_kind::none && row.result != result_kind::prefix_exclusive &&
                  lay.overlap != aliasing::one_buffer) {
      const std::size_t k = std::min(d.in.size(), d.out.size());
      copy(d.in.subview(0, k), d.out.subview(0, k));
    }
  }
  return c;
}

template <transport Transport, algorithm Algorithm>
template <collective C, class A0, class X>
void communicator<Transport, Algorithm>::run(const A0& a0, const fingerprint& fp, std::size_t bytes, const X& x) {
  const auto& a = [&]() -> const auto& {
    if constexpr (std::is_same_v<A0, algo::inherit>) return algo_;
    else return a0;
  }();
  using A = std::remove_cvref_t<decltype(a)>;
  // The erased form of the call: element size S (uniform collectives that do not reduce move
  // bytes: S = 1, the counts in bytes).
  using T = std::remove_const_t<typename decltype(x.out)::element_type>;
  constexpr std::size_t S = detail::moves_bytes(C) ? 1 : sizeof(T);
  constexpr std::size_t scale = sizeof(T) / S;
  using E = detail::elem<S>;
  auto erased = [&] {
    detail::erased_op op;
    if constexpr (info(C).reduces) op = detail::erase_op<T>(x.op);
    algo::call_args<E, memory, detail::erased_op, algo::counts_for<C>> e{
        view<const E, memory>(reinterpret_cast<const E*>(x.in.data()), x.in.size() * scale),
        view<E, memory>(reinterpret_cast<E*>(x.out.data()), x.out.size() * scale), x.root, {}, {}, op};
    if constexpr (info(C).counts != counts_kind::uniform) {
      e.counts = x.counts;
      e.recv_counts = x.recv_counts;
    }
    return e;
  };
  // (Generic, so that its body is instantiated only where it is called: on host memory.)
  const auto run_erased_here = [&](auto candidate) {
    if constexpr (compiled_here<A, C, S>()) {
      const auto args = erased();
      if constexpr (std::is_same_v<A, Algorithm>)
        run_compiled(a, nullptr, C, S, candidate, fp, &args);
      else  // the call's own algorithm, one of the communicator's automatic's candidates
        run_compiled(algo_, &a, C, S, detail::candidate_index<A, Algorithm>, fp, &args);
    } else {
      run_erased<C, S>(a, candidate, fp, erased());
    }
  };
  if constexpr (detail::is_automatic<A>::value) {
    const std::size_t i = choice(a, C, bytes);
    bool done = false;
    a.visit(i, [&](const auto& concrete) {
      using CA = std::remove_cvref_t<decltype(concrete)>;
      if constexpr (!algorithm_for<CA, C, Transport>)
        throw config_error("TUTTI_ALGO asks for " + std::string(CA::name) + ", which has no " +
                           std::string(collective_name(C)) + " schedule on this transport");
      else if constexpr (!runs_erased<CA, C>()) {
        execute<C>(concrete, fp, x);
        done = true;
      }
    });
    if constexpr (std::is_same_v<memory, host_memory> && !own_memory<Transport>)
      if (!done) run_erased_here(i);
  } else if constexpr (runs_erased<A, C>()) {
    run_erased_here(std::size_t{0});
  } else {
    execute<C>(a, fp, x);
  }
}

template <transport Transport, algorithm Algorithm>
template <class A>
std::size_t communicator<Transport, Algorithm>::choice(const A& a, collective c, std::size_t bytes) {
  if (cfg_.debug == log_level::info) [[unlikely]] {
    std::string why;
    const std::size_t i = a.choose(plan_for<A>(), c, bytes, &why);
    detail::log(log_level::info, cfg_, rank(), explain_text(c, bytes, A::names[i], why));
    return i;
  }
  if constexpr (std::is_same_v<A, Algorithm>) {
    if (last_choice_.coll == c && last_choice_.bytes == bytes) return last_choice_.index;
    const std::size_t i = a.choose(*plan_, c, bytes);
    last_choice_ = {c, bytes, i};
    return i;
  } else {
    return a.choose(plan_for<A>(), c, bytes);
  }
}

template <transport Transport, algorithm Algorithm>
template <collective C, std::size_t S, class A>
void communicator<Transport, Algorithm>::run_erased(const A& a, std::size_t candidate, const fingerprint& fp,
                                                    const algo::call_args<detail::elem<S>, memory, detail::erased_op,
                                                                          algo::counts_for<C>>& x) {
  if constexpr (detail::is_automatic<A>::value) {
    a.visit(candidate, [&](const auto& concrete) {
      using CA = std::remove_cvref_t<decltype(concrete)>;
      if constexpr (runs_erased<CA, C>()) execute<C>(concrete, fp, x);
    });
  } else {
    (void)candidate;
    execute<C>(a, fp, x);
  }
}

template <transport Transport, algorithm Algorithm>
void communicator<Transport, Algorithm>::run_compiled(const algorithm_type& a, const void* own, collective c,
                                                      std::size_t s, std::size_t candidate, const fingerprint& fp,
                                                      const void* args) {
  compiled_entry run = nullptr;
  if constexpr (std::is_same_v<memory, host_memory> && !own_memory<Transport>) {
    static constexpr auto table = compiled_table(std::make_index_sequence<scheduled_count>{});
    const auto ci = static_cast<std::size_t>(c);
    const std::size_t si = s == 1 ? 0 : s == 2 ? 1 : s == 4 ? 2 : s == 8 ? 3 : 4;
    if (ci < table.size() && si < 4) run = table[ci][si];
  }
  if (!run)
    throw std::logic_error("tutti: run_compiled has no run of " + std::string(collective_name(c)) + " at element size " +
                           std::to_string(s));
  (this->*run)(a, own, candidate, fp, args);
}

template <transport Transport, algorithm Algorithm>
template <collective C, std::size_t S>
void communicator<Transport, Algorithm>::run_compiled_at(const algorithm_type& a, const void* own,
                                                         std::size_t candidate, const fingerprint& fp, const void* args) {
  const auto& x =
      *static_cast<const algo::call_args<detail::elem<S>, memory, detail::erased_op, algo::counts_for<C>>*>(args);
  if (!own) {
    run_erased<C, S>(a, candidate, fp, x);
  } else {  // the call's own algorithm, of the type of candidate number `candidate`
    a.visit(candidate, [&](const auto& of_type) {
      using CA = std::remove_cvref_t<decltype(of_type)>;
      if constexpr (runs_erased<CA, C>()) run_erased<C, S>(*static_cast<const CA*>(own), 0, fp, x);
    });
  }
}

template <transport Transport, algorithm Algorithm>
template <collective C, class A, class X>
void communicator<Transport, Algorithm>::execute(const A& a, const fingerprint& fp, const X& x) {
  channel<Transport> ch = channel_of<A>(fp);
  recorded(ch, {static_cast<std::size_t>(C), std::max(x.in.size_bytes(), x.out.size_bytes())}, [&] {
    if constexpr (info(C).where == counts_at::every_rank) {
      // A difference in the counts every rank passes reaches this rank as the peer's sum and
      // digest; knowing its own counts, it names the index and both values where it can.
      try {
        schedule<C>(a, ch, x);
      } catch (const fingerprint_mismatch& e) {
        detail::restate_counts(e, x.counts.counts);
        throw;
      }
    } else {
      schedule<C>(a, ch, x);
    }
  });
}

template <transport Transport, algorithm Algorithm>
template <collective C, class A, class Ch, class X>
void communicator<Transport, Algorithm>::schedule(const A& a, Ch& ch, const X& x) {
  if constexpr (!std::is_same_v<std::remove_cv_t<decltype(schedule_call_out_of_place<C>)>, int>) {
    // A collective of one buffer called out of place (all_reduce(in, out)): the algorithm's
    // out-of-place schedule where it has one, else in place on `out` after one copy.
    if (static_cast<const void*>(x.in.data()) != static_cast<const void*>(x.out.data())) {
      if constexpr (requires { schedule_call_out_of_place<C>(a, ch, x); }) {
        schedule_call_out_of_place<C>(a, ch, x);
      } else {
        ch.copy(x.in, x.out);
        schedule_call<C>(a, ch, x);
      }
      return;
    }
  }
  schedule_call<C>(a, ch, x);
}

template <transport Transport, algorithm Algorithm>
template <class A>
const typename A::plan& communicator<Transport, Algorithm>::plan_for() const {
  if constexpr (std::is_same_v<A, Algorithm>) {
    return *plan_;
  } else if constexpr (std::is_same_v<A, algo::automatic>) {
    if (!default_plan_)  // a per-call automatic on a communicator of another automatic_of
      default_plan_ = std::make_shared<const algo::automatic::plan>(
          algo::automatic::make_plan<Transport>(cfg_.algo_override, size()));
    return *default_plan_;
  } else {
    thread_local std::optional<typename A::plan> other;  // another automatic_of, per call site type
    other = A::template make_plan<Transport>(cfg_.algo_override, size());
    return *other;
  }
}

template <transport Transport, algorithm Algorithm>
void communicator<Transport, Algorithm>::make_plans() {
  // TUTTI_ALGO is parsed against this communicator's automatic_of, or, for a fixed algorithm,
  // against the default automatic that a per-call `algo::automatic{}` would use.
  if constexpr (detail::is_automatic<Algorithm>::value)
    plan_ = std::make_shared<const typename Algorithm::plan>(Algorithm::template make_plan<Transport>(cfg_.algo_override, size()));
  else
    default_plan_ = std::make_shared<const algo::automatic::plan>(algo::automatic::make_plan<Transport>(cfg_.algo_override, size()));
}

// ---- fusion -------------------------------------------------------------------------------------

template <transport Transport, algorithm Algorithm>
template <class T, class Op, class Algo>
void communicator<Transport, Algorithm>::fused_all_reduce(std::span<const view<T, memory>> parts, const Op& op,
                                                          const Algo& a0) {
  std::vector<std::size_t> counts(parts.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) total += counts[i] = parts[i].size();
  auto fp = next_fp(collective::all_reduce, dtype_of<T>(), total, -1, op_traits<Op>::id());
  fp.shape = detail::counts_digest(counts);
  if constexpr (detail::rank_ordered_op<Op>) {
    // Folded elementwise in rank order: packed, run as one call, unpacked (the same bits). One
    // rank folds each part's own values, as an unfused call does.
    using K = decltype(kernel_op(op));
    if (size() == 1)
      for (const auto& v : parts) fold_alone<K>(v);
    if (size() > 1)
      packed_run(parts, total, [&](view<T, memory> whole) {
        run_ordered<collective::all_reduce>(
            a0, fp, total * sizeof(T), algo::call_args<T, memory, decltype(kernel_op(op))>{whole, whole, -1, {}, {}, kernel_op(op)});
      });
  } else if (size() > 1) {
    const auto& a = [&]() -> const auto& {
      if constexpr (std::is_same_v<Algo, algo::inherit>) return algo_;
      else return a0;
    }();
    using A = std::remove_cvref_t<decltype(a)>;
    const auto kop = kernel_op(op);
    using E = detail::elem<sizeof(T)>;
    auto run_erased_parts = [&](std::size_t candidate) {
      std::vector<view<E, memory>> erased(parts.size());
      for (std::size_t i = 0; i < parts.size(); ++i)
        erased[i] = view<E, memory>(reinterpret_cast<E*>(parts[i].data()), parts[i].size());
      const std::span<const view<E, memory>> erased_parts(erased);
      if constexpr (std::is_same_v<A, Algorithm> && compiled_here<A, collective::all_reduce, sizeof(T)>())
        run_fused_compiled(a, sizeof(T), candidate, fp, &erased_parts, detail::erase_op<T>(kop), total);
      else
        run_fused<sizeof(T)>(a, candidate, fp, erased_parts, detail::erase_op<T>(kop), total);
    };
    if constexpr (detail::is_automatic<A>::value) {
      const std::size_t i = a.choose(plan_for<A>(), collective::all_reduce, total * sizeof(T));
      bool done = false;
      a.visit(i, [&](const auto& concrete) {
        using CA = std::remove_cvref_t<decltype(concrete)>;
        if constexpr (!algorithm_for<CA, collective::all_reduce, Transport>)
          throw config_error("TUTTI_ALGO asks for " + std::string(CA::name) + ", which has no all_reduce schedule on this transport");
        else if constexpr (!runs_erased<CA, collective::all_reduce>()) {
          fused_parts(concrete, fp, parts, kop, total);
          done = true;
        }
      });
      if constexpr (std::is_same_v<memory, host_memory> && !own_memory<Transport>)
        if (!done) run_erased_parts(i);
    } else if constexpr (runs_erased<A, collective::all_reduce>()) {
      run_erased_parts(0);
    } else {
      fused_parts(a, fp, parts, kop, total);
    }
  }
  for (const auto& v : parts) finish(v, op);
}

template <transport Transport, algorithm Algorithm>
void communicator<Transport, Algorithm>::run_fused_compiled(const algorithm_type& a, std::size_t s, std::size_t candidate,
                                                            const fingerprint& fp, const void* parts,
                                                            const detail::erased_op& op, std::size_t total) {
  if constexpr (std::is_same_v<memory, host_memory> && !own_memory<Transport>) {
    if (s == 1) return run_fused<1>(a, candidate, fp, fused_parts_of<1>(parts), op, total);
    if (s == 2) return run_fused<2>(a, candidate, fp, fused_parts_of<2>(parts), op, total);
    if (s == 4) return run_fused<4>(a, candidate, fp, fused_parts_of<4>(parts), op, total);
    if (s == 8) return run_fused<8>(a, candidate, fp, fused_parts_of<8>(parts), op, total);
  }
  throw std::logic_error("tutti: run_fused_compiled has no run at element size " + std::to_string(s));
}

template <transport Transport, algorithm Algorithm>
template <std::size_t S, class A>
void communicator<Transport, Algorithm>::run_fused(const A& a, std::size_t candidate, const fingerprint& fp,
                                                   std::span<const view<detail::elem<S>, memory>> parts,
                                                   const detail::erased_op& op, std::size_t total) {
  if constexpr (detail::is_automatic<A>::value) {
    a.visit(candidate, [&](const auto& concrete) {
      using CA = std::remove_cvref_t<decltype(concrete)>;
      if constexpr (runs_erased<CA, collective::all_reduce>()) fused_parts(concrete, fp, parts, op, total);
    });
  } else {
    (void)candidate;
    fused_parts(a, fp, parts, op, total);
  }
}

template <transport Transport, algorithm Algorithm>
template <class A, class E, class Op>
void communicator<Transport, Algorithm>::fused_parts(const A& alg, const fingerprint& fp, std::span<const view<E, memory>> parts,
                                                     const Op& op, std::size_t total) {
  // Where the algorithm reads and writes the parts where they lie
  // (`algo::shared_memory::all_reduce_parts`), without a copy; else packed into a buffer kept
  // between runs (no page faults, nothing zeroed), reduced as one, unpacked.
  channel<Transport> ch = channel_of<A>(fp);
  recorded(ch, {static_cast<std::size_t>(collective::all_reduce), total * sizeof(E)}, [&] {
    if constexpr (requires { alg.all_reduce_parts(ch, parts, op); }) {
      if (alg.all_reduce_parts(ch, parts, op)) return;
    }
    packed_run(parts, total, [&](view<E, memory> whole) {
      schedule_call<collective::all_reduce>(alg, ch, algo::call_args<E, memory, Op>{whole, whole, -1, {}, {}, op});
    });
  });
}

// ---- checks ---------------------------------------------------------------------------------

template <transport Transport, algorithm Algorithm>
block_counts communicator<Transport, Algorithm>::blocks(std::span<const std::size_t> counts, const char* name, collective c,
                                                        std::vector<std::size_t>& offsets) {
  if (counts.size() != size_t_size())
    usage(what(c) + ": " + name + " has " + std::to_string(counts.size()) + " entries; it must have one per rank (" +
          std::to_string(size()) + ")");
  offsets.resize(counts.size());
  block_counts b;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    offsets[i] = b.total;
    if (counts[i] > (std::size_t{1} << 62) - b.total) usage(what(c) + ": " + name + " sum to more than 2^62 elements");
    b.total += counts[i];
    b.largest = std::max(b.largest, counts[i]);
  }
  b.counts = counts;
  b.offsets = offsets;
  return b;
}

template <transport Transport, algorithm Algorithm>
std::string communicator<Transport, Algorithm>::other_ranks() const {
  const int other = rank() == 0 ? 1 : 0;
  return size() == 2 ? "rank " + std::to_string(other) : "the other ranks (rank " + std::to_string(other) + ", ...)";
}

template <transport Transport, algorithm Algorithm>
void communicator<Transport, Algorithm>::check_root(int root, collective c) {
  if (root < 0 || root >= size())
    usage(what(c) + ": root " + std::to_string(root) + " is outside 0.." + std::to_string(size() - 1));
}

template <transport Transport, algorithm Algorithm>
void communicator<Transport, Algorithm>::check_peer(int peer, int tag, const char* call, bool receive) {
  if (peer == any_source || tag == any_tag) {
    const std::string any = peer == any_source ? "any_source" : "any_tag";
    if (!matched_p2p<Transport>)
      usage(std::string(call) + " on rank " + std::to_string(rank()) + ": " + any +
            " needs a transport that matches point-to-point itself (tutti::matched_p2p: inproc, shm, mpi); this one "
            "receives the next message of a named source and tag");
    if (!receive)
      usage(std::string(call) + " on rank " + std::to_string(rank()) + ": " + any +
            " is for receives only; a send names its destination and tag");
  }
  if (peer != any_source && (peer < 0 || peer >= size()))
    usage(std::string(call) + " on rank " + std::to_string(rank()) + ": peer " + std::to_string(peer) +
          " is outside 0.." + std::to_string(size() - 1));
  if (peer == rank())  // as torch.distributed: a message to itself is a copy the program makes
    usage(std::string(call) + " on rank " + std::to_string(rank()) + ": a rank cannot " + call +
          " to or from itself (copy the data instead)");
  if (tag < 0 && tag != any_tag) usage(std::string(call) + ": tag " + std::to_string(tag) + " is negative");
}

template <transport Transport, algorithm Algorithm>
void communicator<Transport, Algorithm>::check_size(std::size_t got, std::size_t want, const char* name, const char* rule,
                                                    collective c) {
  if (got != want)
    usage(what(c) + ": " + name + " has " + std::to_string(got) + " elements; it must hold " + rule + " = " +
          std::to_string(want));
}

template <transport Transport, algorithm Algorithm>
void communicator<Transport, Algorithm>::check_room(std::size_t got, std::size_t want, const char* name, const char* rule,
                                                    collective c) {
  if (got < want)
    usage(what(c) + ": " + name + " has " + std::to_string(got) + " elements; it must hold at least " + rule + " = " +
          std::to_string(want));
}

template <transport Transport, algorithm Algorithm>
template <class A, class B>
void communicator<Transport, Algorithm>::check_disjoint(view<A, memory> a, view<B, memory> b, collective c, bool allow_same) {
  if (allow_same && static_cast<const void*>(a.data()) == static_cast<const void*>(b.data())) return;
  if (detail::overlaps(a, b)) usage(what(c) + ": in and out overlap");
}

/// `in` may be exactly this rank's block of `out`, at element `own` (in place); nothing else.
template <transport Transport, algorithm Algorithm>
template <class A, class B>
void communicator<Transport, Algorithm>::check_disjoint_or_own_block(view<A, memory> in, view<B, memory> out, std::size_t own,
                                                                     collective c) {
  if (static_cast<const void*>(in.data()) == static_cast<const void*>(out.data() + own)) return;
  if (detail::overlaps(in, out)) usage(what(c) + ": in overlaps out (other than being this rank's own block)");
}

/// "all_gather_v on rank 2: in has 5 elements, but counts[2] = 4<tail>": a view whose size is
/// not this rank's own count of a v-collective.
template <transport Transport, algorithm Algorithm>
void communicator<Transport, Algorithm>::own_count_mismatch(const fingerprint& fp, const char* buf, std::size_t has,
                                                            std::size_t count, const std::string& tail) {
  local_mismatch(fp, what(fp.coll) + ": " + buf + " has " + std::to_string(has) + " elements, but counts[" +
                         std::to_string(rank()) + "] = " + std::to_string(count) + tail);
}

}  // namespace tutti
