// The conformance suite's options and verdict as tutti's own tests use them.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <tutti/testing/conformance.hpp>

#include "collective_checks.hpp"  // fewer_types in the sanitizer builds

namespace tutti::test {

inline testing::options suite_options() {
  testing::options o;
  o.every_type = !fewer_types;
#ifdef TUTTI_TEST_FEWER_TYPES
  o.abort_within = std::chrono::milliseconds(200);  // instrumented builds run several times slower
#endif
  return o;
}

/// Prints the report's count and notes, and fails the test case with its findings. Only where
/// `judge`: a process runner's rank 0 holds every rank's findings.
inline void verdict(const testing::report& rep, bool judge = true) {
  if (!judge) return;
  std::printf("conformance: %zu checks, %zu failed\n", rep.checks(), rep.findings().size());
  for (const auto& n : rep.notes()) std::printf("conformance note: %s\n", n.c_str());
  CHECK_MESSAGE(rep.ok(), rep.text());
  CHECK(rep.checks() > 0);
}

}  // namespace tutti::test
