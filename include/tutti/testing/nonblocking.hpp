/// \file
/// The conformance suite's fourth part: non-blocking operations (`tutti::request`).
/// - every `i` twin, v-collectives and point to point included, gives exactly (bitwise) what
///   its blocking twin gives, with every operation of a sequence posted before the first wait
///   and a blocking call among them (ordered after the ones posted before it);
/// - 64 operations in flight at once, completed through `wait_any`;
/// - a batch (`fuse`) of all_reduces moving as one transfer, bitwise as the separate calls;
/// - groups split from a communicator with operations in flight beside it, and a group and its
///   world driven from two threads at once;
/// - ranks that post their operations in different orders, or with different counts or element
///   types among pending operations, get `mismatch_error` (or `peer_lost` from a peer that
///   found it) from `wait`, never a hang or a normal return.
#pragma once

#include <cstdint>
#include <string>
#include <exception>
#include <thread>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "tutti/core/view.hpp"
#include "tutti/group/request.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/testing/calls.hpp"
#include "tutti/testing/collectives.hpp"
#include "tutti/testing/outcomes.hpp"
#include "tutti/testing/report.hpp"

namespace tutti::testing {

namespace nonblocking_detail {

template <class T>
std::vector<T> values(int rank, std::size_t n, int salt) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>((rank + 1) * 31 + static_cast<int>(i % 97) * 7 + salt);
  return v;
}

/// v-collective counts: rank i has (i * 3 + salt) % 5 elements (zeros included).
inline std::vector<std::size_t> counts_of(int p, int salt) {
  std::vector<std::size_t> c(static_cast<std::size_t>(p));
  for (int i = 0; i < p; ++i) c[static_cast<std::size_t>(i)] = static_cast<std::size_t>((i * 3 + salt) % 5);
  return c;
}

inline std::size_t sum(const std::vector<std::size_t>& c) { return std::accumulate(c.begin(), c.end(), std::size_t{0}); }

}  // namespace nonblocking_detail

/// Every `i` twin against its blocking twin (every collective of the table the communicator's
/// algorithm has, `n` elements per block; the v-collectives with uneven counts), all posted
/// before the first wait, with a blocking call among them and point to point after it.
template <class Comm>
void check_nonblocking_results(Comm& comm, report& rep, std::size_t n) {
  using namespace nonblocking_detail;
  using T = std::int32_t;
  using M = typename Comm::memory;
  using Tr = typename Comm::transport_type;
  using A = typename Comm::algorithm_type;
  const int me = comm.rank(), p = comm.size();
  const int root = p - 1;
  const std::string at = " on " + std::to_string(p) + " ranks, " + std::to_string(n) + " elements";
  auto shape_of = [&](collective c) {
    if (info(c).where == counts_at::own_row) {
      std::vector<std::vector<std::size_t>> rows(static_cast<std::size_t>(p), std::vector<std::size_t>(static_cast<std::size_t>(p)));
      for (int i = 0; i < p; ++i)
        for (int j = 0; j < p; ++j) rows[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = static_cast<std::size_t>((i + 2 * j) % 4);
      return call_shape::rows(std::move(rows));
    }
    if (info(c).counts == counts_kind::per_rank) return call_shape::same_counts(p, counts_of(p, 1), root);
    return call_shape::uniform(p, n, root);
  };
  struct pair_of {
    std::string name;
    call_buffers<T> blocking, posted;
  };
  std::vector<pair_of> res;
  res.reserve(collective_count + 3);
  auto input = [](int r, std::size_t i) { return static_cast<T>((r + 1) * 31 + static_cast<int>(i % 97) * 7); };
  // The reference: the blocking calls, in table order (reductions with sum).
  for_each_collective([&](auto k) {
    constexpr collective C = decltype(k)::value;
    if constexpr (testing::has<A, C, Tr>) {
      const call_shape s = shape_of(C);
      auto b = make_buffers<C, T>(s, me, placement::apart, input, T{-7});
      res.push_back({std::string(collective_name(C)), b, b});
      auto d = describe<C, M>(s, me, res.back().blocking, placement::apart, op::sum{});
      comm.template call<C>(d);
    }
  });
  std::vector<T> mid_b = values<T>(me, n, 5), mid_p = mid_b;
  std::vector<T> ring_b(p > 1 ? n : 0), ring_p = ring_b;
  const auto ring_in = values<T>(me, n, 1);
  std::vector<T> after_b = values<T>(me, n, 7), after_p = after_b;
  comm.all_reduce(view(mid_b), op::min{});
  if (p > 1) {
    const int next = (me + 1) % p, prev = (me + p - 1) % p;
    if (me == 0) {
      comm.send(view(ring_in), next, 5);
      comm.recv(view(ring_b), prev, 5);
    } else {
      comm.recv(view(ring_b), prev, 5);
      comm.send(view(ring_in), next, 5);
    }
  }
  comm.all_reduce(view(after_b), op::sum{});

  // The same, posted.
  std::vector<request> r;
  std::size_t i = 0;
  for_each_collective([&](auto k) {
    constexpr collective C = decltype(k)::value;
    if constexpr (testing::has<A, C, Tr>) {
      const call_shape s = shape_of(C);
      r.push_back(comm.template icall<C>(describe<C, M>(s, me, res[i++].posted, placement::apart, op::sum{})));
    }
  });
  comm.all_reduce(view(mid_p), op::min{});  // waits for everything posted so far
  bool all_done = true;
  for (auto& x : r) all_done = all_done && x.test();
  rep.check(all_done, "a blocking call after posted operations" + at, me,
            "returned while an operation posted before it was still pending");
  if (p > 1) {
    const int next = (me + 1) % p, prev = (me + p - 1) % p;
    if (me == 0) {
      r.push_back(comm.isend(view(ring_in), next, 5));
      r.push_back(comm.irecv(view(ring_p), prev, 5));
    } else {
      r.push_back(comm.irecv(view(ring_p), prev, 5));
      r.push_back(comm.isend(view(ring_in), next, 5));
    }
  }
  r.push_back(comm.iall_reduce(view(after_p), op::sum{}));
  wait_all(std::span<request>(r));
  rep.check(comm.pending() == 0, "pending() after wait_all" + at, me, std::to_string(comm.pending()) + " still pending");
  for (const auto& x : res)
    rep.check(x.blocking.out == x.posted.out && x.blocking.in == x.posted.in, "i" + x.name + at, me,
              "the posted operation's result differs from the blocking one's");
  rep.check(mid_b == mid_p, "a blocking all_reduce among posted ones" + at, me, "its result differs");
  rep.check(ring_b == ring_p, "isend/irecv around a ring" + at, me, "the posted operation's result differs from the blocking one's");
  rep.check(after_b == after_p, "all_reduce posted after the blocking one" + at, me, "its result differs");
}

/// 64 all_reduces in flight at once (sizes 1..64 elements, alternating ops), completed through
/// wait_any; each must equal its blocking twin.
template <class Comm>
void check_many_in_flight(Comm& comm, report& rep, int how_many = 64) {
  using namespace nonblocking_detail;
  using T = std::int32_t;
  const int me = comm.rank();
  std::vector<std::vector<T>> want, got;
  for (int i = 0; i < how_many; ++i) {
    want.push_back(values<T>(me, static_cast<std::size_t>(i + 1), i));
    got.push_back(want.back());
  }
  for (int i = 0; i < how_many; ++i) {
    if (i % 2) comm.all_reduce(view(want[static_cast<std::size_t>(i)]), op::max{});
    else comm.all_reduce(view(want[static_cast<std::size_t>(i)]), op::sum{});
  }
  std::vector<request> r;
  for (int i = 0; i < how_many; ++i) {
    if (i % 2) r.push_back(comm.iall_reduce(view(got[static_cast<std::size_t>(i)]), op::max{}));
    else r.push_back(comm.iall_reduce(view(got[static_cast<std::size_t>(i)]), op::sum{}));
  }
  const std::string label = std::to_string(how_many) + " all_reduces in flight on " + std::to_string(comm.size()) + " ranks";
  rep.check(comm.pending() <= static_cast<std::size_t>(how_many), label, me, "more pending than posted");
  int completed = 0;
  std::vector<char> seen(static_cast<std::size_t>(how_many), 0);
  while (true) {
    const std::size_t i = wait_any(std::span<request>(r));
    if (i == r.size()) break;
    rep.check(!seen[i]++, label, me, "wait_any returned index " + std::to_string(i) + " twice");
    ++completed;
  }
  rep.check(completed == how_many, label, me, "wait_any completed " + std::to_string(completed));
  rep.check(want == got, label, me, "a posted result differs from its blocking twin's");
}

/// A batch (`communicator::fuse`): 40 all_reduces of int32 (fused: exact), a float all_reduce
/// and a broadcast among them (which keep their places), against the same calls one by one:
/// bitwise equal, and the flight recorder shows a fused transfer.
template <class Comm>
void check_fused(Comm& comm, report& rep) {
  using namespace nonblocking_detail;
  using T = std::int32_t;
  const int me = comm.rank();
  const std::string label = "a fused batch on " + std::to_string(comm.size()) + " ranks";
  std::vector<std::vector<T>> want, got;
  for (int i = 0; i < 40; ++i) want.push_back(values<T>(me, static_cast<std::size_t>(1 + (i * 37) % 1500), i));
  got = want;
  auto f_want = values<float>(me, 333, 9), f_got = f_want;
  auto b_want = values<T>(me, 100, 3), b_got = b_want;
  for (int i = 0; i < 40; ++i) {
    comm.all_reduce(view(want[static_cast<std::size_t>(i)]), op::sum{});
    if (i == 20) {
      comm.all_reduce(view(f_want), op::max{});
      comm.broadcast(view(b_want), 0);
    }
  }
  std::vector<request> r;
  {
    auto batch = comm.fuse();
    for (int i = 0; i < 40; ++i) {
      r.push_back(comm.iall_reduce(view(got[static_cast<std::size_t>(i)]), op::sum{}));
      if (i == 20) {
        r.push_back(comm.iall_reduce(view(f_got), op::max{}));
        r.push_back(comm.ibroadcast(view(b_got), 0));
      }
    }
  }
  wait_all(std::span<request>(r));
  rep.check(want == got, label, me, "a fused all_reduce's result differs from the separate call's");
  rep.check(f_want == f_got && b_want == b_got, label, me, "an operation inside the batch differs");
  // A batch of 3.4 MiB in odd-sized parts: fused transfers of several chunks, whose blocks
  // start and end inside parts.
  std::vector<std::vector<T>> big_want, big_got;
  for (int i = 0; i < 300; ++i) big_want.push_back(values<T>(me, 3001 - static_cast<std::size_t>(i % 7), 50 + i));
  big_got = big_want;
  for (auto& v : big_want) comm.all_reduce(view(v), op::sum{});
  r.clear();
  {
    auto batch = comm.fuse();
    for (auto& v : big_got) r.push_back(comm.iall_reduce(view(v), op::sum{}));
  }
  wait_all(std::span<request>(r));
  rep.check(big_want == big_got, label + ", 300 parts of ~12 KiB", me, "a fused all_reduce's result differs from the separate call's");
  // Where the process has a flight recorder slot for this communicator (64 per process).
  const std::string record = comm.flight_record(64);
  if (comm.size() > 1 && !record.empty())
    rep.check(record.find("fused count=") != std::string::npos, label, me, "no fused transfer in the flight recorder:\n" + record);
}

/// Sends and receives posted in a batch go as one group that cannot deadlock: every rank sends
/// 8 MiB to each neighbour and receives 8 MiB from each (more than any transport buffers), odd
/// ranks posting their receives first, with a fused all_reduce between two groups; unbatched,
/// each rank's first send would wait for a receive its neighbour posts after its own send.
template <class Comm>
void check_p2p_batch(Comm& comm, report& rep) {
  using namespace nonblocking_detail;
  using T = std::int32_t;
  const int me = comm.rank(), p = comm.size();
  if (p < 2) return;
  const std::string label = "sends and receives in a batch on " + std::to_string(p) + " ranks";
  const int next = (me + 1) % p, prev = (me + p - 1) % p;
  const std::size_t n = std::size_t{2} << 20;
  auto to_next = values<T>(me, n, 7), to_prev = values<T>(me, n, 8);
  std::vector<T> from_prev(n), from_next(n), again(n);
  auto sum = values<T>(me, 100, 4), sum_want = sum;
  comm.all_reduce(view(sum_want), op::sum{});
  std::vector<request> r;
  {
    auto batch = comm.fuse();
    if (me % 2) {
      r.push_back(comm.irecv(view(from_prev), prev, 7));
      r.push_back(comm.irecv(view(from_next), next, 8));
      r.push_back(comm.isend(view(to_next), next, 7));
      r.push_back(comm.isend(view(to_prev), prev, 8));
    } else {
      r.push_back(comm.isend(view(to_next), next, 7));
      r.push_back(comm.isend(view(to_prev), prev, 8));
      r.push_back(comm.irecv(view(from_prev), prev, 7));
      r.push_back(comm.irecv(view(from_next), next, 8));
    }
    r.push_back(comm.iall_reduce(view(sum), op::sum{}));
    r.push_back(comm.isend(view(to_next), next, 9));
    r.push_back(comm.irecv(view(again), prev, 9));
  }
  try {
    wait_all(std::span<request>(r));
  } catch (const std::exception& e) {
    rep.fail(label, me, std::string("threw: ") + e.what());
    return;
  }
  rep.check(from_prev == values<T>(prev, n, 7) && again == from_prev, label, me, "what came from the previous rank differs");
  rep.check(from_next == values<T>(next, n, 8), label, me, "what came from the next rank differs");
  rep.check(sum == sum_want, label, me, "the all_reduce between the groups differs");
  rep.check(comm.pending() == 0, label, me, std::to_string(comm.pending()) + " still pending after wait_all");
}

/// Groups beside their world: operations of the world and of two groups split from it in flight
/// at once, then the world and a group driven from two threads at the same time. Each result
/// must equal what the same calls give one after another.
template <class Comm>
void check_groups_in_flight(Comm& world, report& rep) {
  using namespace nonblocking_detail;
  using T = std::int32_t;
  const int me = world.rank(), p = world.size();
  const std::string label = "groups with their own operations in flight on " + std::to_string(p) + " ranks";
  auto group = world.split(me % 2, me);
  if (!group) {
    rep.fail(label, me, "split gave no group");
    return;
  }
  const std::size_t n = 5000;
  auto w_in = values<T>(me, n, 1), g_in = values<T>(me, n, 2);
  auto w_want = w_in, g_want = g_in;
  world.all_reduce(view(w_want), op::sum{});
  group->all_reduce(view(g_want), op::sum{});
  {
    auto w = w_in, g = g_in, w2 = w_in, g2 = g_in;
    auto r1 = world.iall_reduce(view(w), op::sum{});
    auto r2 = group->iall_reduce(view(g), op::sum{});
    auto r3 = group->iall_reduce(view(g2), op::sum{});
    auto r4 = world.iall_reduce(view(w2), op::sum{});
    wait_all(r1, r2, r3, r4);
    rep.check(w == w_want && w2 == w_want, label, me, "a world all_reduce beside the group's differs");
    rep.check(g == g_want && g2 == g_want, label, me, "a group all_reduce beside the world's differs");
  }
  // Two threads, one communicator each, 20 blocking calls each at the same time.
  std::vector<T> w = w_in, g = g_in;
  std::exception_ptr failed;
  std::thread other([&] {
    try {
      for (int i = 0; i < 20; ++i) {
        g = g_in;
        group->all_reduce(view(g), op::sum{});
      }
    } catch (...) {
      failed = std::current_exception();
    }
  });
  std::string mine;
  try {
    for (int i = 0; i < 20; ++i) {
      w = w_in;
      world.all_reduce(view(w), op::sum{});
    }
  } catch (const std::exception& e) {
    mine = e.what();
  }
  other.join();
  std::string theirs;
  if (failed) try {
      std::rethrow_exception(failed);
    } catch (const std::exception& e) {
      theirs = e.what();
    }
  rep.check(mine.empty(), label + ", world on one thread", me, "threw: " + mine);
  rep.check(theirs.empty(), label + ", a group on another thread", me, "threw: " + theirs);
  rep.check(w == w_want && g == g_want, label + ", two threads", me, "a result differs");
}

/// Ranks that disagree among their pending operations: `mismatch_error` (or `peer_lost`) from
/// the waits on every rank, within the deadline.
template <class Runner>
void check_nonblocking_mismatches(Runner& run, report& rep) {
  if (run.size() < 2) return;
  const int odd = run.size() - 1;
  struct way {
    const char* name;
    int how;
  };
  for (const way w : {way{"order of two pending operations", 0}, way{"count of the second pending operation", 1},
                      way{"element type of the second pending operation", 2},
                      way{"count of one all_reduce of a fused batch", 3}}) {
    const std::string label = std::string("pending operations that disagree (") + w.name + ") on " +
                              std::to_string(run.size()) + " ranks";
    auto call = [&](auto& comm) {
      std::vector<std::int32_t> a(6, 1), b(6, 2);
      std::vector<float> f(6, 1.f);
      const bool me_odd = comm.rank() == odd;
      request r1, r2;
      if (w.how == 3) {
        std::vector<std::int32_t> c(4, 1);
        auto batch = comm.fuse();
        r1 = comm.iall_reduce(view(a), op::sum{});
        r2 = comm.iall_reduce(view(c.data(), me_odd ? 3 : 4), op::sum{});
        batch.post();
        wait_all(r1, r2);
        return;
      }
      if (w.how == 0 && me_odd) {
        r1 = comm.ibroadcast(view(b), 0);
        r2 = comm.iall_reduce(view(a), op::sum{});
      } else {
        r1 = comm.iall_reduce(view(a), op::sum{});
        if (w.how == 1 && me_odd) r2 = comm.ibroadcast(view(b.data(), 5), 0);
        else if (w.how == 2 && me_odd) r2 = comm.ibroadcast(view(f), 0);
        else r2 = comm.ibroadcast(view(b), 0);
      }
      wait_all(r1, r2);
    };
    auto body = [&](auto& comm) {
      comm.set_timeout(run.deadline());
      return attempt(comm, call);
    };
    const auto out = run.run(body, label);
    if (!run.judges()) continue;
    int named = 0;
    for (std::size_t r = 0; r < out.size(); ++r) {
      const auto& o = out[r];
      rep.check(o.k == kind::mismatch || o.k == kind::peer_lost, label, static_cast<int>(r),
                "expected mismatch_error or peer_lost, got " + std::string(kind_name(o.k)) + ": " + o.what);
      if (o.k == kind::mismatch) ++named;
    }
    rep.check(named > 0, label, -1, "no rank raised mismatch_error");
  }
}

}  // namespace tutti::testing
