// The result checks of the installed conformance suite (tutti/testing/collectives.hpp) as doctest
// assertions: each call's findings become one failed CHECK with the suite's text.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <tutti/testing/collectives.hpp>
#include <tutti/testing/report.hpp>
#include <vector>

#include "ranks.hpp"

namespace tutti::test {

using testing::has;

template <class T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  testing::report rep;
  testing::expect_equal(rep, -1, got, want, what);
  CHECK_MESSAGE(rep.ok(), rep.text());
}

/// Every collective algorithm A offers on the communicator's transport, element type T, op `op`.
template <class A, class T, class Op, class Comm>
void check_collectives(Comm& comm, std::size_t count, const Op& op, const A& a = {}) {
  testing::report rep;
  testing::check_collectives<A, T>(comm, rep, count, op, a);
  CHECK_MESSAGE(rep.ok(), rep.text());
}

#ifdef TUTTI_TEST_FEWER_TYPES
inline constexpr bool fewer_types = true;
#else
inline constexpr bool fewer_types = false;
#endif

/// Every collective and v-collective with A at counts 0, 1, size-1 and one not divisible by the
/// size. The sanitizer builds (TUTTI_SANITIZE defines TUTTI_TEST_FEWER_TYPES) keep four type/op
/// pairs of nine: the memory and thread errors they look for live in the schedules, which do not
/// depend on the type, and the other instantiations per algorithm cost those builds minutes.
template <class A, class Comm>
void check_every_type(Comm& comm) {
  testing::report rep;
  testing::check_every_type<A>(comm, rep, !fewer_types);
  CHECK_MESSAGE(rep.ok(), rep.text());
}

}  // namespace tutti::test
