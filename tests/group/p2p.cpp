// Point-to-point with matching of its own (`matched_p2p`: inproc and mpi today), beyond the installed
// conformance part (tutti/testing/p2p.hpp, run over inproc by tests/conformance/inproc.cpp: the
// ring, 64 outstanding in random order, any_source and any_tag, shorter and longer messages,
// another dtype, a silent peer): a manager and workers, progress beside posted collectives,
// groups, a rendezvous send failing with its receive, lost peers, abort and usage errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
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

static_assert(matched_p2p<inproc>);

namespace {

/// What a rank's failing call raised.
struct seen {
  kind k = kind::none;
  std::string what;
};

template <class F>
seen outcome_of(F&& f) {
  seen s;
  try {
    f();
  } catch (...) {
    s.k = classify(std::current_exception(), s.what);
  }
  return s;
}

constexpr std::size_t rendezvous_floats = inproc::eager_bytes / sizeof(float) + 1000;

}  // namespace

TEST_CASE("p2p: a manager serves any_source requests until every worker is done") {
  for (int n : {3, 4}) {
    CAPTURE(n);
    auto body = [&](auto& comm) {
      comm.set_timeout(20s);
      constexpr int request_tag = 1, reply_tag = 2, done_tag = 3;
      if (comm.rank() == 0) {
        int working = comm.size() - 1, served = 0;
        std::vector<int> q(1);
        while (working > 0) {
          const recv_status st = comm.recv(view(q), any_source, any_tag);
          if (st.tag == done_tag) {
            --working;
            continue;
          }
          CHECK(st.tag == request_tag);
          std::vector<int> answer(1, q[0] * q[0]);
          comm.send(view(answer), st.source, reply_tag);
          ++served;
        }
        CHECK(served == (comm.size() - 1) * 10);
      } else {
        for (int i = 0; i < 10; ++i) {
          std::vector<int> q(1, comm.rank() * 100 + i), a(1);
          comm.send(view(q), 0, request_tag);
          comm.recv(view(a), 0, reply_tag);
          CHECK(a[0] == q[0] * q[0]);
        }
        std::vector<int> bye(1);
        comm.send(view(bye), 0, done_tag);
      }
    };
    tutti::test::run_ok(n, body, "p2p manager/worker");
  }
}

TEST_CASE("p2p: point-to-point progresses beside posted collectives and they beside it") {
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    const int r = comm.rank(), n = comm.size();
    std::vector<double> g(1000, 1.0);
    std::vector<float> out(rendezvous_floats, static_cast<float>(r)), in(rendezvous_floats);
    // Rank 0 posts an all_reduce, then receives (blocking) a rendezvous-sized message that rank 1
    // sends before it joins the all_reduce: the receive must not wait for the all_reduce.
    auto ar = comm.iall_reduce(view(g));
    if (r == 0) {
      const recv_status st = comm.recv(view(in), 1, 3);
      CHECK(st.count == rendezvous_floats);
      CHECK(in[5] == 1.0f);
    } else if (r == 1) {
      comm.send(view(out), 0, 3);
    }
    ar.wait();
    CHECK(g[0] == static_cast<double>(n));
  };
  tutti::test::run_ok(3, body, "p2p beside collectives");
}

TEST_CASE("p2p: on a group the messages stay in the group") {
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    auto gp = comm.split(comm.rank() % 2, comm.rank());
    REQUIRE(gp);
    auto& g = *gp;
    std::vector<int> w(1, 1000 + comm.rank()), gw(1, g.rank()), a(1, -1), b(1, -1);
    // Each rank sends on the world and on its group to the same tag; each receive sees its own.
    if (g.size() >= 2) {
      const int gpeer = (g.rank() + 1) % g.size(), gfrom = (g.rank() + g.size() - 1) % g.size();
      auto s1 = g.isend(view(gw), gpeer, 4);
      auto s2 = comm.isend(view(w), (comm.rank() + 1) % comm.size(), 4);
      const recv_status wst = comm.recv(view(a), any_source, 4);
      const recv_status gst = g.recv(view(b), any_source, 4);
      wait_all(s1, s2);
      CHECK(wst.source == (comm.rank() + comm.size() - 1) % comm.size());
      CHECK(a[0] == 1000 + wst.source);
      CHECK(gst.source == gfrom);
      CHECK(b[0] == gfrom);
    }
    comm.barrier();
  };
  tutti::test::run_ok(5, body, "p2p groups");
}

TEST_CASE("p2p: a rendezvous send whose receive takes another dtype fails on both ranks") {
  std::vector<seen> out(2);
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    if (comm.rank() == 0) {
      std::vector<float> v(rendezvous_floats, 1.0f);
      out[0] = outcome_of([&] { comm.send(view(v), 1); });
    } else {
      std::vector<double> v(rendezvous_floats);
      out[1] = outcome_of([&] { comm.recv(view(v), 0); });
    }
  };
  const auto err = tutti::test::run_watched(2, body, "p2p rendezvous dtype");
  CHECK_FALSE(err);
  for (const seen& s : out) {
    CHECK_MESSAGE(s.k == kind::mismatch, kind_name(s.k) << ": " << s.what);
    CHECK(contains(s.what, "dtype=float"));
    CHECK(contains(s.what, "dtype=float64"));
  }
}

TEST_CASE("p2p: a peer that returns or fails fails the receives waiting for it") {
  std::vector<seen> out(4);
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    std::vector<int> v(2);
    if (comm.rank() == 1) return;  // leaves without sending
    if (comm.rank() == 2) throw std::runtime_error("rank 2 gave up");
    if (comm.rank() == 3) {
      std::vector<int> w(2, 3);
      comm.send(view(w), 0, 1);  // eager: delivered even after rank 3 returns
      return;
    }
    auto from1 = comm.irecv(view(v), 1);
    auto from2 = comm.irecv(view(v), 2);
    out[0] = outcome_of([&] { from1.wait(); });
    out[1] = outcome_of([&] { from2.wait(); });
    std::vector<int> w(2);
    out[2].k = comm.recv(view(w), 3, 1).source == 3 ? kind::none : kind::other;
    // Nobody is left to send anything.
    auto any = comm.irecv(view(w), any_source, any_tag);
    out[3] = outcome_of([&] { any.wait(); });
  };
  const auto err = tutti::test::run_watched(4, body, "p2p lost peers");
  CHECK(err);  // rank 2's own error
  CHECK_MESSAGE(out[0].k == kind::peer_lost, kind_name(out[0].k) << ": " << out[0].what);
  CHECK(contains(out[0].what, "rank 1 returned without sending"));
  CHECK_MESSAGE(out[1].k == kind::peer_lost, kind_name(out[1].k) << ": " << out[1].what);
  CHECK(contains(out[1].what, "rank 2 failed"));
  CHECK(contains(out[1].what, "gave up"));
  CHECK(out[2].k == kind::none);
  CHECK_MESSAGE(out[3].k == kind::peer_lost, kind_name(out[3].k) << ": " << out[3].what);
  CHECK(contains(out[3].what, "every other rank"));
}

TEST_CASE("p2p: abort() ends pending receives and sends within about 20 ms") {
  std::vector<seen> out(2);
  std::chrono::milliseconds took{};
  std::atomic<bool> finished{false};
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    if (comm.rank() == 1) {  // stays, so that its receiver waits for the abort, not its loss
      while (!finished) std::this_thread::sleep_for(1ms);
      return;
    }
    {
      std::vector<int> v(2);
      std::vector<float> big(rendezvous_floats);
      auto r = comm.irecv(view(v), 1);
      auto s = comm.isend(view(big), 1);  // rendezvous: pending until a receive takes it
      std::thread stopper([&] {
        std::this_thread::sleep_for(50ms);
        comm.abort();
      });
      out[0] = outcome_of([&] { r.wait(); });
      const auto t0 = std::chrono::steady_clock::now();
      out[1] = outcome_of([&] { s.wait(); });
      took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
      stopper.join();
      finished = true;
    }
  };
  const auto err = tutti::test::run_watched(2, body, "p2p abort");
  CHECK_FALSE(err);
  for (const seen& s : out) CHECK_MESSAGE(s.k == kind::aborted, kind_name(s.k) << ": " << s.what);
  CHECK(took < 1000ms);  // already aborted: at once (the bound is loose for a loaded machine)
}

TEST_CASE("p2p: the flight record lists pending sends and receives with their peer and tag") {
  std::string record, after;
  std::atomic<bool> read{false};
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    std::vector<int> small(2);
    std::vector<float> big(rendezvous_floats, 1.0f);
    if (comm.rank() == 0) {
      auto r = comm.irecv(view(small), 1, 6);
      auto s = comm.isend(view(big), 1, 8);  // rendezvous: pending until rank 1 receives it
      auto any = comm.irecv(view(small), any_source, any_tag);
      record = comm.flight_record();
      read = true;
      wait_all(r, s, any);
      after = comm.flight_record();
    } else {
      while (!read) std::this_thread::sleep_for(1ms);
      comm.send(view(small), 0, 6);
      comm.recv(view(big), 0, 8);
      comm.send(view(small), 0, 9);
    }
  };
  const auto err = tutti::test::run_watched(2, body, "p2p flight record");
  CHECK_FALSE(err);
  CAPTURE(record);
  CHECK(contains(record, "pending point-to-point: recv from rank 1 tag=6 (8 bytes), posted"));
  CHECK(contains(record, "pending point-to-point: send to rank 1 tag=8 ("));
  CHECK(contains(record, "pending point-to-point: recv from any rank any tag"));
  CAPTURE(after);
  CHECK_FALSE(contains(after, "pending point-to-point"));
}

TEST_CASE("p2p: usage errors: any_source or any_tag on a send and status() before completion") {
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    std::vector<int> v(2);
    if (comm.rank() == 0) {
      CHECK_THROWS_AS(comm.send(view(v), any_source), usage_error);
    } else if (comm.rank() == 1) {
      CHECK_THROWS_AS(comm.send(view(v), 0, any_tag), usage_error);
    } else {
      auto r = comm.irecv(view(v), 0, 77);
      CHECK_THROWS_AS((void)r.status(), usage_error);
      comm.abort();
      CHECK_THROWS_AS(r.wait(), tutti::error);
    }
  };
  const auto err = tutti::test::run_watched(3, body, "p2p usage");
  (void)err;  // ranks 0 and 1 broke their communicators (a usage error tells the peers)
}
