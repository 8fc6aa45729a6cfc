// Groups over inproc threads: new_group and split (membership, rank order, errors), collectives
// inside sub-groups of every size 1..9 against a reference computed from world ranks, nested
// groups, sibling groups running at once, and point-to-point messages matched by source and tag.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>  // doctest stringifies std::error_code with it
#include <string>
#include <type_traits>
#include <vector>

#include "../support/outcomes.hpp"
#include "../support/collective_checks.hpp"

TEST_SUITE_BEGIN("multirank");

using namespace tutti;
using namespace std::chrono_literals;
using tutti::test::classify;
using tutti::test::contains;
using tutti::test::kind;
using tutti::test::kind_name;
using tutti::test::ranks_named;
using tutti::test::rethrow_if;
using tutti::test::run_ok;
using tutti::test::value;
using tutti::test::expect_equal;
using tutti::test::has;

namespace {



template <class Comm>
std::vector<int> world_ranks_of(Comm& g, int world_rank) {
  std::vector<int> all(static_cast<std::size_t>(g.size()));
  std::vector<int> mine{world_rank};
  g.all_gather(view(mine), view(all));
  return all;
}

/// Every collective `A` has, on group `g` whose rank i is world rank `world_of[i]`; the data of
/// each rank derives from its world rank, so a wrong rank mapping shows as wrong data.
template <class A, class T, class Op, class Comm>
void check_group(Comm& g, const std::vector<int>& world_of, const Op& op, const std::string& label, const A& a = {}) {
  const int n = g.size(), me = g.rank();
  REQUIRE(static_cast<std::size_t>(n) == world_of.size());
  const auto N = static_cast<std::size_t>(n);
  const int wme = world_of[static_cast<std::size_t>(me)];
  auto w = [&](int r) { return world_of[static_cast<std::size_t>(r)]; };
  const std::size_t count = 2 * N + 1;
  const std::string tag = label + " [" + std::string(A::name) + ", group size " + std::to_string(n) + ", group rank " +
                          std::to_string(me) + " = world rank " + std::to_string(wme) + "]";
  auto mine = [&](std::size_t c, int salt = 0) {
    std::vector<T> v(c);
    for (std::size_t i = 0; i < c; ++i) v[i] = value<T>(wme + salt, i);
    return v;
  };
  auto reduced = [&](std::size_t c, std::size_t offset = 0) {
    std::vector<T> v(c);
    for (std::size_t i = 0; i < c; ++i) {
      T acc = value<T>(w(0), offset + i);
      for (int r = 1; r < n; ++r) acc = op(acc, value<T>(w(r), offset + i));
      v[i] = acc;
    }
    return v;
  };
  std::vector<int> roots{0, n / 2, n - 1};
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());

  if constexpr (has<A, collective::broadcast>)
    for (int root : roots) {
      auto buf = mine(count);
      g.broadcast(view(buf), root, a);
      std::vector<T> want(count);
      for (std::size_t i = 0; i < count; ++i) want[i] = value<T>(w(root), i);
      expect_equal(buf, want, tag + " broadcast root " + std::to_string(root));
    }
  if constexpr (has<A, collective::reduce>)
    for (int root : roots) {
      auto buf = mine(count);
      g.reduce(view(buf), root, op, a);
      expect_equal(buf, me == root ? reduced(count) : mine(count), tag + " reduce root " + std::to_string(root));
    }
  if constexpr (has<A, collective::all_reduce>) {
    auto buf = mine(count);
    g.all_reduce(view(buf), op, a);
    expect_equal(buf, reduced(count), tag + " all_reduce");
  }
  if constexpr (has<A, collective::gather>)
    for (int root : roots) {
      const auto in = mine(count);
      std::vector<T> out(me == root ? count * N : 0), want;
      g.gather(view(in), view(out), root, a);
      if (me != root) continue;
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(w(r), i));
      expect_equal(out, want, tag + " gather root " + std::to_string(root));
    }
  if constexpr (has<A, collective::all_gather>) {
    const auto in = mine(count);
    std::vector<T> out(count * N), want;
    g.all_gather(view(in), view(out), a);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(w(r), i));
    expect_equal(out, want, tag + " all_gather");
  }
  if constexpr (has<A, collective::scatter>)
    for (int root : roots) {
      std::vector<T> in, out(count), want(count);
      if (me == root)
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < count; ++i) in.push_back(value<T>(w(r) + 3 * root, i));
      g.scatter(view(in), view(out), root, a);
      for (std::size_t i = 0; i < count; ++i) want[i] = value<T>(wme + 3 * root, i);
      expect_equal(out, want, tag + " scatter root " + std::to_string(root));
    }
  if constexpr (has<A, collective::all_to_all>) {
    std::vector<T> in, out(count * N), want;
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i) in.push_back(value<T>(wme * 16 + w(j), i));
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(w(j) * 16 + wme, i));
    g.all_to_all(view(in), view(out), a);
    expect_equal(out, want, tag + " all_to_all");
  }
  if constexpr (has<A, collective::reduce_scatter>) {
    const auto in = mine(count * N);
    std::vector<T> out(count);
    g.reduce_scatter(view(in), view(out), op, a);
    expect_equal(out, reduced(count, static_cast<std::size_t>(me) * count), tag + " reduce_scatter");
  }
  if constexpr (has<A, collective::barrier>) g.barrier(a);
}

/// The checks every group test runs on a group.
template <class Comm>
void check_group_all(Comm& g, const std::vector<int>& world_of, const std::string& label) {
  check_group<algo::automatic, std::int32_t>(g, world_of, op::sum{}, label);
  check_group<algo::automatic, float>(g, world_of, op::max{}, label);
  check_group<algo::ring, std::int32_t>(g, world_of, op::sum{}, label);
  check_group<algo::tree, std::int32_t>(g, world_of, op::sum{}, label);
  check_group<algo::recursive_doubling, std::int32_t>(g, world_of, op::sum{}, label);
  check_group<algo::direct, std::int32_t>(g, world_of, op::sum{}, label);
}

}  // namespace

// ---- new_group ------------------------------------------------------------------------------

TEST_CASE("new_group: members in list order and non-members get nothing") {
  for (int p = 1; p <= 6; ++p) {
    CAPTURE(p);
    run_ok(p, [](auto& comm) {
      const int p = comm.size(), me = comm.rank();
      // Even ranks.
      std::vector<int> evens;
      for (int r = 0; r < p; r += 2) evens.push_back(r);
      auto g = comm.new_group(evens);
      CHECK(g.has_value() == (me % 2 == 0));
      if (g) {
        CHECK(g->size() == static_cast<int>(evens.size()));
        CHECK(g->rank() == me / 2);
        CHECK(g->context() != comm.context());
        CHECK(world_ranks_of(*g, me) == evens);
        std::vector<int> v{me};
        g->all_reduce(view(v));
        int want = 0;
        for (int r : evens) want += r;
        CHECK(v[0] == want);
      }
      // A reversed list: new rank i is ranks[i].
      std::vector<int> rev;
      for (int r = p - 1; r >= 0; --r) rev.push_back(r);
      auto r = comm.new_group(rev);
      REQUIRE(r.has_value());
      CHECK(r->size() == p);
      CHECK(r->rank() == p - 1 - me);
      CHECK(world_ranks_of(*r, me) == rev);
      std::vector<int> b{me};
      r->broadcast(view(b), 0);  // new rank 0 is world rank p-1
      CHECK(b[0] == p - 1);
      // An arbitrary order and a subset.
      if (p >= 3) {
        const std::vector<int> some{p - 1, 0, 1};
        auto s = comm.new_group(some);
        const bool member = me == 0 || me == 1 || me == p - 1;
        CHECK(s.has_value() == member);
        if (s) {
          CHECK(s->rank() == (me == p - 1 ? 0 : me + 1));
          CHECK(world_ranks_of(*s, me) == some);
        }
      }
      // Nobody.
      CHECK_FALSE(comm.new_group({}).has_value());
      // The parent is unaffected.
      std::vector<int> all(static_cast<std::size_t>(p)), mine{me};
      comm.all_gather(view(mine), view(all));
      for (int i = 0; i < p; ++i) CHECK(all[static_cast<std::size_t>(i)] == i);
    }, "new_group basics");
  }
}

TEST_CASE("new_group: invalid and duplicate ranks are usage errors that break the communicator") {
  run_ok(4, [](auto& comm) {
    const int p = comm.size();
    auto usage_mentioning = [&](std::vector<int> ranks, const std::string& needle) {
      try {
        (void)comm.new_group(ranks);
        FAIL_CHECK("new_group accepted a bad list (expected usage_error mentioning '" << needle << "')");
      } catch (const usage_error& e) {
        CHECK_MESSAGE(contains(e.what(), needle), e.what());
      }
    };
    usage_mentioning({0, p}, "rank " + std::to_string(p) + " is outside 0.." + std::to_string(p - 1));
    usage_mentioning({-1, 0}, "rank -1");
    usage_mentioning({1, 2, 1}, "listed twice");
    // new_group is a call the peers take part in: after its usage error the communicator is
    // unusable (the peers may be in the call already).
    try {
      comm.barrier();
      FAIL_CHECK("a barrier after new_group's usage error returned");
    } catch (const tutti::error& e) {
      CHECK(e.code() == errc::aborted);
      CHECK_MESSAGE(contains(e.what(), "is outside"), e.what());
    }
  }, "new_group usage errors");
}

TEST_CASE("new_group: different lists on different ranks raise mismatch_error everywhere") {
  for (int p : {2, 3, 5}) {
    CAPTURE(p);
    std::vector<kind> got(static_cast<std::size_t>(p)), next(static_cast<std::size_t>(p));
    std::vector<std::string> what(static_cast<std::size_t>(p)), next_what(static_cast<std::size_t>(p));
    auto body = [&](auto& comm) {
      comm.set_timeout(20s);
      const auto me = static_cast<std::size_t>(comm.rank());
      // Rank 0 asks for {0, 1}, everybody else for {1, 0}.
      try {
        (void)comm.new_group(comm.rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0});
      } catch (...) {
        got[me] = classify(std::current_exception(), what[me]);
        // The documented contract: after a failure other than usage_error the communicator is
        // unusable, and says so without communicating.
        try {
          comm.barrier();
        } catch (...) {
          next[me] = classify(std::current_exception(), next_what[me]);
        }
        throw;
      }
    };
    const auto err = tutti::test::run_watched(p, body, "new_group with different lists");
    CHECK_THROWS_AS(rethrow_if(err), mismatch_error);
    for (int r = 0; r < p; ++r) {
      const auto i = static_cast<std::size_t>(r);
      CAPTURE(r);
      CHECK_MESSAGE(got[i] == kind::mismatch, kind_name(got[i]) << ": " << what[i]);
      CHECK_MESSAGE(contains(what[i], "new_group"), what[i]);
      CHECK_MESSAGE(ranks_named(what[i]).size() >= 2, "names both ranks: " << what[i]);
      // Both values: the two lists as the ranks passed them.
      CHECK_MESSAGE((contains(what[i], "0, 1") && contains(what[i], "1, 0")), "names both lists: " << what[i]);
      CHECK_MESSAGE(next[i] == kind::aborted, "the next call after the mismatch raised " << kind_name(next[i]) << " "
                                                                                        << next_what[i]);
    }
  }
}

// ---- split ----------------------------------------------------------------------------------

TEST_CASE("split: groups by color ordered by key then rank and a negative color opts out") {
  for (int p = 1; p <= 7; ++p) {
    CAPTURE(p);
    run_ok(p, [](auto& comm) {
      const int p = comm.size(), me = comm.rank();
      // color = parity, key = -rank: each group in descending rank order.
      auto g = comm.split(me % 2, -me);
      REQUIRE(g.has_value());
      std::vector<int> want;
      for (int r = p - 1; r >= 0; --r)
        if (r % 2 == me % 2) want.push_back(r);
      CHECK(g->size() == static_cast<int>(want.size()));
      CHECK(g->rank() == static_cast<int>(std::find(want.begin(), want.end(), me) - want.begin()));
      CHECK(world_ranks_of(*g, me) == want);
      CHECK(g->context() != comm.context());
      std::vector<int> v{me};
      g->all_reduce(view(v));
      int sum = 0;
      for (int r : want) sum += r;
      CHECK(v[0] == sum);

      // Equal keys: parent rank order.
      auto same = comm.split(7, 0);
      REQUIRE(same.has_value());
      CHECK(same->rank() == me);
      CHECK(same->size() == p);

      // Rank 0 opts out with a negative color.
      auto rest = comm.split(me == 0 ? -1 : 3, me);
      CHECK(rest.has_value() == (me != 0));
      if (rest) {
        CHECK(rest->size() == p - 1);
        CHECK(rest->rank() == me - 1);
        std::vector<int> x{1};
        rest->all_reduce(view(x));
        CHECK(x[0] == p - 1);
      }
      // Everyone opts out.
      CHECK_FALSE(comm.split(-5, me).has_value());
      // Two splits with the same colors make different communicators.
      auto again = comm.split(me % 2, -me);
      REQUIRE(again.has_value());
      CHECK(again->context() != g->context());
      comm.barrier();
    }, "split basics");
  }
}

// ---- collectives inside groups --------------------------------------------------------------

TEST_CASE("every collective inside sub-groups of sizes 1..9 matches the reference") {
  constexpr int world = 9;
  run_ok(world, [](auto& comm) {
    const int me = comm.rank();
    for (int k = 1; k <= world; ++k) {
      // Members (2i + 1) mod 9: a group whose ranks are neither a prefix nor in world order.
      std::vector<int> members;
      for (int i = 0; i < k; ++i) members.push_back((2 * i + 1) % world);
      auto g = comm.new_group(members);
      CHECK(g.has_value() == (std::find(members.begin(), members.end(), me) != members.end()));
      if (g) check_group_all(*g, members, "new_group of " + std::to_string(k));
    }
    // The world is still in step afterwards.
    comm.barrier();
  }, "collectives in sub-groups 1..9");
}

TEST_CASE("nested groups: a split of a reversed group of the world reversed again") {
  constexpr int world = 8;
  run_ok(world, [](auto& comm) {
    const int me = comm.rank();
    std::vector<int> rev;
    for (int r = world - 1; r >= 0; --r) rev.push_back(r);
    auto g1 = comm.new_group(rev);
    REQUIRE(g1.has_value());
    const int r1 = g1->rank();  // = 7 - me
    CHECK(r1 == world - 1 - me);
    auto g2 = g1->split(r1 % 3, r1);  // g1 ranks c, c+3, c+6 in that order
    REQUIRE(g2.has_value());
    const int s = g2->size();
    std::vector<int> down;
    for (int i = s - 1; i >= 0; --i) down.push_back(i);
    auto g3 = g2->new_group(down);
    REQUIRE(g3.has_value());
    // g3 rank i = g2 rank s-1-i = g1 rank c + 3(s-1-i) = world rank 7 - c - 3(s-1-i).
    const int c = r1 % 3;
    std::vector<int> want;
    for (int i = 0; i < s; ++i) want.push_back(world - 1 - (c + 3 * (s - 1 - i)));
    CHECK(world_ranks_of(*g3, me) == want);
    check_group_all(*g3, want, "nested group");
    // Every level is still usable, in any order.
    std::vector<int> v{1};
    g2->all_reduce(view(v));
    CHECK(v[0] == s);
    g1->barrier();
    v[0] = 1;
    g3->all_reduce(view(v));
    CHECK(v[0] == s);
    comm.barrier();
  }, "nested groups");
}

TEST_CASE("sibling groups run collectives at the same time without interfering") {
  constexpr int world = 8;
  run_ok(world, [](auto& comm) {
    const int me = comm.rank();
    auto g = comm.split(me % 2, me);
    REQUIRE(g.has_value());
    std::vector<int> members;
    for (int r = me % 2; r < world; r += 2) members.push_back(r);
    // Different shapes and algorithms in the two groups, so any cross-talk is a mismatch or
    // wrong data. No barrier between iterations: the groups drift apart freely.
    for (int it = 0; it < 25; ++it) {
      if (me % 2 == 0) {
        std::vector<float> v(33, float(me + it));
        g->all_reduce(view(v), op::sum{}, algo::ring{.chunk_bytes = 16});
        float want = 0;
        for (int r : members) want += float(r + it);
        CHECK(v[32] == want);
        std::vector<float> b(5, float(me));
        g->broadcast(view(b), it % g->size(), algo::tree{});
        CHECK(b[4] == float(members[static_cast<std::size_t>(it % g->size())]));
      } else {
        std::vector<std::int64_t> v(17, me * it);
        g->all_reduce(view(v), op::max{}, algo::recursive_doubling{});
        CHECK(v[0] == static_cast<std::int64_t>(members.back() * it));
        std::vector<std::int64_t> in{me}, out(members.size());
        g->all_gather(view(in), view(out), algo::direct{});
        for (std::size_t i = 0; i < members.size(); ++i) CHECK(out[i] == members[i]);
        g->barrier();
      }
    }
    // Groups made one after the other by new_group, used at the same time.
    auto evens = comm.new_group({0, 2, 4, 6});
    auto odds = comm.new_group({7, 5, 3, 1});
    auto& mine = me % 2 == 0 ? evens : odds;
    REQUIRE(mine.has_value());
    CHECK_FALSE((me % 2 == 0 ? odds : evens).has_value());
    CHECK(evens.has_value() != odds.has_value());
    for (int it = 0; it < 25; ++it) {
      std::vector<int> v(9, me);
      mine->all_reduce(view(v));
      CHECK(v[8] == (me % 2 == 0 ? 12 : 16));
    }
    comm.barrier();
  }, "sibling groups");
}

TEST_CASE("errors inside a sub-group name world ranks too") {
  // World rank 3 (rank 1 of the odd group) leaves; its group partner sees it as lost, named by
  // both its group rank and its world rank. The even group is not affected.
  std::string lost_what;
  kind lost = kind::none;
  auto body = [&](auto& comm) {
    comm.set_timeout(20s);
    auto g = comm.split(comm.rank() % 2, comm.rank());
    REQUIRE(g.has_value());
    if (comm.rank() == 3) return;
    std::vector<int> v(4, 1);
    try {
      g->all_reduce(view(v));
    } catch (...) {
      if (comm.rank() == 1) lost = classify(std::current_exception(), lost_what);
      throw;
    }
    CHECK(v[0] == 2);  // only the even group gets here
  };
  const auto err = tutti::test::run_watched(4, body, "peer lost in a sub-group");
  CHECK_THROWS_AS(rethrow_if(err), peer_lost);
  CHECK_MESSAGE(lost == kind::peer_lost, kind_name(lost) << ": " << lost_what);
  CHECK_MESSAGE(contains(lost_what, "rank 1 (world rank 3)"), lost_what);
}

// ---- point to point -------------------------------------------------------------------------

TEST_CASE("send/recv: tags and sources select the message") {
  run_ok(3, [](auto& comm) {
    const int me = comm.rank();
    // One sender, tags in order.
    if (me == 0) {
      std::vector<int> a{1, 2, 3}, b{4, 5};
      comm.send(view(a), 1, 1);
      comm.send(view(b), 1, 2);
    } else if (me == 1) {
      std::vector<int> a(3), b(2);
      comm.recv(view(a), 0, 1);
      comm.recv(view(b), 0, 2);
      CHECK(a == std::vector<int>{1, 2, 3});
      CHECK(b == std::vector<int>{4, 5});
    }
    comm.barrier();
    // Two senders, received in the opposite order of rank; different tags per sender.
    if (me == 0) {
      std::vector<double> from2(2), from1(2);
      comm.recv(view(from2), 2, 6);
      comm.recv(view(from1), 1, 5);
      CHECK(from2 == std::vector<double>{2.5, 2.5});
      CHECK(from1 == std::vector<double>{1.5, 1.5});
    } else {
      std::vector<double> v(2, me + 0.5);
      comm.send(view(v), 0, me == 1 ? 5 : 6);
    }
    // Point to point does not disturb the collective sequence.
    std::vector<int> x{me};
    comm.all_reduce(view(x));
    CHECK(x[0] == 3);
    // Empty messages, user types, a large payload, const input views.
    if (me == 2) {
      std::vector<char> none;
      comm.send(view(none), 1, 9);
      const std::vector<tutti::test::vec3> pts{{1, 2, 3}, {4, 5, 6}};
      comm.send(view(pts), 1, 9);
      std::vector<float> big(1 << 18);
      for (std::size_t i = 0; i < big.size(); ++i) big[i] = float(i % 1000);
      comm.send(view(big), 1, 10);
    } else if (me == 1) {
      std::vector<char> none;
      comm.recv(view(none), 2, 9);
      std::vector<tutti::test::vec3> pts(2);
      comm.recv(view(pts), 2, 9);
      CHECK(pts[1] == tutti::test::vec3{4, 5, 6});
      std::vector<float> big(1 << 18);
      comm.recv(view(big), 2, 10);
      CHECK(big[999] == 999.0f);
      CHECK(big[(1 << 18) - 1] == float(((1 << 18) - 1) % 1000));
    }
    comm.barrier();
  }, "send/recv tags and sources");
}

TEST_CASE("send/recv inside a group uses group ranks") {
  run_ok(4, [](auto& comm) {
    const int me = comm.rank();
    auto g = comm.new_group({3, 1, 0});  // group ranks: world 3 -> 0, 1 -> 1, 0 -> 2
    if (!g) {
      comm.barrier();
      return;
    }
    const int gr = g->rank();
    // A ring in group order: each group rank sends its world rank to the next group rank.
    std::vector<int> token{me}, got(1);
    const int next = (gr + 1) % g->size(), prev = (gr + g->size() - 1) % g->size();
    if (gr == 0) {
      g->send(view(token), next, 4);
      g->recv(view(got), prev, 4);
    } else {
      g->recv(view(got), prev, 4);
      g->send(view(token), next, 4);
    }
    const std::vector<int> world_of{3, 1, 0};
    CHECK(got[0] == world_of[static_cast<std::size_t>(prev)]);
    comm.barrier();
  }, "send/recv in a group");
}

TEST_CASE("send/recv: a recv with the wrong element type or count is a mismatch on both sides") {
  for (int variant = 0; variant < 2; ++variant) {
    CAPTURE(variant);
    kind sender = kind::none, receiver = kind::none;
    std::string sender_what, receiver_what;
    auto body = [&](auto& comm) {
      comm.set_timeout(20s);
      auto g = comm.new_group({2, 0});  // group rank 0 = world 2, group rank 1 = world 0
      if (!g) return;
      try {
        if (g->rank() == 0) {
          std::vector<std::int16_t> v(variant == 0 ? 6 : 7);
          g->send(view(v), 1, 0);  // may complete before the receive (eager): the next call fails
          g->barrier();
        } else if (variant == 0) {
          std::vector<std::uint16_t> v(6);
          g->recv(view(v), 0, 0);
        } else {
          std::vector<std::int16_t> v(6);  // shorter than the message
          g->recv(view(v), 0, 0);
        }
      } catch (...) {
        if (g->rank() == 0) sender = classify(std::current_exception(), sender_what);
        else receiver = classify(std::current_exception(), receiver_what);
        throw;
      }
    };
    const auto err = tutti::test::run_watched(3, body, "p2p mismatch in a group");
    CHECK_THROWS_AS(rethrow_if(err), mismatch_error);
    CHECK_MESSAGE(sender == kind::mismatch, kind_name(sender) << ": " << sender_what);
    CHECK_MESSAGE(receiver == kind::mismatch, kind_name(receiver) << ": " << receiver_what);
    for (const auto* w : {&sender_what, &receiver_what}) {
      if (variant == 0) CHECK_MESSAGE((contains(*w, "dtype=int16") && contains(*w, "dtype=uint16")), *w);
      else CHECK_MESSAGE((contains(*w, "count=6") && contains(*w, "count=7")), *w);
      // The sender's, relayed by its next call, names world ranks too.
      const auto named = ranks_named(*w);
      CHECK_MESSAGE((w == &receiver_what ? named == std::set<int>{0, 1} : named.count(0) + named.count(1) == 2), *w);
    }
  }
}

TEST_SUITE_END();
