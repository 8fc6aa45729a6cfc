/// \file
/// The conformance suite's third part: ranks that fail. A transport must turn each of these into
/// an error that names the rank to blame, within the communicator's deadline, never a hang:
/// - a peer alive but silent: the ranks waiting for it raise timeout_error naming it (no sooner
///   than the deadline), and it learns at its next call that they are gone (peer_lost);
/// - a rank that fails (it aborts its communicator): every other rank raises peer_lost naming it,
///   long before the deadline;
/// - `abort()` from another thread releases a call blocked in a wait within about 20 ms (the
///   best of three tries is held to `options::abort_within`; every try is noted in the report).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/testing/mismatch.hpp"
#include "tutti/testing/outcomes.hpp"
#include "tutti/testing/report.hpp"

namespace tutti::testing {

/// A peer alive but silent: rank p-1 stays out of the call (an all_reduce, a barrier, a recv
/// by rank 0 from it) until the others have given up after `deadline`, then makes the same call
/// and a barrier. The others raise timeout_error (one of them naming rank p-1) or peer_lost (from
/// a peer that timed out first); the late rank raises peer_lost, at its call or, where its part
/// could complete without them (its peers' parts were already posted), at the barrier after it.
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
      if (r == silent) {
        rep.check(o.k == kind::peer_lost, label, r,
                  "the late rank raised " + kind_name(o.k) + " (want peer_lost) in its call or the barrier after it: " +
                      o.what);
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

}  // namespace tutti::testing
