/// \file
/// `toolkit::wait_until`: the wait loop of the transport contract, which every transport runs
/// with its own way of looking (`ready`), of checking its peers (`check`) and of sleeping
/// (`sleep`: a futex, `poll`, a condition variable, a short nap). Between looks it spins, then
/// yields, then sleeps; before each sleep it honours `communicator::abort()` (sleeps of an
/// abortable wait last at most `abort_poll`), asks the transport whether a peer failed or left
/// the call behind, and checks the deadline.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/detail/futex.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/toolkit/errors.hpp"

namespace tutti::toolkit {

/// How long one sleep of an abortable wait may last: `abort()` takes effect within it (the
/// contract: a blocked call returns within about 20 ms of `abort()`, settling included).
inline constexpr std::chrono::milliseconds abort_poll{5};

/// What a wait is for, for its abort and timeout messages.
struct wait_subject {
  const header& h;
  int me;                  ///< this rank, in the group's numbering
  std::string_view doing;  ///< "to receive from", "to make room at", "in MPI_Ibcast for"
  int peer;                ///< the rank waited for, -1: none in particular
  /// The rank whose data the wait is for, where it differs from `peer` (a full-duplex send and
  /// receive named by its send): the wait's time goes to it (`wait_context::waited_ns`).
  int counted_for = -2;
};

/// Raises `errc::aborted` if `w`'s communicator was aborted.
TUTTI_DECL void check_aborted(const wait_context& w, const wait_subject& s);

/// How a wait spends the time before it sleeps.
struct wait_policy {
  int spins = 512;                            ///< looks with a pause between them, first
  std::chrono::microseconds spin_for{0};      ///< and go on spinning until this long after the last progress
  std::chrono::microseconds yield_for{200};   ///< then yield between looks until this much later
  std::chrono::milliseconds slice{1000};      ///< the longest sleep of a wait that cannot be aborted
  /// While spinning and yielding, check (abort, peers, deadline) every this many idle looks too,
  /// not only before sleeping (0: only then): for waits that yield long (mpi, whose progress
  /// happens only inside its calls).
  int check_every = 0;
};

/// What one look found.
enum class look {
  done,   ///< what the wait is for has happened
  moved,  ///< progress, not done yet (bytes moved): spin again
  idle,   ///< nothing new
};

/// The deadline passed: throws `timeout_error` with `text` (what `expired` does by default).
[[noreturn]] inline void time_out(const std::string& text) { throw timeout_error(text); }

/// Waits until `ready()` says `look::done` (or returns true). Each look that finds nothing
/// pauses, for `p.spins` looks and `p.spin_for`, then yields until `p.yield_for` after the last
/// progress; then, before each sleep: the abort flag; `check(waited)` (the transport's peers,
/// given how long the wait has lasted: it throws `peer_lost` or `mismatch_error`); the deadline,
/// past which `expired(now)` throws or returns a later deadline (a grace for a peer's own
/// failure to arrive first); and `sleep(until)`, which returns by `until` or when something may
/// have happened. `ready` may make progress itself (I/O, MPI's progress engine).
template <class Ready, class Check, class Sleep, class Expired>
void wait_until(const wait_context& w, const wait_subject& s, const wait_policy& p, Ready&& ready, Check&& check,
                Sleep&& sleep, Expired&& expired) {
  using clock = std::chrono::steady_clock;
  auto as_look = [&] {
    if constexpr (std::is_same_v<decltype(ready()), bool>) return ready() ? look::done : look::idle;
    else return ready();
  };
  int looks = 0;
  const auto start = clock::now();
  auto last = start, deadline = start + w.timeout;
  bool waited = false;  // a look found nothing yet: the wait counts (wait_context::waited_ns)
  for (;;) {
    const look l = as_look();
    if (l == look::done) {
      if (waited && w.waited_ns) [[unlikely]] {
        const int who = s.counted_for != -2 ? s.counted_for : s.peer;
        std::atomic<std::int64_t>& a = w.waited_ns[who < 0 ? 0 : who + 1];
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count();
        a.store(a.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
      }
      return;
    }
    waited = true;
    if (l == look::moved) {
      last = clock::now();
      looks = 0;
      continue;
    }
    if (++looks <= p.spins) {
      detail::cpu_relax();
      continue;
    }
    const auto now = clock::now();
    if (now - last < p.spin_for) {
      detail::cpu_relax();
      continue;
    }
    const bool yielding = now - last < p.spin_for + p.yield_for;
    if (yielding && (p.check_every <= 0 || looks % p.check_every != 0)) {
      std::this_thread::yield();
      continue;
    }
    check_aborted(w, s);
    check(now - start);
    if (now >= deadline) deadline = expired(now);
    if (yielding) {
      std::this_thread::yield();
      continue;
    }
    sleep(std::min(deadline, now + (w.aborted ? std::chrono::milliseconds(abort_poll) : p.slice)));
  }
}

}  // namespace tutti::toolkit

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/toolkit/wait.ipp"
#endif
