// The installed conformance suite (tutti/testing/conformance.hpp) over inproc, ranks as threads:
// results at world sizes 1..9 with every algorithm, every mismatch case and the failure cases at
// 2, 3 and 5 ranks; the non-blocking operations at 1..5; point-to-point matching at 2..5.
#include <doctest/doctest.h>

#include <initializer_list>
#include <tutti/testing/conformance.hpp>
#include <tutti/tutti.hpp>

#include "../support/conformance.hpp"

using namespace tutti;
using tutti::test::suite_options;

namespace {
/// Runs one part of the suite at each world size, ranks as inproc threads.
template <class Part>
void at_sizes(std::initializer_list<int> sizes, Part part) {
  for (int n : sizes) {
    CAPTURE(n);
    testing::report rep;
    auto run = testing::make_thread_runner<inproc>(n, [](int ranks, auto&& body) { inproc::run(ranks, body); });
    part(n, run, rep);
    tutti::test::verdict(rep);
  }
}
using algorithms = testing::every_algorithm;
}  // namespace

TEST_SUITE_BEGIN("multirank");

/// Every collective against the reference at each of `sizes`.
void check_results_at(std::initializer_list<int> sizes) {
  at_sizes(sizes, [](int n, auto& run, auto& rep) {
    auto o = suite_options();
    // The instrumented builds run the 16 MiB v-collectives at an even and an odd size, not all
    // nine: the schedules' paths are the same at every size, and under ThreadSanitizer each size
    // costs about 25 s.
    if (tutti::test::fewer_types) o.large = n == 4 || n == 5;
    testing::check_results<algorithms>(run, rep, o);
  });
}

// World sizes 1..9 as two cases of about equal time, which ctest runs side by side (under
// ThreadSanitizer the nine sizes in one case took 170 s, the stage's whole wall time).
TEST_CASE("conformance over inproc: every collective and v-collective at world sizes 1..6") {
  check_results_at({1, 2, 3, 4, 5, 6});
}

TEST_CASE("conformance over inproc: every collective and v-collective at world sizes 7..9") {
  check_results_at({7, 8, 9});
}

TEST_CASE("conformance over inproc: every way ranks can disagree at 2, 3 and 5 ranks") {
  at_sizes({2, 3, 5}, [](int, auto& run, auto& rep) { testing::check_all_mismatches<algorithms>(run, rep); });
}

TEST_CASE("conformance over inproc: a silent peer, a lost peer and abort at 2, 3 and 5 ranks") {
  at_sizes({2, 3, 5}, [](int, auto& run, auto& rep) { testing::check_failures(run, rep, suite_options()); });
}

TEST_CASE("conformance over inproc: non-blocking operations at world sizes 1..5") {
  at_sizes({1, 2, 3, 4, 5}, [](int, auto& run, auto& rep) { testing::check_nonblocking(run, rep); });
}

TEST_CASE("conformance over inproc: point-to-point matching at 2 to 5 ranks") {
  at_sizes({2, 3, 4, 5}, [](int, auto& run, auto& rep) {
    testing::check_point_to_point(run, rep, suite_options().silent_deadline);
  });
}

TEST_CASE("conformance over inproc: reproducible reductions at world sizes 1..7") {
  // The instrumented builds leave out the 1 and 16 MiB all_reduces (the paths are the same
  // at 20000 elements).
  at_sizes({1, 2, 3, 4, 5, 6, 7}, [](int, auto& run, auto& rep) {
    auto o = suite_options();
    o.large = !tutti::test::fewer_types;
    testing::check_reproducible<algorithms>(run, rep, o);
  });
}

TEST_SUITE_END();
