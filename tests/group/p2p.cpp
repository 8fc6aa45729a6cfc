// Point-to-point with matching of its own (`matched_p2p`: inproc today): isend/irecv in any
// order, any source and any tag, MPI's non-overtaking rule, 64 outstanding operations per rank,
// eager and rendezvous sizes, and every error a receive can end with.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
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

TEST_CASE("p2p: the tutorial's ring: irecv from the left, isend to the right, then wait") {
  for (int n = 2; n <= 5; ++n)
    for (std::size_t m : {std::size_t{1000}, std::size_t{262144}}) {
      CAPTURE(n);
      CAPTURE(m);
      auto body = [&](auto& comm) {
        comm.set_timeout(20s);
        const int r = comm.rank(), left = (r + n - 1) % n, right = (r + 1) % n;
        std::vector<float> out(m), in(m, -1.0f);
        for (std::size_t i = 0; i < m; ++i) out[i] = static_cast<float>(r * 1000 + static_cast<int>(i % 1000));
        auto rr = comm.irecv(view(in), left);
        auto rs = comm.isend(view(out), right);
        rr.wait();
        rs.wait();
        const recv_status st = rr.status();
        CHECK(st.source == left);
        CHECK(st.tag == 0);
        CHECK(st.count == m);
        for (std::size_t i = 0; i < m; i += 997)
          CHECK(in[i] == static_cast<float>(left * 1000 + static_cast<int>(i % 1000)));
      };
      tutti::test::run_ok(n, body, "p2p ring");
    }
}

TEST_CASE("p2p: 64 outstanding sends and receives per rank, random order, peers and tags") {
  // Every rank sends 64 messages to random peers with random tags (a third rendezvous-sized),
  // posts them and the receives for what its peers send it in a random order, then waits for
  // all. Each message carries (sender, tag, its index among the sender's messages of that tag
  // to this receiver): receives with one source and tag must get them in the order sent.
  for (int n : {2, 3, 5}) {
    CAPTURE(n);
    struct msg {
      int from, to, tag;
      std::size_t floats;
    };
    std::mt19937 rng(1234u + static_cast<unsigned>(n));
    std::vector<msg> plan;
    for (int from = 0; from < n; ++from)
      for (int i = 0; i < 64; ++i) {
        int to = static_cast<int>(rng() % static_cast<unsigned>(n - 1));
        if (to >= from) ++to;
        const std::size_t floats = rng() % 3 == 0 ? rendezvous_floats + rng() % 100 : 1 + rng() % 64;
        plan.push_back({from, to, static_cast<int>(rng() % 4), floats});
      }
    auto body = [&](auto& comm) {
      comm.set_timeout(30s);
      const int me = comm.rank();
      std::mt19937 order(99u + static_cast<unsigned>(me));
      // Sends: the i-th message of (me, to, tag) starts with its index.
      std::map<std::pair<int, int>, int> sent;
      std::vector<std::vector<float>> outs, ins;
      std::vector<std::pair<bool, std::size_t>> posts;  // (is a send, index)
      for (const msg& m : plan)
        if (m.from == me) {
          outs.emplace_back(m.floats, static_cast<float>(me));
          posts.push_back({true, outs.size() - 1});
        }
      std::vector<const msg*> expected;
      for (const msg& m : plan)
        if (m.to == me) {
          ins.emplace_back(m.floats, -1.0f);
          expected.push_back(&m);
          posts.push_back({false, ins.size() - 1});
        }
      std::shuffle(posts.begin(), posts.end(), order);
      // Receives of one (source, tag) are matched in the order they were posted, so the k-th
      // posted receive of (from, tag) gets that pair's k-th message: size each posted buffer for
      // the largest message of its pair.
      std::map<std::pair<int, int>, std::size_t> largest;
      for (const msg* m : expected) largest[{m->from, m->tag}] = std::max(largest[{m->from, m->tag}], m->floats);
      for (std::size_t i = 0; i < ins.size(); ++i) ins[i].assign(largest[{expected[i]->from, expected[i]->tag}], -1.0f);
      std::vector<request> reqs;
      std::vector<std::pair<std::size_t, std::size_t>> recv_of;  // request index -> ins index
      std::size_t si = 0;
      std::vector<std::size_t> send_targets;
      for (const msg& m : plan)
        if (m.from == me) send_targets.push_back(static_cast<std::size_t>(&m - plan.data()));
      for (const auto& [send, i] : posts) {
        if (send) {
          const msg& m = plan[send_targets[i]];
          outs[i][0] = static_cast<float>(sent[{m.to, m.tag}]++);  // its place among (me, to, tag)
          reqs.push_back(comm.isend(view(outs[i]), m.to, m.tag));
          ++si;
        } else {
          recv_of.push_back({reqs.size(), i});
          reqs.push_back(comm.irecv(view(ins[i]), expected[i]->from, expected[i]->tag));
        }
      }
      CHECK(si == outs.size());
      std::vector<recv_status> status(reqs.size());
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].wait();
        status[i] = reqs[i].status();
      }
      // Per (source, tag), the receives in posting order got indices 0, 1, 2, ...
      std::map<std::pair<int, int>, int> next;
      for (const auto& [ri, ii] : recv_of) {
        const msg& m = *expected[ii];
        const recv_status& st = status[ri];
        CHECK(st.source == m.from);
        CHECK(st.tag == m.tag);
        CHECK(ins[ii][0] == static_cast<float>(next[{m.from, m.tag}]++));
        CHECK(st.count >= 1);
        CHECK(ins[ii][st.count - 1] == (st.count == 1 ? ins[ii][0] : static_cast<float>(m.from)));
      }
      comm.barrier();
    };
    tutti::test::run_ok(n, body, "p2p 64 outstanding");
  }
}

TEST_CASE("p2p: any_source and any_tag, recv_status, order per sender, every sender served") {
  for (int n : {2, 3, 5}) {
    CAPTURE(n);
    constexpr int per_sender = 40;
    auto body = [&](auto& comm) {
      comm.set_timeout(20s);
      const int me = comm.rank();
      if (me == 0) {
        std::vector<int> next(static_cast<std::size_t>(n), 0);
        std::vector<std::int64_t> got(3, -1);
        for (int i = 0; i < per_sender * (n - 1); ++i) {
          const recv_status st = comm.recv(view(got), any_source, any_tag);
          REQUIRE(st.source >= 1);
          REQUIRE(st.source < n);
          CHECK(st.tag == 100 + st.source);
          CHECK(st.count == static_cast<std::size_t>(1 + got[0] % 3));
          CHECK(got[0] == next[static_cast<std::size_t>(st.source)]++);  // in the order sent
        }
        for (int s = 1; s < n; ++s) CHECK(next[static_cast<std::size_t>(s)] == per_sender);
      } else {
        for (std::int64_t k = 0; k < per_sender; ++k) {
          std::vector<std::int64_t> v(static_cast<std::size_t>(1 + k % 3), k);
          comm.send(view(v), 0, 100 + me);
        }
      }
      comm.barrier();
      // A specific source still matches only that source: rank 0 waits for the last rank's
      // message while every other rank's arrives first.
      std::vector<std::int64_t> one(1, me);
      if (me == 0) {
        comm.barrier();
        const recv_status st = comm.recv(view(one), n - 1, any_tag);
        CHECK(st.source == n - 1);
        CHECK(st.tag == 7);
        CHECK(one[0] == n - 1);
        std::vector<bool> from(static_cast<std::size_t>(n), false);
        for (int s = 1; s < n - 1; ++s) from[static_cast<std::size_t>(comm.recv(view(one), any_source, 7).source)] = true;
        for (int s = 1; s < n - 1; ++s) CHECK(from[static_cast<std::size_t>(s)]);
      } else if (me < n - 1) {
        comm.send(view(one), 0, 7);
        comm.barrier();
      } else {
        comm.barrier();
        comm.send(view(one), 0, 7);
      }
    };
    tutti::test::run_ok(n, body, "p2p any_source");
  }
}

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

TEST_CASE("p2p: point-to-point progresses beside posted collectives, and they beside it") {
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

TEST_CASE("p2p: on a group, messages stay in the group") {
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

TEST_CASE("p2p: a shorter message is received and its count reported, a longer one is a mismatch") {
  std::vector<seen> out(2);
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    if (comm.rank() == 0) {
      std::vector<float> three(3, 2.0f), six(6, 3.0f);
      comm.send(view(three), 1, 1);
      comm.send(view(six), 1, 2);
    } else {
      std::vector<float> five(5, -1.0f);
      const recv_status st = comm.recv(view(five), 0, 1);
      CHECK(st.count == 3);
      CHECK(five[2] == 2.0f);
      CHECK(five[3] == -1.0f);  // beyond the message: untouched
      auto r = comm.irecv(view(five), 0, 2);
      out[1] = outcome_of([&] { r.wait(); });
    }
  };
  const auto err = tutti::test::run_watched(2, body, "p2p counts");
  CHECK_FALSE(err);
  CHECK_MESSAGE(out[1].k == kind::mismatch, kind_name(out[1].k) << ": " << out[1].what);
  CHECK(contains(out[1].what, "rank 0"));
  CHECK(contains(out[1].what, "rank 1"));
  CHECK(contains(out[1].what, "count=6"));
  CHECK(contains(out[1].what, "count=5"));
}

TEST_CASE("p2p: another dtype is a mismatch naming both ranks and both types") {
  std::vector<seen> out(2);
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    if (comm.rank() == 0) {
      std::vector<float> v(4, 1.0f);
      auto s = comm.isend(view(v), 1, 9);
      out[0] = outcome_of([&] { s.wait(); });
    } else {
      std::vector<std::int32_t> v(4);
      auto r = comm.irecv(view(v), any_source, 9);
      out[1] = outcome_of([&] { r.wait(); });
    }
  };
  const auto err = tutti::test::run_watched(2, body, "p2p dtype");
  CHECK_FALSE(err);
  CHECK(out[0].k == kind::none);  // eager: it completed when sent
  CHECK_MESSAGE(out[1].k == kind::mismatch, kind_name(out[1].k) << ": " << out[1].what);
  CHECK(contains(out[1].what, "dtype=float"));
  CHECK(contains(out[1].what, "dtype=int32"));
  CHECK(contains(out[1].what, "rank 0"));
  CHECK(contains(out[1].what, "rank 1"));
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

TEST_CASE("p2p: a peer that never sends is a timeout naming it, the communicator stays usable") {
  seen got;
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    std::vector<int> v(2);
    if (comm.rank() == 0) {
      comm.set_timeout(300ms);
      auto r = comm.irecv(view(v), 2, 5);
      got = outcome_of([&] { r.wait(); });
      comm.set_timeout(20s);
    }
    comm.barrier();  // the failed posted receive left the communicator as it was
  };
  const auto err = tutti::test::run_watched(3, body, "p2p timeout");
  CHECK_FALSE(err);
  CHECK_MESSAGE(got.k == kind::timeout, kind_name(got.k) << ": " << got.what);
  CHECK(contains(got.what, "rank 2"));
  CHECK(contains(got.what, "tag=5"));
  CHECK(contains(got.what, "0.3 s"));
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

TEST_CASE("p2p: usage errors: any_source or any_tag on a send, status() before completion") {
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
