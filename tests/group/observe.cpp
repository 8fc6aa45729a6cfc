// Hooks (on_start, on_end, on_error) and counters (stats) over inproc threads; the process
// flavours run the same body (support/observe_checks.hpp) in tests/multiproc.
#include <doctest/doctest.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
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


TEST_SUITE_END();

TEST_SUITE_BEGIN("unit");

// The recorder's clock (`detail::realtime_ns`) reads CLOCK_REALTIME through the time-stamp
// counter once it has measured its rate: each reading lies between two readings of
// CLOCK_REALTIME taken around it, give or take the conversion's error (well under a
// millisecond), from the process's first reading, through the first measurement at 10 ms and
// the renewals every 100 ms, in several threads at once.
TEST_CASE("observe: the recorder's clock reads CLOCK_REALTIME through its calibration and renewals") {
  const auto real = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  };
  constexpr std::int64_t slack = 1'000'000;
  std::vector<std::thread> threads;
  std::atomic<int> outside{0};
  std::atomic<std::int64_t> worst{0};
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(350);
      std::int64_t last = 0;
      while (std::chrono::steady_clock::now() < end) {
        for (int i = 0; i < 1000; ++i) {
          const std::int64_t a = real(), b = detail::realtime_ns(), c = real();
          const std::int64_t off = b < a ? a - b : b > c ? b - c : 0;
          if (off > slack) outside.fetch_add(1);
          if (off > worst.load()) worst.store(off);
          if (b + slack < last) outside.fetch_add(1);  // (not back by more than the slack)
          last = b;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  for (auto& t : threads) t.join();
  INFO("largest distance from CLOCK_REALTIME: " << worst.load() << " ns");
  CHECK(outside.load() == 0);
}

TEST_SUITE_END();
