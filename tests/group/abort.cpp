// communicator::abort() and the flight recorder, over inproc threads. The process flavour (shm
// and tcp, with SIGUSR1 and recovery after a lost rank) is tests/multiproc/abort_recover.cpp.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "../support/outcomes.hpp"
#include "../support/ranks.hpp"

TEST_SUITE_BEGIN("multirank");

using namespace tutti;
using namespace std::chrono_literals;
using tutti::test::classify;
using tutti::test::contains;
using tutti::test::kind;
using tutti::test::kind_name;

namespace {
struct seen {
  kind k = kind::none;
  std::string what;
  std::chrono::milliseconds took{};
};
}  // namespace

TEST_CASE("abort: a call blocked on another thread returns with errc::aborted, and the peers see peer_lost naming the rank") {
  for (int p : {2, 3, 5})
    for (int aborter : {0, p - 1}) {
      std::vector<seen> out(static_cast<std::size_t>(p));
      auto body = [&](auto& comm) {
        comm.set_timeout(100s);  // far beyond the test's 60 s watchdog: only abort can release the ranks
        std::vector<float> v(64, 1.0f);
        comm.all_reduce(view(v));
        std::thread killer;
        if (comm.rank() == aborter)
          killer = std::thread([&comm] {
            std::this_thread::sleep_for(100ms);
            comm.abort();
          });
        auto& me = out[static_cast<std::size_t>(comm.rank())];
        const auto t0 = std::chrono::steady_clock::now();
        try {
          // The aborter waits for a peer that comes 2 s late; the others wait for the aborter.
          if (comm.rank() == (aborter + 1) % p) std::this_thread::sleep_for(2s);
          comm.all_reduce(view(v));
          comm.barrier();  // a peer may finish the call the aborter left; the next one fails
        } catch (...) {
          me.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
          me.k = classify(std::current_exception(), me.what);
          if (killer.joinable()) killer.join();
          // Terminal: every later call raises errc::aborted at once.
          try {
            comm.barrier();
            FAIL("a call after the failure went through");
          } catch (const tutti::error& e) {
            CHECK(e.code() == errc::aborted);
          }
          throw;  // as a program would: the ranks waiting on this one learn why
        }
        if (killer.joinable()) killer.join();
      };
      CAPTURE(p);
      CAPTURE(aborter);
      const auto err = tutti::test::run_watched(p, body, "abort releasing a blocked call");
      CHECK(err);
      for (int r = 0; r < p; ++r) {
        const auto& o = out[static_cast<std::size_t>(r)];
        CAPTURE(r);
        CAPTURE(o.what);
        if (r == aborter) {
          CHECK_MESSAGE(o.k == kind::aborted, kind_name(o.k));
          CHECK(contains(o.what, "aborted"));
          CHECK(contains(o.what, "rank " + std::to_string(r)));
        } else {
          CHECK_MESSAGE(o.k == kind::peer_lost, kind_name(o.k));
          CHECK(contains(o.what, "rank " + std::to_string(aborter)));
        }
        // Released long before the 100 s deadline (the watchdog would report a hang at 60 s).
        CHECK(o.took < 50s);
      }
    }
}

TEST_CASE("abort: before any call, and on the whole family of groups") {
  for (int p : {2, 3}) {
    std::vector<seen> out(static_cast<std::size_t>(p));
    auto body = [&](auto& comm) {
      comm.set_timeout(20s);
      auto group = comm.new_group({0, 1});
      std::vector<int> v(8, comm.rank());
      comm.all_reduce(view(v));
      CHECK_FALSE(comm.aborted());
      comm.barrier();
      if (comm.rank() == 0) {
        comm.abort();
        CHECK(comm.aborted());
        REQUIRE(group);
        CHECK(group->aborted());  // it shares the world's links, so it shares the abort
      }
      auto& me = out[static_cast<std::size_t>(comm.rank())];
      try {
        if (group) group->all_reduce(view(v));
        else comm.all_reduce(view(v));
      } catch (...) {
        me.k = classify(std::current_exception(), me.what);
      }
    };
    CAPTURE(p);
    const auto err = tutti::test::run_watched(p, body, "abort before the call");
    CHECK_FALSE(err);
    CHECK_MESSAGE(out[0].k == kind::aborted, kind_name(out[0].k) << ": " << out[0].what);
    CHECK_MESSAGE(out[1].k == kind::peer_lost, kind_name(out[1].k) << ": " << out[1].what);
    CHECK(contains(out[1].what, "rank 0"));
    if (p == 3) {
      CHECK_MESSAGE(out[2].k == kind::peer_lost, kind_name(out[2].k) << ": " << out[2].what);
    }
  }
}

TEST_CASE("flight recorder: the last operations with fingerprints and outcomes, a failure marked") {
  std::vector<std::string> record(3);
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    std::vector<double> v(10, 1.0);
    for (int i = 0; i < 70; ++i) comm.all_reduce(view(v), op::max{});
    comm.broadcast(view(v), 2);
    // A ring of sends: every rank sends once and receives once.
    const int next = (comm.rank() + 1) % 3, prev = (comm.rank() + 2) % 3;
    if (comm.rank() % 2 == 0) {
      comm.send(view(v).subview(0, 3), next, 5);
      comm.recv(view(v).subview(0, 3), prev, 5);
    } else {
      comm.recv(view(v).subview(0, 3), prev, 5);
      comm.send(view(v).subview(0, 3), next, 5);
    }
    // Rank 2 passes another count: a mismatch, marked FAILED in the record.
    std::vector<double> w(comm.rank() == 2 ? 12 : 11, 0.0);
    try {
      comm.all_reduce(view(w));
    } catch (const tutti::error&) {
    }
    record[static_cast<std::size_t>(comm.rank())] = comm.flight_record(5);
  };
  const auto err = tutti::test::run_watched(3, body, "flight recorder");
  CHECK_FALSE(err);
  for (int r = 0; r < 3; ++r) {
    const auto& t = record[static_cast<std::size_t>(r)];
    CAPTURE(r);
    CAPTURE(t);
    CHECK(contains(t, "flight recorder"));
    CHECK(contains(t, "rank " + std::to_string(r) + " of 3"));
    CHECK(contains(t, "last 5 of 74 operations"));  // 70 + broadcast + send + recv + the failed call
    CHECK(contains(t, "broadcast("));
    CHECK(contains(t, "#70 count=10 dtype=float64 root=2"));
    CHECK(contains(t, "send/recv(p2p) count=3 dtype=float64 tag=5"));
    CHECK(contains(t, "#71 count="));
    CHECK(contains(t, "FAILED after"));
    CHECK(contains(t, "done in"));
    CHECK_FALSE(contains(t, "#68 "));  // only the last 5
  }
}

TEST_CASE("flight recorder: posted operations that wait to start are counted") {
  std::string record, after;
  std::atomic<bool> recorded{false};
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    std::vector<int> v(4, comm.rank()), a(8, 1), b(8, 2), c(8, 3);
    if (comm.rank() == 0) {
      // The first all_reduce holds the engine until rank 1 joins it, which it does once the
      // record is read.
      auto r0 = comm.iall_reduce(view(v));
      auto r1 = comm.iall_reduce(view(a));
      auto r2 = comm.iall_reduce(view(b));
      auto r3 = comm.iall_reduce(view(c));
      while (comm.flight_record().find("running") == std::string::npos) std::this_thread::sleep_for(1ms);
      record = comm.flight_record();
      recorded = true;
      wait_all(r0, r1, r2, r3);
      after = comm.flight_record();
    } else {
      while (!recorded) std::this_thread::sleep_for(1ms);
      for (auto* x : {&v, &a, &b, &c}) comm.all_reduce(view(*x));
    }
  };
  const auto err = tutti::test::run_watched(2, body, "flight recorder, posted");
  CHECK_FALSE(err);
  CAPTURE(record);
  CHECK(contains(record, "count=4 dtype=int32"));
  CHECK(contains(record, "still running after"));
  CHECK(contains(record, "and 3 posted operations waiting to start"));
  CAPTURE(after);
  CHECK_FALSE(contains(after, "waiting to start"));
}
