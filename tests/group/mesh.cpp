// Meshes over inproc threads: every 2-D shape of 1..8 ranks and 2 x 2 x 2 with every collective
// on every axis (the same checks as tests/multiproc/mesh.cpp over processes), an axis with an
// algorithm of its own, and the errors: shapes that differ between ranks, a product that is not
// the size, an empty axis, a coordinate outside the mesh. Misspelt and repeated axis names are
// compile errors (tests/compile_fail/mesh_*.cpp).
#include <doctest/doctest.h>

#include <string>
#include <type_traits>
#include <vector>

#include <tutti/testing/ordered.hpp>

#include "../support/mesh_checks.hpp"
#include "../support/outcomes.hpp"

TEST_SUITE_BEGIN("multirank");

using namespace tutti;
using namespace std::chrono_literals;
using tutti::test::classify;
using tutti::test::contains;
using tutti::test::kind;
using tutti::test::kind_name;
using tutti::test::rethrow_if;
using tutti::test::run_ok;

namespace {

/// Runs `body` on p ranks, each of which must raise an error of kind `want` whose text holds
/// every string of `needles`; then the communicator must still work (the mesh failed before
/// it used it for anything but agreeing).
template <class Body>
void expect_everywhere(int p, kind want, const std::vector<std::string>& needles, Body body) {
  std::vector<kind> got(static_cast<std::size_t>(p), kind::none);
  std::vector<std::string> what(static_cast<std::size_t>(p));
  std::vector<int> after(static_cast<std::size_t>(p), -1);
  auto run = [&](auto& comm) {
    comm.set_timeout(20s);
    const auto me = static_cast<std::size_t>(comm.rank());
    try {
      body(comm);
    } catch (...) {
      got[me] = classify(std::current_exception(), what[me]);
    }
    std::vector<int> v{1};
    comm.all_reduce(view(v));
    after[me] = v[0];
  };
  const auto err = tutti::test::run_watched(p, run, "mesh errors");
  CHECK_NOTHROW(rethrow_if(err));
  for (int r = 0; r < p; ++r) {
    const auto i = static_cast<std::size_t>(r);
    CAPTURE(r);
    CHECK_MESSAGE(got[i] == want, kind_name(got[i]) << ": " << what[i]);
    for (const auto& n : needles) CHECK_MESSAGE(contains(what[i], n), "'" << n << "' in: " << what[i]);
    CHECK_MESSAGE(after[i] == p, "the communicator works after the error");
  }
}
}  // namespace

TEST_CASE("mesh: every collective on every axis of every shape of 1..8 ranks matches the reference") {
  for (int p : {1, 2, 3, 4, 5, 6, 8}) {
    CAPTURE(p);
    run_ok(p, [](auto& comm) {
      testing::report rep;
      tutti::test::check_meshes(comm, rep);
      CHECK_MESSAGE(rep.ok(), rep.text());
      CHECK(rep.checks() > 0);
    }, "meshes on " + std::to_string(p) + " ranks");
  }
}

TEST_CASE("mesh: an axis runs the algorithm it names and the others the communicator's") {
  run_ok(6, [](auto& comm) {
    using C = std::remove_reference_t<decltype(comm)>;
    auto m = tutti::mesh<axis<"dp", algo::ring>, axis<"tp">>(comm, {3, 2});
    using M = decltype(m);
    static_assert(std::is_same_v<typename M::template axis_communicator<"dp">, communicator<inproc, algo::ring>>);
    static_assert(std::is_same_v<typename M::template axis_communicator<"tp">, C>);
    testing::report rep;
    tutti::test::check_every_collective(m.template axis<"dp">(), rep);
    CHECK_MESSAGE(rep.ok(), rep.text());
    CHECK(m.template axis<"dp">().explain(collective::all_reduce, 4096).find("ring") != std::string::npos);
    // The same as the ring over a plain split of the same ranks.
    std::vector<int> v{comm.rank()};
    m.template axis<"dp">().all_reduce(view(v));
    const int tp = m.template coordinate<"tp">();
    CHECK(v[0] == tp + (2 + tp) + (4 + tp));
  }, "mesh with a ring axis");
}

TEST_CASE("mesh: op::ordered on an axis is the serial fold in the axis's order") {
  // Each axis is a flat communicator whose rank is the coordinate: a rank-ordered op folds in
  // coordinate order there, with the axis's own algorithm (ring) and with the communicator's.
  run_ok(6, [](auto& comm) {
    auto m = tutti::mesh<axis<"dp", algo::ring>, axis<"tp">>(comm, {3, 2});
    const int dp = m.template coordinate<"dp">(), tp = m.template coordinate<"tp">();
    namespace od = testing::ordered_detail;
    for (std::size_t n : {std::size_t{5}, std::size_t{30000}}) {
      const std::uint64_t salt = 17 + static_cast<std::uint64_t>(tp);
      std::vector<float> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = od::serial<float>(0, 3, i, salt, op::sum{});
      auto v = od::values<float>(dp, n, salt);
      m.template axis<"dp">().all_reduce(view(v), op::ordered_sum{});
      CHECK_MESSAGE(od::same_bits(v.data(), want.data(), n), od::difference(v.data(), want.data(), n));
      const std::uint64_t salt_tp = 200 + static_cast<std::uint64_t>(dp);  // the same on the tp axis
      auto w = od::values<float>(tp, n, salt_tp);
      std::vector<float> want_tp(n);
      for (std::size_t i = 0; i < n; ++i) want_tp[i] = od::serial<float>(0, 2, i, salt_tp, op::sum{});
      m.template axis<"tp">().all_reduce(view(w), op::ordered_sum{});
      CHECK_MESSAGE(od::same_bits(w.data(), want_tp.data(), n), od::difference(w.data(), want_tp.data(), n));
    }
  }, "ordered sums on mesh axes");
}

TEST_CASE("mesh: ranks that pass different shapes all raise mismatch_error naming both shapes") {
  expect_everywhere(4, kind::mismatch, {"mesh (dp x tp)", "rank 0 passed shape {2, 2}", "passed {4, 1}"}, [](auto& comm) {
    const std::array<int, 2> shape = comm.rank() == 0 ? std::array<int, 2>{2, 2} : std::array<int, 2>{4, 1};
    (void)tutti::mesh<axis<"dp">, axis<"tp">>(comm, shape);
  });
  // Only the last rank differs: the message names it.
  expect_everywhere(3, kind::mismatch, {"rank 2 passed {1, 3}"}, [](auto& comm) {
    const std::array<int, 2> shape = comm.rank() == 2 ? std::array<int, 2>{1, 3} : std::array<int, 2>{3, 1};
    (void)tutti::mesh<axis<"dp">, axis<"tp">>(comm, shape);
  });
}

TEST_CASE("mesh: a shape whose product is not the size, or with an empty axis, is a usage_error on every rank") {
  expect_everywhere(4, kind::usage, {"shape {2, 3} holds 6 ranks, but the communicator has 4"}, [](auto& comm) {
    (void)tutti::mesh<axis<"dp">, axis<"tp">>(comm, {2, 3});
  });
  expect_everywhere(3, kind::usage, {"axis \"tp\" 0 ranks"}, [](auto& comm) {
    (void)tutti::mesh<axis<"dp">, axis<"tp">>(comm, {3, 0});
  });
  expect_everywhere(2, kind::usage, {"axis \"pp\" -1 ranks"}, [](auto& comm) {
    (void)tutti::mesh<axis<"pp">, axis<"dp">, axis<"tp">>(comm, {-1, -1, 2});
  });
}

TEST_CASE("mesh: rank_of a coordinate outside the mesh is a usage_error naming the axis") {
  run_ok(4, [](auto& comm) {
    auto m = tutti::mesh<axis<"dp">, axis<"tp">>(comm, {2, 2});
    CHECK(m.rank_of({1, 0}) == 2);
    try {
      (void)m.rank_of({0, 2});
      FAIL_CHECK("rank_of accepted tp = 2 on a 2 x 2 mesh");
    } catch (const usage_error& e) {
      CHECK_MESSAGE(contains(e.what(), "coordinate 2 on axis \"tp\" is outside 0..1"), e.what());
    }
  }, "rank_of outside the mesh");
}

TEST_SUITE_END();
