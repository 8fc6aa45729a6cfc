// Ranks that disagree about a call: one body per collective, written once against a "runner"
// that gives each case a fresh communicator (after a mismatch a communicator is unusable by
// design) and collects what every rank raised. Runners: threads over inproc (thread_runner,
// tests/group/mismatch.cpp) and processes over shm, tcp and mpi (process_runner,
// tests/multiproc/mismatch_*.cpp), where a second communicator that never takes part in a
// mismatch gathers the outcomes.
//
// Every case demands, within the communicator's deadline (the tests use 5 s):
// - at least one rank raises mismatch_error naming both values (or, for disagreements that change
//   who talks to whom, the two collectives the ranks are in), from the call itself or, where
//   the ranks' schedules never met (two ranks that each took the other for the root), from the
//   next call, the barrier after it;
// - every rank raises mismatch_error or peer_lost (a rank released by a failed peer's notice),
//   never timeout_error, never a normal return (the call is followed by two barriers, so a rank
//   whose part happened to complete learns of the failure there, see `attempt`);
// - every mismatch_error from the call names the odd rank and another rank;
// - afterwards the communicator refuses every call with errc::aborted.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "collective_checks.hpp"
#include "outcomes.hpp"
#include "ranks.hpp"

namespace tutti::test::mismatch {

/// The deadline of the communicators under test.
inline constexpr std::chrono::seconds deadline{5};

/// What one rank raised.
struct outcome {
  kind k = kind::none;
  std::string what;
  int phase = 0;             ///< 1: the call under test; 2, 3: the barriers after it
  kind next = kind::none;    ///< what the next call on the broken communicator raised
};

/// Runs `call(comm)` then two barriers on this rank and records what it raised; after a
/// failure, one more barrier, which must be refused at once (errc::aborted) without
/// communication. Two barriers: over buffered transports a rank whose part of the call went
/// through can also finish the first barrier, when its peers find the disagreement (a stale
/// message in their rings) only after they posted their part of it; the second barrier then
/// raises peer_lost. No closing round trip in every call makes that rank fail sooner.
template <class Comm, class Call>
outcome attempt(Comm& comm, Call& call) {
  outcome o;
  int phase = 1;
  try {
    call(comm);
    phase = 2;
    comm.barrier();
    phase = 3;
    comm.barrier();
  } catch (...) {
    o.k = classify(std::current_exception(), o.what);
    o.phase = phase;
    try {
      comm.barrier();
    } catch (...) {
      std::string ignored;
      o.next = classify(std::current_exception(), ignored);
    }
  }
  return o;
}

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
};

inline constexpr const char* order_text = "different collectives, or a different order of calls";

/// The verdict on one case (see the file comment).
inline void judge(const std::vector<outcome>& out, int odd, const std::vector<std::string>& needles,
                  const std::string& label, precision how) {
  INFO(label);
  int precise = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int r = static_cast<int>(i);
    const auto& o = out[i];
    CHECK_MESSAGE((o.k == kind::mismatch || o.k == kind::peer_lost),
                  "rank " << r << " raised " << kind_name(o.k) << " in phase " << o.phase << ": " << o.what);
    if (o.k != kind::none)
      CHECK_MESSAGE(o.next == kind::aborted, "after failing, rank " << r << "'s next call raised " << kind_name(o.next));
    if (o.k != kind::mismatch) continue;
    const auto named = ranks_named(o.what);
    CHECK_MESSAGE(named.size() >= 2, "rank " << r << "'s mismatch message does not name two ranks: " << o.what);
    const bool values = std::all_of(needles.begin(), needles.end(), [&](const std::string& n) { return contains(o.what, n); });
    const bool order = how == precision::values_or_order && contains(o.what, order_text);
    if (values || order) ++precise;
    // Caught in the barrier after the call: ranks that disagree about the root may both finish
    // a call in which nobody waits for the other (each a reduce leaf of the other's root), and
    // learn of it at the next call; that message names both values, but the barrier too.
    if (o.phase != 1) continue;
    CHECK_MESSAGE(named.count(odd) == 1, "rank " << r << "'s mismatch message does not name rank " << odd << ": " << o.what);
    if (values || order) continue;
    for (const auto& needle : needles)
      CHECK_MESSAGE(contains(o.what, needle), "rank " << r << "'s mismatch message lacks '" << needle << "': " << o.what);
  }
  CHECK_MESSAGE(precise >= 1, "no rank raised a mismatch_error naming both values");
}

// ---- runners --------------------------------------------------------------------------------

/// Threads over inproc, n ranks: every case is a fresh inproc::run.
template <class... Algorithms>
struct thread_runner {
  using algorithms = std::tuple<Algorithms...>;
  using transport_type = inproc;
  int n = 2;

  int size() const { return n; }
  bool judges() const { return true; }

  template <class Call>
  std::vector<outcome> run(Call& call, const std::string& label) {
    std::vector<outcome> out(static_cast<std::size_t>(n));
    auto body = [&](auto& comm) {
      comm.set_timeout(deadline);
      out[static_cast<std::size_t>(comm.rank())] = attempt(comm, call);
    };
    (void)run_watched(n, body, label);
    return out;
  }
};

/// Processes: `make()` (called by every rank together) gives a fresh communicator for each case;
/// `control`, which never takes part in a mismatch, gathers every rank's outcome (rank 0 judges).
template <class Comm, class Make, class... Algorithms>
struct process_runner {
  using algorithms = std::tuple<Algorithms...>;
  using transport_type = typename Comm::transport_type;
  Comm& control;
  Make make;

  int size() const { return control.size(); }
  bool judges() const { return control.rank() == 0; }

  template <class Call>
  std::vector<outcome> run(Call& call, const std::string&) {
    outcome mine;
    {
      auto comm = make();
      comm.set_timeout(deadline);
      mine = attempt(comm, call);
    }
    // One fixed-size record per rank: kind, phase, next, then the message (truncated).
    constexpr std::size_t rec = 1024;
    std::vector<char> me(rec, '\0'), all(rec * static_cast<std::size_t>(size()));
    me[0] = static_cast<char>(mine.k);
    me[1] = static_cast<char>(mine.phase);
    me[2] = static_cast<char>(mine.next);
    std::memcpy(me.data() + 3, mine.what.data(), std::min(mine.what.size(), rec - 4));
    control.all_gather(view<const char>(me), view(all));
    std::vector<outcome> out(static_cast<std::size_t>(size()));
    for (std::size_t r = 0; r < out.size(); ++r) {
      const char* p = all.data() + r * rec;
      out[r].k = static_cast<kind>(p[0]);
      out[r].phase = p[1];
      out[r].next = static_cast<kind>(p[2]);
      out[r].what = std::string(p + 3);
    }
    return out;
  }
};

template <class Comm, class... Algorithms, class Make>
auto make_process_runner(Comm& control, Make make) {
  return process_runner<Comm, Make, Algorithms...>{control, std::move(make)};
}

// ---- calls ------------------------------------------------------------------------------------

/// Calls collective `c` with well-formed buffers for this rank's own arguments: `count` is the
/// whole buffer (broadcast, reduce, all_reduce) or the per-rank block (everything else).
template <class T, class A, class Op = op::sum, class Comm>
void call(Comm& comm, collective c, std::size_t count, int root, const A& a = {}, const Op& o = {}) {
  using Tr = typename Comm::transport_type;
  const auto p = static_cast<std::size_t>(comm.size());
  const bool at_root = comm.rank() == root;
  switch (c) {
    case collective::broadcast:
      if constexpr (has<A, collective::broadcast, Tr>) {
        std::vector<T> b(count);
        comm.broadcast(view(b), root, a);
      }
      return;
    case collective::reduce:
      if constexpr (has<A, collective::reduce, Tr>) {
        std::vector<T> b(count);
        comm.reduce(view(b), root, o, a);
      }
      return;
    case collective::all_reduce:
      if constexpr (has<A, collective::all_reduce, Tr>) {
        std::vector<T> b(count);
        comm.all_reduce(view(b), o, a);
      }
      return;
    case collective::gather:
      if constexpr (has<A, collective::gather, Tr>) {
        std::vector<T> in(count), out(at_root ? count * p : 0);
        comm.gather(view(in), view(out), root, a);
      }
      return;
    case collective::all_gather:
      if constexpr (has<A, collective::all_gather, Tr>) {
        std::vector<T> in(count), out(count * p);
        comm.all_gather(view(in), view(out), a);
      }
      return;
    case collective::scatter:
      if constexpr (has<A, collective::scatter, Tr>) {
        std::vector<T> in(at_root ? count * p : 0), out(count);
        comm.scatter(view(in), view(out), root, a);
      }
      return;
    case collective::all_to_all:
      if constexpr (has<A, collective::all_to_all, Tr>) {
        std::vector<T> in(count * p), out(count * p);
        comm.all_to_all(view(in), view(out), a);
      }
      return;
    case collective::reduce_scatter:
      if constexpr (has<A, collective::reduce_scatter, Tr>) {
        std::vector<T> in(count * p), out(count);
        comm.reduce_scatter(view(in), view(out), o, a);
      }
      return;
    case collective::barrier:
      if constexpr (has<A, collective::barrier, Tr>) comm.barrier(a);
      return;
    default: break;
  }
  throw std::logic_error("test bug: no such collective");
}

template <class A, class Tr>
bool has_rt(collective c) {
  switch (c) {
    case collective::broadcast: return has<A, collective::broadcast, Tr>;
    case collective::reduce: return has<A, collective::reduce, Tr>;
    case collective::all_reduce: return has<A, collective::all_reduce, Tr>;
    case collective::gather: return has<A, collective::gather, Tr>;
    case collective::all_gather: return has<A, collective::all_gather, Tr>;
    case collective::scatter: return has<A, collective::scatter, Tr>;
    case collective::all_to_all: return has<A, collective::all_to_all, Tr>;
    case collective::reduce_scatter: return has<A, collective::reduce_scatter, Tr>;
    case collective::barrier: return has<A, collective::barrier, Tr>;
    default: return false;
  }
}

/// The count a fingerprint carries for `call(comm, c, count, ...)` on p ranks.
inline std::size_t fp_count(collective c, std::size_t count, int p) {
  return c == collective::all_to_all ? count * static_cast<std::size_t>(p) : count;
}

inline bool is_rooted(collective c) {
  return c == collective::broadcast || c == collective::reduce || c == collective::gather || c == collective::scatter;
}
inline bool is_reducing(collective c) {
  return c == collective::reduce || c == collective::all_reduce || c == collective::reduce_scatter;
}

template <class Tuple, class F>
void each_type(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(std::tuple_element_t<I, Tuple>{}), ...);
  }(std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}

// ---- the bodies -------------------------------------------------------------------------------

/// Every way ranks can disagree about collective `c`, for every algorithm the runner offers that
/// has a schedule for it, with the odd rank first and last: counts (small, zero against
/// non-zero, and for all_reduce sizes that take the two-shot and single-copy paths where a
/// transport has them), element types, ops, roots, and the order of calls (the odd rank is in a
/// barrier, or an all_reduce where `c` is the barrier).
template <class Runner>
void check_collective(Runner& run, collective c) {
  using Tr = typename Runner::transport_type;
  const int p = run.size();
  std::vector<int> odds{0, p - 1};
  odds.erase(std::unique(odds.begin(), odds.end()), odds.end());
  each_type<typename Runner::algorithms>([&](auto a) {
    using A = decltype(a);
    if (!has_rt<A, Tr>(c)) return;
    const std::string where = std::string(collective_name(c)) + "(" + std::string(A::name) + ") on " +
                              std::to_string(p) + " ranks";
    auto expect = [&](auto call_it, int odd, const std::vector<std::string>& needles, const std::string& what,
                      precision how) {
      const std::string label = where + ", odd rank " + std::to_string(odd) + ": " + what;
      auto out = run.run(call_it, label);
      if (run.judges()) judge(out, odd, needles, label, how);
    };
    for (int odd : odds) {
      if (c != collective::barrier) {
        std::vector<std::pair<std::size_t, std::size_t>> counts{{10, 12}, {0, 3}};
        if (c == collective::all_reduce) {
          counts.emplace_back(70000, 70016);                                   // two shot (shared_memory)
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
        auto dtype_it = [&](auto& comm) {
          if (comm.rank() == odd) call<float>(comm, c, 6, 0, a);
          else call<std::int32_t>(comm, c, 6, 0, a);
        };
        expect(dtype_it, odd, {"dtype=float", "dtype=int32"}, "float against int32", precision::both_values);
      }
      if (is_reducing(c)) {
        auto op_it = [&](auto& comm) {
          if (comm.rank() == odd) call<float>(comm, c, 6, 0, a, op::max{});
          else call<float>(comm, c, 6, 0, a, op::sum{});
        };
        expect(op_it, odd, {"op=max", "op=sum"}, "max against sum", precision::both_values);
      }
      if (is_rooted(c)) {
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
             std::string(collective_name(other)) + " against " + std::string(collective_name(c)),
             precision::values_or_order);
    }
  });
}

/// Point to point: rank 0 sends to rank 1, which expects another count or element type; every
/// other rank goes straight to the barrier after it.
template <class Runner>
void check_send_recv(Runner& run) {
  for (int variant = 0; variant < 2; ++variant) {
    auto body = [&](auto& comm) {
      if (comm.rank() == 0) {
        std::vector<float> v(4, 1.0f);
        comm.send(view(v), 1, 3);
      } else if (comm.rank() == 1) {
        if (variant == 0) {
          std::vector<std::int32_t> v(4);
          comm.recv(view(v), 0, 3);
        } else {
          std::vector<float> v(5);
          comm.recv(view(v), 0, 3);
        }
      }
    };
    const std::string label = std::string("send/recv on ") + std::to_string(run.size()) + " ranks: " +
                              (variant == 0 ? "float sent, int32 expected" : "count 4 sent, 5 expected");
    auto out = run.run(body, label);
    if (!run.judges()) continue;
    judge(out, 1, variant == 0 ? std::vector<std::string>{"dtype=float", "dtype=int32"}
                               : std::vector<std::string>{"count=4", "count=5"},
          label, precision::both_values);
    INFO(label);
    CHECK_MESSAGE(out[1].k == kind::mismatch, "the receiver raised " << kind_name(out[1].k) << ": " << out[1].what);
  }
}

}  // namespace tutti::test::mismatch
