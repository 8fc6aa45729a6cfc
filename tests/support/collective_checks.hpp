// The checks every multi-rank test runs, written once against any communicator: over threads
// (inproc, tests/group/collectives.cpp) and over processes (shm, tests/multiproc/).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ranks.hpp"

namespace tutti::test {


template <class T>
std::string show(const T& v) {
  if constexpr (std::is_same_v<T, vec3>) return std::string(tutti::test::toString(v).c_str());
  else return std::to_string(static_cast<double>(v));
}

/// One CHECK per comparison; on failure it names the first differing element.
template <class T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  std::size_t bad = got.size() == want.size() ? got.size() : 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i)
    if (!(got[i] == want[i])) {
      bad = i;
      break;
    }
  const bool ok = got.size() == want.size() && bad == got.size();
  CHECK_MESSAGE(ok, what << ": first difference at element " << bad << " of " << got.size() << " (got "
                         << (bad < got.size() ? show(got[bad]) : "-") << ", want "
                         << (bad < want.size() ? show(want[bad]) : "-") << ")");
}

template <class T, class Op>
T fold(int n, const Op& op, auto&& at) {
  T acc = at(0);
  for (int r = 1; r < n; ++r) acc = op(acc, at(r));
  return acc;
}

template <class A, collective C, class Transport = detail::probe_transport>
constexpr bool has = std::is_same_v<A, algo::automatic> || algorithm_for<A, C, Transport>;

/// Runs every collective the algorithm offers with element type T, op `op`, and `count`
/// (the whole buffer for broadcast/reduce/all_reduce, the per-rank block elsewhere).
template <class A, class T, class Op, class Comm>
void check_collectives(Comm& comm, std::size_t count, const Op& op, const A& a = {}) {
  using Tr = typename Comm::transport_type;
  const int n = comm.size(), me = comm.rank();
  const auto N = static_cast<std::size_t>(n);
  const std::string tag = std::string(A::name) + " n=" + std::to_string(n) + " rank=" + std::to_string(me) +
                          " count=" + std::to_string(count) + " " + dtype_name(dtype_of<T>()) + " " +
                          std::string(op_traits<Op>::name());
  auto mine = [&](std::size_t c, int salt = 0) {
    std::vector<T> v(c);
    for (std::size_t i = 0; i < c; ++i) v[i] = value<T>(me + salt, i);
    return v;
  };
  auto reduced = [&](std::size_t c, std::size_t offset = 0) {
    std::vector<T> v(c);
    for (std::size_t i = 0; i < c; ++i) v[i] = fold<T>(n, op, [&](int r) { return value<T>(r, offset + i); });
    return v;
  };
  std::vector<int> roots{0, n / 2, n - 1};
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());

  if constexpr (has<A, collective::broadcast, Tr>)
    for (int root : roots) {
      auto buf = mine(count);
      comm.broadcast(view(buf), root, a);
      std::vector<T> want(count);
      for (std::size_t i = 0; i < count; ++i) want[i] = value<T>(root, i);
      expect_equal(buf, want, tag + " broadcast root=" + std::to_string(root));
    }
  if constexpr (has<A, collective::reduce, Tr>)
    for (int root : roots) {
      auto buf = mine(count);
      comm.reduce(view(buf), root, op, a);
      expect_equal(buf, me == root ? reduced(count) : mine(count), tag + " reduce root=" + std::to_string(root));
    }
  if constexpr (has<A, collective::all_reduce, Tr>) {
    auto buf = mine(count);
    comm.all_reduce(view(buf), op, a);
    expect_equal(buf, reduced(count), tag + " all_reduce in place");
    const auto in = mine(count);
    std::vector<T> out(count);
    comm.all_reduce(view(in), view(out), op, a);
    expect_equal(out, reduced(count), tag + " all_reduce out of place");
    expect_equal(in, mine(count), tag + " all_reduce leaves its input alone");
  }
  if constexpr (has<A, collective::gather, Tr>)
    for (int root : roots) {
      const auto in = mine(count);
      std::vector<T> out(me == root ? count * N : 0);
      comm.gather(view(in), view(out), root, a);
      if (me == root) {
        std::vector<T> want;
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(r, i));
        expect_equal(out, want, tag + " gather root=" + std::to_string(root));
      }
    }
  if constexpr (has<A, collective::all_gather, Tr>) {
    const auto in = mine(count);
    std::vector<T> out(count * N), want;
    comm.all_gather(view(in), view(out), a);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(r, i));
    expect_equal(out, want, tag + " all_gather");
  }
  if constexpr (has<A, collective::scatter, Tr>)
    for (int root : roots) {
      std::vector<T> in;
      if (me == root)
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < count; ++i) in.push_back(value<T>(r, i + 17 * static_cast<std::size_t>(root)));
      std::vector<T> out(count), want(count);
      comm.scatter(view(in), view(out), root, a);
      for (std::size_t i = 0; i < count; ++i) want[i] = value<T>(me, i + 17 * static_cast<std::size_t>(root));
      expect_equal(out, want, tag + " scatter root=" + std::to_string(root));
    }
  if constexpr (has<A, collective::all_to_all, Tr>) {
    std::vector<T> in, out(count * N), want;
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i) in.push_back(value<T>(me * n + j, i));
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(j * n + me, i));
    comm.all_to_all(view(in), view(out), a);
    expect_equal(out, want, tag + " all_to_all");
  }
  if constexpr (has<A, collective::reduce_scatter, Tr>) {
    const auto in = mine(count * N);
    std::vector<T> out(count);
    comm.reduce_scatter(view(in), view(out), op, a);
    expect_equal(out, reduced(count, static_cast<std::size_t>(me) * count), tag + " reduce_scatter");
    expect_equal(in, mine(count * N), tag + " reduce_scatter leaves its input alone");
  }
  if constexpr (has<A, collective::barrier, Tr>) comm.barrier(a);
}

#ifdef TUTTI_TEST_FEWER_TYPES
inline constexpr bool fewer_types = true;
#else
inline constexpr bool fewer_types = false;
#endif

/// Every element type and op, at counts 0, 1, size-1 and one not divisible by the size. The
/// sanitizer builds (TUTTI_SANITIZE defines TUTTI_TEST_FEWER_TYPES) keep the first four: an
/// integer sum, a float max, a bfloat16 sum (through its float conversion) and the custom op. The
/// memory and thread errors they look for live in the schedules, which do not depend on the type,
/// and the other five instantiations per algorithm cost those builds minutes.
template <class A, class Comm>
void check_every_type(Comm& comm) {
  const auto n = static_cast<std::size_t>(comm.size());
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, 3 * n + 2}) {
    check_collectives<A, std::int32_t>(comm, count, op::sum{});
    check_collectives<A, float>(comm, count, op::max{});
    check_collectives<A, bfloat16>(comm, count, op::sum{});
    check_collectives<A, vec3>(comm, count, vec3_max_abs{});
    if constexpr (!fewer_types) {
      check_collectives<A, std::int32_t>(comm, count, op::max{});
      check_collectives<A, float>(comm, count, op::sum{});
      check_collectives<A, double>(comm, count, op::sum{});
      check_collectives<A, double>(comm, count, op::max{});
      check_collectives<A, bfloat16>(comm, count, op::max{});
    }
  }
}


}  // namespace tutti::test
