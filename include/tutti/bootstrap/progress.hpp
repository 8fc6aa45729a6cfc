/// \file
/// Start-up progress: a wait of start-up that lasts says what it waits for on stderr, one line
/// at a time, first after `first_word(timeout)` and then each time the wait has doubled (with the
/// default 300 s deadline: at 3 s, 6 s, 12 s, 24 s, ... 192 s; with TUTTI_TIMEOUT=4: at 1 s and
/// 2 s), never at or past the deadline, where the error says it instead. A start-up that
/// completes within the first interval says nothing, as a healthy job's always does.
///
/// Who speaks: whoever can say it for all. Over tcp rank 0's store names the ranks that have
/// signed in and those that have not (`store_server`); a rank that cannot reach the store says so
/// itself (`store`), since the store cannot know of it. Over shm rank 0 names the ranks that have
/// joined and those that have not; a rank that cannot reach rank 0 says so itself.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tutti/detail/attributes.hpp"

namespace tutti::detail {

/// When a start-up wait speaks: see the file comment.
class startup_progress {
 public:
  using clock = std::chrono::steady_clock;

  /// The first interval: a quarter of the deadline, at least 1 s and at most 3 s. 3 s: a healthy
  /// start-up, every rank started at once, is over well within it even on a loaded machine, so
  /// it never speaks, and a stuck one is heard while there is still time to look. A quarter: a
  /// short deadline (a test's TUTTI_TIMEOUT=4) still hears twice before it ends. At least 1 s:
  /// jobs with short deadlines (TUTTI_TIMEOUT=2 or 3, as tests and fault drills use) whose
  /// ranks start slowly under load are not worth a word in their first second either.
  TUTTI_DECL static std::chrono::milliseconds first_word(std::chrono::milliseconds timeout) noexcept;

  /// A wait that started at `start` and ends at `start + timeout`.
  TUTTI_DECL explicit startup_progress(std::chrono::milliseconds timeout, clock::time_point start = clock::now());

  /// True when a word is due at `now`, at most once an interval: the next one is then due when
  /// the wait has doubled (intervals that passed unseen are skipped, not made up for).
  TUTTI_DECL bool due(clock::time_point now = clock::now());

  /// When the next word is due (a poll waits no longer than that); `clock::time_point::max()`
  /// when none is, because the deadline comes first.
  clock::time_point next() const noexcept { return next_ < deadline_ ? next_ : clock::time_point::max(); }
  clock::time_point start() const noexcept { return start_; }
  clock::time_point deadline() const noexcept { return deadline_; }

 private:
  clock::time_point start_, deadline_, next_;
};

/// "rank 2", "ranks 2, 3", "ranks 0-5, 9" (runs of three or more as a range); without the
/// word: "2, 3". `ranks` ascending.
TUTTI_DECL std::string rank_list(const std::vector<int>& ranks, bool with_word = true);

/// A duration as people say it: "1 s", "2.5 s", "300 s" (rounded to a tenth of a second).
TUTTI_DECL std::string seconds_said(std::chrono::milliseconds d);

/// How long from `from` to `to`, in whole milliseconds (0 when `to` is past).
inline std::chrono::milliseconds until(startup_progress::clock::time_point from,
                                       startup_progress::clock::time_point to) {
  return to > from ? std::chrono::duration_cast<std::chrono::milliseconds>(to - from) : std::chrono::milliseconds(0);
}

}  // namespace tutti::detail

#if defined(TUTTI_DEFINITIONS)
#include "tutti/bootstrap/progress.ipp"
#endif
