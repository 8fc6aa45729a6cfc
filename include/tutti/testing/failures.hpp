/// \file
/// The conformance suite's third part: ranks that fail. A transport must turn each of these into
/// an error that names the rank to blame, within the communicator's deadline, never a hang:
/// - a peer alive but silent: the ranks waiting for it raise timeout_error naming it (no sooner
///   than the deadline), and it learns at its next call that they are gone (peer_lost);
/// - a rank that fails (it aborts its communicator): every other rank raises peer_lost naming it,
///   long before the deadline;
/// - `abort()` from another thread releases a call blocked in a wait within about 20 ms (the
///   best of three tries is held to `options::abort_within`; every try is noted in the report);
/// - one rank's `usage_error`, caught by a careless program that goes on calling, fails that
///   call on every rank, naming that rank first, and no later call returns on any rank;
/// - one communicator used from two threads at once: the second thread's call is a usage_error
///   naming both calls, and the peers' next call fails with it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/testing/mismatch.hpp"
#include "tutti/testing/outcomes.hpp"
#include "tutti/testing/report.hpp"

namespace tutti::testing {

/// A peer alive but silent: rank p-1 stays out of the call (an all_reduce, a barrier, a recv
/// by rank 0 from it) until the others have given up after `deadline`, then makes the same call
/// and a barrier. The others raise timeout_error (one of them naming rank p-1; the others may
/// have it from a peer that timed out first) or peer_lost; the late rank raises peer_lost or its
/// peers' timeout_error, at its call or, where its part could complete without them (its peers'
/// parts were already posted), at the barrier after it.
template <class Runner>
void check_silent_peer(Runner& run, report& rep, std::chrono::milliseconds deadline = std::chrono::milliseconds(300)) {
  const int p = run.size();
  if (p < 2) return;
  const int silent = p - 1;
  for (int variant = 0; variant < 3; ++variant) {
    const char* what = variant == 0 ? "all_reduce" : variant == 1 ? "barrier" : "recv";
    const std::string label = std::string("silent peer: ") + what + " on " + std::to_string(p) + " ranks, rank " +
                              std::to_string(silent) + " silent for " + std::to_string(deadline.count()) + " ms and more";
    // Only rank 0 waits in the recv variant; the others have nothing to do.
    const auto waits = [&](int r) { return variant != 2 || r == 0; };
    auto body = [&](auto& comm) {
      comm.set_timeout(deadline);
      std::vector<float> v(64, 1.0f);
      auto the_call = [&](auto& c) {
        if (variant == 0) c.all_reduce(view(v.data(), v.size()));
        else if (variant == 1) c.barrier();
        else if (c.rank() == 0) c.recv(view(v.data(), 8), silent, 1);
        else if (c.rank() == silent) c.send(view(v.data(), 8), 0, 1);
      };
      if (comm.rank() == silent) {
        // Long after every peer has timed out: they are gone (their failure notices, or their
        // ends of the links), and this rank must be told so.
        std::this_thread::sleep_for(deadline * 3 + std::chrono::milliseconds(500));
        auto late = [&](auto& c) {
          the_call(c);
          c.barrier();
        };
        return attempt(comm, late, false);
      }
      if (!waits(comm.rank())) return outcome{};
      return attempt(comm, the_call, false);
    };
    const auto out = run.run(body, label);
    if (!run.judges()) continue;
    int named = 0;
    for (int r = 0; r < p; ++r) {
      const auto& o = out[static_cast<std::size_t>(r)];
      if (variant != 2) check_names_call(rep, label, r, variant == 0 ? collective::all_reduce : collective::barrier, o.what);
      if (r == silent) {
        // Its peers gave up on it: peer_lost, or the timeout_error of a peer that timed out,
        // named first.
        const int from = failed_rank(o.what);
        rep.check(o.k == kind::peer_lost || (o.k == kind::timeout && from >= 0 && from != silent), label, r,
                  "the late rank raised " + kind_name(o.k) +
                      " (want peer_lost, or the timeout_error of a peer named first) in its call or the barrier after "
                      "it: " + o.what);
        continue;
      }
      if (!waits(r)) continue;
      rep.check(o.k == kind::timeout || o.k == kind::peer_lost, label, r,
                "raised " + kind_name(o.k) + " (want timeout_error, or peer_lost from a peer that timed out): " + o.what);
      if (o.k != kind::none) rep.check(o.next == kind::aborted, label, r, "after failing, its next call raised " + kind_name(o.next));
      if (o.k != kind::timeout) continue;
      rep.check(contains(o.what, "timed out"), label, r, "its timeout_error does not say 'timed out': " + o.what);
      rep.check(contains(o.what, what), label, r, "its timeout_error does not name the call (" + std::string(what) + "): " + o.what);
      // No sooner than the deadline (5% for the clock's and the scheduler's rounding).
      rep.check(o.seconds >= 0.95 * std::chrono::duration<double>(deadline).count(), label, r,
                "timed out after " + std::to_string(o.seconds) + " s, before the deadline of " +
                    std::to_string(deadline.count()) + " ms");
      if (ranks_named(o.what).count(silent)) ++named;
    }
    rep.check(named >= 1, label, -1, "no rank raised a timeout_error naming the silent rank " + std::to_string(silent));
  }
}

/// A rank that fails: rank p-1 aborts its communicator after a first call that all made; the
/// others, in the next all_reduce, must raise peer_lost naming it, long before the deadline.
template <class Runner>
void check_lost_peer(Runner& run, report& rep) {
  const int p = run.size();
  if (p < 2) return;
  const int lost = p - 1;
  const std::string label = "lost peer: all_reduce on " + std::to_string(p) + " ranks, rank " + std::to_string(lost) + " aborts";
  auto body = [&](auto& comm) {
    comm.set_timeout(run.deadline());
    std::vector<float> v(1000, 1.0f);
    comm.all_reduce(view(v.data(), v.size()));
    if (comm.rank() == lost) comm.abort();
    auto next = [&](auto& c) {
      c.all_reduce(view(v.data(), v.size()));
      c.barrier();
    };
    return attempt(comm, next, false);
  };
  const auto out = run.run(body, label);
  if (!run.judges()) return;
  for (int r = 0; r < p; ++r) {
    const auto& o = out[static_cast<std::size_t>(r)];
    if (r == lost) {
      rep.check(o.k == kind::aborted, label, r, "the aborted rank's call raised " + kind_name(o.k) + ": " + o.what);
      continue;
    }
    rep.check(o.k == kind::peer_lost, label, r, "raised " + kind_name(o.k) + " (want peer_lost): " + o.what);
    check_names_call(rep, label, r, collective::all_reduce, o.what);
    if (o.k == kind::peer_lost)
      rep.check(ranks_named(o.what).count(lost) == 1, label, r,
                "its peer_lost does not name rank " + std::to_string(lost) + ": " + o.what);
    rep.check(o.next == kind::aborted, label, r, "after failing, its next call raised " + kind_name(o.next));
  }
}

/// abort() from another thread of rank 0 while its all_reduce waits for rank 1, which comes
/// late: the call returns errc::aborted within `within` (the best of up to three tries) and the
/// others raise peer_lost naming rank 0.
template <class Runner>
void check_abort(Runner& run, report& rep, std::chrono::milliseconds within = std::chrono::milliseconds(20)) {
  const int p = run.size();
  if (p < 2) return;
  const std::string label = "abort: all_reduce on " + std::to_string(p) + " ranks, rank 0 aborted from another thread";
  double best = 1e9;
  std::vector<double> tries;
  for (int attempt_no = 0; attempt_no < 3 && best > std::chrono::duration<double>(within).count(); ++attempt_no) {
    std::atomic<double> latency{-1};
    auto body = [&](auto& comm) {
      comm.set_timeout(run.deadline());
      std::vector<float> v(1000, 1.0f);
      comm.all_reduce(view(v.data(), v.size()));
      std::thread killer;
      std::atomic<std::int64_t> aborted_at{0};
      if (comm.rank() == 0)
        killer = std::thread([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(150));
          aborted_at = std::chrono::steady_clock::now().time_since_epoch().count();
          comm.abort();
        });
      auto blocked = [&](auto& c) {
        if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        c.all_reduce(view(v.data(), v.size()));
        c.barrier();  // a peer may finish the call the aborted rank left: the next one must fail
      };
      outcome o = attempt(comm, blocked, false);
      if (comm.rank() == 0) {
        const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
        if (killer.joinable()) killer.join();
        const auto at = aborted_at.load();
        if (at != 0)
          latency = std::chrono::duration<double>(std::chrono::steady_clock::duration(now - at)).count();
        o.seconds = latency;
      }
      return o;
    };
    // Every rank gets every rank's record, so all of them decide alike whether to try again.
    const auto out = run.run(body, label);
    for (int r = 0; r < p && run.judges(); ++r) {
      const auto& o = out[static_cast<std::size_t>(r)];
      if (r == 0) {
        rep.check(o.k == kind::aborted, label, r, "the aborted call raised " + kind_name(o.k) + ": " + o.what);
        continue;
      }
      rep.check(o.k == kind::peer_lost, label, r, "raised " + kind_name(o.k) + " (want peer_lost): " + o.what);
      if (o.k == kind::peer_lost)
        rep.check(ranks_named(o.what).count(0) == 1, label, r, "its peer_lost does not name rank 0: " + o.what);
    }
    // Rank 0's record carries the time from abort() to the call's return.
    const double s = out[0].seconds;
    tries.push_back(s);
    if (s >= 0) best = std::min(best, s);
  }
  if (!run.judges()) return;
  std::string all;
  for (double s : tries) all += (all.empty() ? "" : ", ") + std::to_string(s * 1e3).substr(0, 6) + " ms";
  rep.note(label + ": released " + all + " after abort()");
  rep.check(best <= std::chrono::duration<double>(within).count(), label, 0,
            "the blocked call returned " + all + " after abort(); want within " + std::to_string(within.count()) + " ms");
}

/// One rank makes a usage error in the 4th of six calls of collective `C` (a root out of range;
/// for all_to_all_v, an `in` longer than the sum of its send_counts; for other unrooted
/// collectives, `out` overlapping the end of `in`), catches it and carries on, as
/// a careless program would; the others call normally, then every rank calls a barrier. The
/// erring rank raises usage_error at its 4th call; every other rank's first error is that
/// usage_error (named first: "rank N failed with usage_error, so ..."), in the 4th call or a
/// later one (a rank whose part went through without waiting learns at its next wait; one still
/// finishing the 3rd may fail there); every
/// call after a rank's first error raises errc::aborted: no call pairs with a later one of the
/// erring rank, so none returns wrong data.
template <collective C, class Runner>
void check_one_rank_usage(Runner& run, report& rep) {
  using T = std::int32_t;
  constexpr collective_info row = info(C);
  const int p = run.size();
  if constexpr (C == collective::barrier || (!row.rooted && calls_detail::one_buffer<C>)) return;  // no such mistake
  if (p < 2) return;
  const int erring = p - 1;
  const std::string label = "usage_error on one rank: " + std::string(collective_name(C)) + " on " + std::to_string(p) +
                            " ranks, rank " + std::to_string(erring) + "'s 4th call";
  auto body = [&](auto& comm) {
    using Comm = std::remove_cvref_t<decltype(comm)>;
    using M = typename Comm::memory;
    comm.set_timeout(run.deadline());
    outcome o;
    bool failed = false, later_returned = false;
    std::string later;
    for (int i = 0; i <= 6; ++i) {
      try {
        if (i == 6) {
          comm.barrier();
        } else {
          const call_shape s = call_shape::any(C, p, 4, 0);
          auto b = make_buffers<C, T>(s, comm.rank(), placement::apart, [](int r, std::size_t k) { return T(r + k); }, T{});
          auto d = describe<C, M>(s, comm.rank(), b, placement::apart, op::sum{});
          std::vector<T> both;
          if (i == 3 && comm.rank() == erring) {
            if constexpr (row.rooted) {
              d.root = p;  // outside 0..p-1
            } else if constexpr (C == collective::all_to_all_v) {
              // An `in` longer than the sum of send_counts: it would send less than it holds.
              both.assign(b.in.begin(), b.in.end());
              both.push_back(T{});
              d.in = view<const T, M>(both.data(), both.size());
            } else {
              both.resize(b.in.size() + b.out.size() - 1);  // out starts at in's last element
              d.in = view<const T, M>(both.data(), b.in.size());
              d.out = view<T, M>(both.data() + b.in.size() - 1, b.out.size());
            }
          }
          comm.template call<C>(d, algo::automatic{});
        }
        if (failed) later_returned = true;
      } catch (...) {
        if (!failed) {
          o.k = classify(std::current_exception(), o.what);
          o.phase = i + 1;
          failed = true;
        } else {
          std::string w;
          const kind k = classify(std::current_exception(), w);
          if (k != kind::aborted && later.empty()) later = kind_name(k) + ": " + w;
        }
      }
    }
    o.next = later_returned ? kind::none : later.empty() ? kind::aborted : kind::other;
    if (!later.empty()) o.what += " || later: " + later;
    return o;
  };
  const auto out = run.run(body, label);
  if (!run.judges()) return;
  for (int r = 0; r < p; ++r) {
    const auto& o = out[static_cast<std::size_t>(r)];
    check_names_call(rep, label, r, C, o.what);
    rep.check(o.k == kind::usage, label, r, "raised " + kind_name(o.k) + " (want usage_error): " + o.what);
    rep.check(o.next == kind::aborted, label, r,
              o.next == kind::none ? "a call after its first error returned" : "a call after its first error raised " + o.what);
    if (r == erring) {
      rep.check(o.phase == 4, label, r, "its usage_error came from call " + std::to_string(o.phase) + ", not the 4th");
      continue;
    }
    // The 3rd at the earliest: a rank still finishing the call before (whose peer is done with
    // it) may see the erring rank's notice before its own completion, and fail there (mpi's
    // non-blocking collectives): no data is returned, which is what matters.
    rep.check(o.phase >= 3, label, r, "failed at call " + std::to_string(o.phase) + ", before the mistake's call could be reached");
    rep.check(failed_rank(o.what) == erring, label, r, "its usage_error does not name rank " + std::to_string(erring) + " first: " + o.what);
  }
}

/// Rank 0 calls all_reduce on one thread and, while that waits for its (late) peers, barrier on
/// a second thread. The barrier raises usage_error naming both calls; the all_reduce completes
/// (its peers are right to pair with it); rank 0's next call raises errc::aborted, and the
/// peers' next call (a barrier) raises that usage_error, naming rank 0 first.
template <class Runner>
void check_concurrent_use(Runner& run, report& rep) {
  const int p = run.size();
  if (p < 2) return;
  const std::string label = "one communicator used from two threads at once on rank 0 of " + std::to_string(p);
  auto body = [&](auto& comm) {
    comm.set_timeout(run.deadline());
    outcome o;
    std::vector<float> v(64, 1.0f);
    auto record = [](kind& k, std::string& what, auto&& f) {
      try {
        f();
      } catch (...) {
        k = classify(std::current_exception(), what);
      }
    };
    kind first = kind::none;
    std::string first_what, ignored;
    if (comm.rank() == 0) {
      std::atomic<bool> calling{false};
      std::thread second([&] {
        while (!calling.load()) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the all_reduce waits for its peers
        record(o.k, o.what, [&] { comm.barrier(); });
      });
      calling = true;
      record(first, first_what, [&] { comm.all_reduce(view(v.data(), v.size())); });
      second.join();
      record(o.next, ignored, [&] { comm.barrier(); });
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      record(first, first_what, [&] { comm.all_reduce(view(v.data(), v.size())); });
      record(o.k, o.what, [&] { comm.barrier(); });
      record(o.next, ignored, [&] { comm.barrier(); });
    }
    o.phase = first == kind::none ? 1 : 0;
    if (first != kind::none) o.what += " || the all_reduce raised " + kind_name(first) + ": " + first_what;
    return o;
  };
  const auto out = run.run(body, label);
  if (!run.judges()) return;
  for (int r = 0; r < p; ++r) {
    const auto& o = out[static_cast<std::size_t>(r)];
    rep.check(o.phase == 1, label, r, "the all_reduce, which every rank made once, did not return: " + o.what);
    rep.check(o.k == kind::usage, label, r, (r == 0 ? "the second thread's barrier raised " : "the next barrier raised ") +
                                                kind_name(o.k) + " (want usage_error): " + o.what);
    rep.check(contains(o.what, "barrier") && contains(o.what, "all_reduce") && contains(o.what, "thread"), label, r,
              "its usage_error does not name both calls and the threads: " + o.what);
    if (r > 0) rep.check(failed_rank(o.what) == 0, label, r, "its usage_error does not name rank 0 first: " + o.what);
    rep.check(o.next == kind::aborted, label, r, "the call after it raised " + kind_name(o.next) + " (want errc::aborted)");
  }
}

}  // namespace tutti::testing
