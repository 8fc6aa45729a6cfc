// Test fixtures: run one test body on N ranks; the values and the user type of the installed
// conformance suite (tutti/testing/collectives.hpp), with doctest's printer for the type.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <tutti/testing/collectives.hpp>
#include <tutti/tutti.hpp>
#include <vector>

namespace tutti::testing {
inline doctest::String toString(const vec3& v) { return show(v).c_str(); }
}  // namespace tutti::testing

namespace tutti::test {

using testing::value;
using testing::vec3;
using testing::vec3_max_abs;

/// Runs `body(comm)` on n threads over inproc (the thread flavour of a multi-rank test). The
/// process flavour over shm reuses the same bodies (tests/multiproc).
template <class Algorithm = algo::automatic, class Body>
void run_ranks(int n, Body&& body) {
  inproc::run<Algorithm>(n, std::forward<Body>(body));
}

}  // namespace tutti::test
