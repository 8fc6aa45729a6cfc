/// \file
/// The conformance suite's second part: ranks that disagree about a call. One case per way to
/// disagree, for every collective (v-collectives included) and every algorithm that has it:
/// counts (small, zero against non-zero, the sizes of the paths large messages take), element
/// types, ops, roots, the order of calls, and, for the v-collectives, counts that differ between
/// the ranks that pass them, a view whose size is not the count its peers expect, and
/// all_to_all_v's send_counts[j] of rank i against rank j's recv_counts[i]; and point to point.
///
/// Every case demands, within the communicator's deadline:
/// - at least one rank raises mismatch_error naming both values (or, for disagreements that change
///   who talks to whom, the two collectives the ranks are in);
/// - every rank raises mismatch_error or peer_lost (a rank released by a failed peer's notice),
///   never timeout_error, never a normal return (the call is followed by two barriers, so a rank
///   whose part happened to complete learns of the failure there);
/// - every mismatch_error from the call names the odd rank and another rank;
/// - no rank's text names a step the user did not call: a collective's failure is said in that
///   collective's name on every rank, never as the `send/recv` a schedule made inside it;
/// - for counts that every rank passes (all_gather_v, reduce_scatter_v), every rank names the
///   index that differs and both values ("rank 1 passes counts[0] = 7, rank 0 passes counts[0] =
///   6"), not only the counts' sums;
/// - a rank released by a failed peer's notice (peer_lost) quotes the peer's reason whole, or cut
///   at a word with a marker ("[cut: N more bytes]");
/// - afterwards the communicator refuses every call with errc::aborted.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/error.hpp"
#include "tutti/testing/calls.hpp"
#include "tutti/testing/collectives.hpp"
#include "tutti/testing/outcomes.hpp"
#include "tutti/testing/report.hpp"

namespace tutti::testing {

/// How precisely the messages must name the disagreement.
enum class precision {
  /// Every mismatch_error from the call names both values: the ranks follow the same
  /// communication pattern (count, dtype, op), so the first exchange shows the difference.
  both_values,
  /// A different root or collective changes who talks to whom: a rank may finish its part and
  /// be caught in the barrier after it, and a message may name the two collectives the ranks
  /// are in ("different collectives, or a different order of calls") instead. At least one
  /// rank must still name both values or both collectives.
  values_or_order,
  /// Counts of a v-collective known where a block arrives: the rank that meets the difference
  /// names both values; the others may be released by its failure.
  some_rank_names_both,
};

inline constexpr const char* order_text = "different collectives, or a different order of calls";

/// N of a failure that reached this rank from rank N, which its message names first ("rank N
/// failed with mismatch_error, so ... fails too: <rank N's account>"), or -1.
inline int failed_rank(const std::string& what) {
  if (what.rfind("rank ", 0) != 0 || what.find(", so ") == std::string::npos) return -1;
  int v = 0;
  std::size_t i = 5;
  for (; i < what.size() && what[i] >= '0' && what[i] <= '9'; ++i) v = v * 10 + (what[i] - '0');
  return i > 5 ? v : -1;
}

/// A message without the ": <kind>" that std::system_error appends (as a relay quotes it: see
/// detail::own_text), whichever tutti error code's text that is.
inline std::string account_of(const std::string& what) {
  for (int c = static_cast<int>(errc::timeout); c <= static_cast<int>(errc::aborted); ++c) {
    const std::string tail = ": " + error_category().message(c);
    if (what.size() >= tail.size() && what.compare(what.size() - tail.size(), std::string::npos, tail) == 0)
      return what.substr(0, what.size() - tail.size());
  }
  return what;
}

/// Checks that `what`, the text rank r raised from a call of collective `called`, names no
/// internal step of a schedule: a collective's failure is said in its own name ("scatter_v(
/// shared_memory) ..."), on the rank that found it and on every rank it reached, never as the
/// point-to-point call a schedule made inside it ("send/recv(shared_memory)").
inline void check_names_call(report& rep, const std::string& label, int r, collective called, const std::string& what) {
  if (called == collective::send_recv) return;
  const std::string internal = std::string(collective_name(collective::send_recv)) + "(";
  rep.check(!contains(what, internal), label, r,
            "its text names '" + internal + "...)', a step inside the " + std::string(collective_name(called)) +
                " it called: " + what);
}

/// The verdict on one case (see the file comment) of a call of `called`.
inline void judge(report& rep, const std::vector<outcome>& out, int odd, const std::vector<std::string>& needles,
                  const std::string& label, precision how, collective called) {
  int precise = 0;
  auto names_both = [&](const std::string& what) {
    return std::all_of(needles.begin(), needles.end(), [&](const std::string& n) { return contains(what, n); });
  };
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int r = static_cast<int>(i);
    const auto& o = out[i];
    check_names_call(rep, label, r, called, o.what);
    // A mismatch is a mismatch_error on every rank: found here, or passed on by the rank that
    // found it.
    rep.check(o.k == kind::mismatch, label, r,
              "raised " + kind_name(o.k) + " in phase " + std::to_string(o.phase) + ": " + o.what);
    if (o.k != kind::none) {
      rep.check(o.next == kind::aborted, label, r, "after failing, its next collective raised " + kind_name(o.next));
      rep.check(o.next_send == kind::aborted, label, r, "after failing, its next send raised " + kind_name(o.next_send));
      rep.check(o.next_repeats, label, r, "after failing, its next call's error does not repeat the original one");
    }
    if (const int from = failed_rank(o.what); from >= 0) {
      // A rank released by a failed peer's notice names it first and quotes its whole reason.
      rep.check(from < static_cast<int>(out.size()) && from != r, label, r, "it names no other rank first: " + o.what);
      if (from < static_cast<int>(out.size()) && out[static_cast<std::size_t>(from)].k == kind::mismatch &&
          failed_rank(out[static_cast<std::size_t>(from)].what) < 0) {
        const std::string reason = account_of(out[static_cast<std::size_t>(from)].what).substr(0, 1000);
        rep.check(contains(o.what, reason) || contains(o.what, "[cut: "), label, r,
                  "it does not quote rank " + std::to_string(from) + "'s reason (\"" + reason + "\") whole: " + o.what);
      }
    }
    if (o.k != kind::mismatch) continue;
    const auto named = ranks_named(o.what);
    rep.check(named.size() >= 2, label, r, "its mismatch message does not name two ranks: " + o.what);
    const bool values = names_both(o.what);
    const bool order = how == precision::values_or_order && contains(o.what, order_text);
    if (values || order) ++precise;
    // Caught in the barrier after the call: ranks that disagree about the root may both finish
    // a call in which nobody waits for the other, and learn of it at the next call.
    if (o.phase != 1) continue;
    rep.check(named.count(odd) == 1, label, r, "its mismatch message does not name rank " + std::to_string(odd) + ": " + o.what);
    if (values || order || how == precision::some_rank_names_both) continue;
    for (const auto& needle : needles)
      rep.check(contains(o.what, needle), label, r, "its mismatch message lacks '" + needle + "': " + o.what);
  }
  rep.check(precise >= 1, label, -1, "no rank raised a mismatch_error naming both values");
}

/// Calls collective `c` with well-formed buffers for this rank's own arguments: `count` is the
/// call's count (the whole buffer for broadcast, reduce, all_reduce and the scans, the per-rank
/// block elsewhere; the v-collectives: every rank's count). Built from the row (testing/calls.hpp).
template <class T, class A, class Op = op::sum, class Comm>
void call(Comm& comm, collective c, std::size_t count, int root, const A& a = {}, const Op& o = {}) {
  using Tr = typename Comm::transport_type;
  using M = typename Comm::memory;
  with_collective(c, [&](auto k) {
    constexpr collective C = decltype(k)::value;
    if constexpr (has<A, C, Tr>) {
      const call_shape s = call_shape::any(C, comm.size(), count, root);
      auto b = make_buffers<C, T>(s, comm.rank(), placement::apart, [](int, std::size_t) { return T{}; }, T{});
      comm.template call<C>(describe<C, M>(s, comm.rank(), b, placement::apart, o), a);
    }
  });
}

template <class A, class Tr>
bool has_rt(collective c) {
  return with_collective(c, [](auto k) { return has<A, decltype(k)::value, Tr>; });
}

/// The count a fingerprint carries for `call(comm, c, count, ...)` on p ranks.
inline std::size_t fp_count(collective c, std::size_t count, int p) {
  return with_collective(c, [&](auto k) { return fingerprint_count<decltype(k)::value>(call_shape::uniform(p, count)); });
}

template <class Tuple, class F>
void each_type(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::tuple_element_t<I, Tuple>{}), ...); }(
      std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}

/// The disagreements a v-collective's counts allow (see the file comment), with algorithm A; by
/// where its row says the counts are passed.
template <class A, class Runner>
void check_v_counts(Runner& run, report& rep, collective c, int odd, const A& a, const std::string& where) {
  using Tr = typename Runner::transport_type;
  const int p = run.size();
  const auto P = static_cast<std::size_t>(p);
  const std::size_t base = 6;
  auto expect = [&](auto call_it, const std::vector<std::string>& needles, precision how, const std::string& what) {
    const std::string label = "mismatch: " + where + ", odd rank " + std::to_string(odd) + ": " + what;
    auto body = [&](auto& comm) {
      comm.set_timeout(run.deadline());
      return attempt(comm, call_it);
    };
    auto out = run.run(body, label);
    if (run.judges()) judge(rep, out, odd, needles, label, how, c);
  };
  const int other = odd == 0 ? 1 : 0;
  /// Rank me's call of shape `s`, its own block's buffer resized to `own` elements where given, its
  /// send count to `to` raised by one where given (all_to_all_v).
  auto call_with = [&](auto& comm, const call_shape& s, std::size_t own, int to) {
    using M = typename std::remove_cvref_t<decltype(comm)>::memory;
    with_collective(c, [&](auto k) {
      constexpr collective C = decltype(k)::value;
      if constexpr (has<A, C, Tr> && info(C).counts == counts_kind::per_rank) {
        const int me = comm.rank();
        auto b = make_buffers<C, float>(s, me, placement::apart, [](int, std::size_t) { return 0.0f; }, 0.0f);
        if (own != static_cast<std::size_t>(-1)) (info(C).layout.in == extent::own ? b.in : b.out).resize(own);
        if (to >= 0) {
          b.counts[static_cast<std::size_t>(to)] += 1;
          b.in.resize(b.in.size() + 1);
        }
        comm.template call<C>(describe<C, M>(s, me, b, placement::apart, op::sum{}), a);
      }
    });
  };
  constexpr auto keep = static_cast<std::size_t>(-1);
  const std::vector<std::size_t> even(P, base);
  switch (info(c).where) {
    case counts_at::every_rank: {
      // The odd rank's counts differ from everybody else's at another rank's index (so its own
      // view still holds its own count).
      const std::size_t j = static_cast<std::size_t>(other);
      auto call_it = [&](auto& comm) {
        call_shape s = call_shape::same_counts(p, even);
        s.counts[static_cast<std::size_t>(odd)][j] = base + 1;
        call_with(comm, s, keep, -1);
      };
      // Every rank names the index and both values: the rank that meets the difference, and the
      // others in the account its failure notice gives them.
      const std::string idx = "counts[" + std::to_string(j) + "] = ";
      expect(call_it, {idx + std::to_string(base), idx + std::to_string(base + 1)}, precision::both_values,
             "counts[" + std::to_string(j) + "] " + std::to_string(base + 1) + " against " + std::to_string(base));
      // A view whose size is not this rank's count: seen by the rank alone, a mismatch all the same.
      auto view_it = [&](auto& comm) { call_with(comm, call_shape::same_counts(p, even), comm.rank() == odd ? base - 1 : keep, -1); };
      expect(view_it, {std::to_string(base - 1) + " elements", "counts[" + std::to_string(odd) + "] = " + std::to_string(base)},
             precision::some_rank_names_both,
             "its view holds " + std::to_string(base - 1) + " elements, its count says " + std::to_string(base));
      break;
    }
    case counts_at::root: {
      // A rank's view against the root's count for it: the root is the other rank.
      auto call_it = [&](auto& comm) {
        call_with(comm, call_shape::same_counts(p, even, other), comm.rank() == odd ? base + 2 : keep, -1);
      };
      expect(call_it, {"counts[" + std::to_string(odd) + "] = " + std::to_string(base), std::to_string(base + 2) + " elements"},
             precision::some_rank_names_both, "rank " + std::to_string(odd) + "'s view of " + std::to_string(base + 2) + " against the root's count " +
                     std::to_string(base));
      break;
    }
    case counts_at::own_row: {
      // Rank odd sends the other rank one more element than that rank expects from it.
      const int j = other;
      auto call_it = [&](auto& comm) { call_with(comm, call_shape::same_counts(p, even), keep, comm.rank() == odd ? j : -1); };
      expect(call_it,
             {"recv_counts[" + std::to_string(odd) + "] = " + std::to_string(base),
              "send_counts[" + std::to_string(j) + "] = " + std::to_string(base + 1)},
             precision::some_rank_names_both, "rank " + std::to_string(odd) + "'s send_counts[" + std::to_string(j) + "] " + std::to_string(base + 1) +
                     " against rank " + std::to_string(j) + "'s recv_counts[" + std::to_string(odd) + "] " + std::to_string(base));
      break;
    }
    case counts_at::none: break;
  }
}

/// Every way ranks can disagree about collective `c`, for every algorithm of `Algorithms` that
/// has a schedule for it on the runner's transport, with the odd rank first and last.
template <class Algorithms, class Runner>
void check_mismatches(Runner& run, report& rep, collective c) {
  using Tr = typename Runner::transport_type;
  const int p = run.size();
  std::vector<int> odds{0, p - 1};
  odds.erase(std::unique(odds.begin(), odds.end()), odds.end());
  each_type<Algorithms>([&](auto a) {
    using A = decltype(a);
    if (!has_rt<A, Tr>(c)) return;
    const std::string where = std::string(collective_name(c)) + "(" + std::string(A::name) + ") on " + std::to_string(p) + " ranks";
    auto expect = [&](auto call_it, int odd, const std::vector<std::string>& needles, const std::string& what, precision how) {
      const std::string label = "mismatch: " + where + ", odd rank " + std::to_string(odd) + ": " + what;
      auto body = [&](auto& comm) {
        comm.set_timeout(run.deadline());
        return attempt(comm, call_it);
      };
      auto out = run.run(body, label);
      if (run.judges()) judge(rep, out, odd, needles, label, how, c);
    };
    const bool v = info(c).counts == counts_kind::per_rank;
    for (int odd : odds) {
      if (c != collective::barrier && !v) {
        std::vector<std::pair<std::size_t, std::size_t>> counts{{10, 12}, {0, 3}};
        if (c == collective::all_reduce) {
          counts.emplace_back(70000, 70016);                                       // two shot (shared_memory)
          counts.emplace_back(std::size_t{1} << 20, (std::size_t{1} << 20) + 16);  // 4 MiB: single copy
        }
        for (auto [mine, theirs] : counts) {
          auto call_it = [&, mine = mine, theirs = theirs](auto& comm) {
            call<float>(comm, c, comm.rank() == odd ? mine : theirs, 0, a);
          };
          expect(call_it, odd,
                 {"count=" + std::to_string(fp_count(c, mine, p)), "count=" + std::to_string(fp_count(c, theirs, p))},
                 "count " + std::to_string(mine) + " against " + std::to_string(theirs), precision::both_values);
        }
      }
      if (v && p >= 2) check_v_counts(run, rep, c, odd, a, where);
      if (c != collective::barrier) {
        auto dtype_it = [&](auto& comm) {
          if (comm.rank() == odd) call<float>(comm, c, 6, 0, a);
          else call<std::int32_t>(comm, c, 6, 0, a);
        };
        expect(dtype_it, odd, {"dtype=float", "dtype=int32"}, "float against int32", precision::both_values);
      }
      if (info(c).reduces) {
        auto op_it = [&](auto& comm) {
          if (comm.rank() == odd) call<float>(comm, c, 6, 0, a, op::max{});
          else call<float>(comm, c, 6, 0, a, op::sum{});
        };
        expect(op_it, odd, {"op=max", "op=sum"}, "max against sum", precision::both_values);
      }
      if (info(c).rooted) {
        auto root_it = [&](auto& comm) { call<float>(comm, c, 6, comm.rank() == odd ? 0 : 1, a); };
        expect(root_it, odd, {"root=0", "root=1"}, "root 0 against root 1", precision::values_or_order);
      }
      // Order: where the others call c, the odd rank calls another collective.
      const collective other = c == collective::barrier ? collective::all_reduce : collective::barrier;
      auto order_it = [&](auto& comm) {
        if (comm.rank() != odd) return call<float>(comm, c, 5, 0, a);
        if (has_rt<A, Tr>(other)) call<float>(comm, other, 5, 0, a);
        else call<float>(comm, other, 5, 0, algo::automatic{});
      };
      expect(order_it, odd, {std::string(collective_name(c)) + " #0", std::string(collective_name(other)) + " #0"},
             std::string(collective_name(other)) + " against " + std::string(collective_name(c)), precision::values_or_order);
    }
  });
}

/// Point to point: rank 0 sends to rank 1, which expects another element type or has room for
/// fewer elements than sent (a shorter message is no error where the transport matches
/// point-to-point itself, `matched_p2p`); every other rank goes straight to the barrier after it.
template <class Runner>
void check_send_recv(Runner& run, report& rep) {
  for (int variant = 0; variant < 2; ++variant) {
    auto call_it = [&](auto& comm) {
      if (comm.rank() == 0) {
        std::vector<float> v(5, 1.0f);
        comm.send(view(v), 1, 3);
      } else if (comm.rank() == 1) {
        if (variant == 0) {
          std::vector<std::int32_t> v(4);
          comm.recv(view(v), 0, 3);
        } else {
          std::vector<float> v(4);
          comm.recv(view(v), 0, 3);
        }
      }
    };
    auto body = [&](auto& comm) {
      comm.set_timeout(run.deadline());
      return attempt(comm, call_it);
    };
    const std::string label = std::string("mismatch: send/recv on ") + std::to_string(run.size()) + " ranks: " +
                              (variant == 0 ? "float sent, int32 expected" : "count 5 sent, room for 4");
    auto out = run.run(body, label);
    if (!run.judges()) continue;
    judge(rep, out, 1, variant == 0 ? std::vector<std::string>{"dtype=float", "dtype=int32"}
                                    : std::vector<std::string>{"count=5", "count=4"},
          label, precision::both_values, collective::send_recv);
    rep.check(out[1].k == kind::mismatch, label, 1, "the receiver raised " + kind_name(out[1].k) + ": " + out[1].what);
  }
}

}  // namespace tutti::testing
