// Helpers for tests of failing multi-rank runs: what each rank raised and the rank numbers in
// error messages (from the installed conformance suite, tutti/testing/outcomes.hpp), and a run
// with a watchdog (a hang fails the test with a message instead of stalling the suite).
#pragma once

#include <doctest/doctest.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <set>
#include <string>
#include <tutti/testing/outcomes.hpp>
#include <tutti/tutti.hpp>

#include "ranks.hpp"
#include "sanitizers.hpp"

namespace tutti::test {

using testing::classify;
using testing::contains;
using testing::kind;
using testing::kind_name;
using testing::ranks_named;

inline void rethrow_if(const std::exception_ptr& e) {
  if (e) std::rethrow_exception(e);
}

/// How much slower than a release build this build runs a multi-rank test: ThreadSanitizer's
/// instrumented -O0 code runs the larger tests 10x slower (the 6-rank hierarchy test with its large
/// counts takes 30 s alone, 60 s beside another test on two cores), AddressSanitizer's about 3x.
inline constexpr int slowdown = thread_sanitizer ? 5 : address_sanitizer ? 2 : 1;

/// Runs `body` on n ranks (run_ranks) on a helper thread and returns what the run threw (null if
/// nothing). A run that has not finished after `limit` (times `slowdown` in a sanitizer build)
/// is a hang: the test fails with `what` and the process ends at once (the blocked threads
/// cannot be joined).
template <class Algorithm = algo::automatic, class Body>
std::exception_ptr run_watched(int n, Body& body, const std::string& what,
                               std::chrono::seconds limit = std::chrono::seconds(60)) {
  limit *= slowdown;
  try {
    testing::watched(limit, [&] { run_ranks<Algorithm>(n, body); }, [&] {
      FAIL_CHECK("HANG: " << what << " -- the run on " << n << " ranks was still blocked after " << limit.count()
                          << " s; ending the test process");
      std::cout.flush();
      std::cerr.flush();
    });
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

/// Runs `body` on n ranks and fails the test (instead of hanging the suite) if it throws or
/// does not finish.
template <class Body>
void run_ok(int n, Body body, const std::string& what) {
  const auto err = run_watched(n, body, what);
  CHECK_NOTHROW(rethrow_if(err));
}

}  // namespace tutti::test
