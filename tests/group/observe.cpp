// Hooks (on_start, on_end, on_error) and counters (stats) over inproc threads; the process
// flavours run the same body (support/observe_checks.hpp) in tests/multiproc.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "../support/observe_checks.hpp"
#include "../support/outcomes.hpp"
#include "../support/ranks.hpp"

TEST_SUITE_BEGIN("multirank");

using namespace tutti;

TEST_CASE("observe: hooks see every operation and stats count calls and bytes and waits per peer") {
  for (int p : {1, 2, 3, 5}) test::run_ranks(p, [](auto& comm) { test::check_observe(comm); });
}

TEST_CASE("observe: on_error gets the failure and a throwing hook is ignored and groups inherit hooks") {
  for (int p : {2, 3}) {
    test::run_ranks(p, [](auto& comm) {
      std::vector<std::string> errors, ended;
      comm.on_error([&](const op_event& e) {
        REQUIRE(e.error != nullptr);
        errors.push_back(std::string(e.name) + ": " + e.error->what());
      });
      comm.on_start([](const op_event&) { throw std::runtime_error("a broken profiler"); });
      comm.on_end([&](const op_event& e) { ended.push_back(std::string(e.name)); });
      std::vector<int> v(8, 1);
      comm.all_reduce(view(v));  // the hook's exception does not stop the call
      CHECK(v[0] == comm.size());
      CHECK(ended == std::vector<std::string>{"all_reduce"});

      auto g = comm.split(comm.rank() % 2, comm.rank());  // a group made now starts with the hooks
      REQUIRE(g.has_value());
      g->barrier();
      CHECK(ended.back() == "barrier");
      CHECK(g->stats().find("barrier") != nullptr);

      // A count mismatch: every rank's call fails, and on_error says why.
      std::vector<int> w(comm.rank() == 0 ? 4 : 5, 1);
      CHECK_THROWS_AS(comm.all_reduce(view(w)), mismatch_error);
      REQUIRE(errors.size() == 1);
      CHECK(errors[0].find("all_reduce") == 0);
      CHECK(errors[0].find("count") != std::string::npos);
      CHECK(comm.stats().find("all_reduce")->calls == 2);
    });
  }
}

