// Every collective of a hierarchy against the reference each rank computes from every rank's
// data, and against the same collective run flat over world(): the same checks over threads
// (tests/group/hierarchy.cpp, layouts given as keys) and over processes (tests/multiproc/
// hierarchy.cpp, hosts as network namespaces or TUTTI_NODE_ID).
#pragma once

#include <cstdint>
#include <string>
#include <tutti/group/hierarchy.hpp>
#include <tutti/testing/collectives.hpp>
#include <tutti/testing/report.hpp>
#include <vector>

namespace tutti::test {

template <class T>
std::vector<T> data_of(int rank, std::size_t n, int salt = 0) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = testing::value<T>(rank + salt, i);
  return v;
}

/// One element type and op, at count n per rank (per block for the collectives with blocks).
template <class T, class Op, class H>
void check_hierarchy_type(H& h, testing::report& rep, std::size_t n, const Op& op, const std::string& what) {
  const int p = h.size(), me = h.rank();
  const auto P = static_cast<std::size_t>(p);
  auto& flat = h.world();
  const std::string at = what + " n=" + std::to_string(n);
  auto reduced = [&](std::size_t count, std::size_t offset) {
    std::vector<T> v(count);
    for (std::size_t i = 0; i < count; ++i) {
      T acc = testing::value<T>(0, offset + i);
      for (int r = 1; r < p; ++r) acc = op(acc, testing::value<T>(r, offset + i));
      v[i] = acc;
    }
    return v;
  };
  {  // all_reduce
    auto v = data_of<T>(me, n), f = v;
    h.all_reduce(view(v), op);
    flat.all_reduce(view(f), op);
    testing::expect_equal(rep, me, v, reduced(n, 0), at + " all_reduce");
    testing::expect_equal(rep, me, v, f, at + " all_reduce vs flat");
  }
  for (int root : {0, p / 2, p - 1}) {
    const std::string r = " root " + std::to_string(root);
    auto v = data_of<T>(me, n);
    h.broadcast(view(v), root);
    testing::expect_equal(rep, me, v, data_of<T>(root, n), at + " broadcast" + r);
    auto w = data_of<T>(me, n);
    h.reduce(view(w), root, op);
    testing::expect_equal(rep, me, w, me == root ? reduced(n, 0) : data_of<T>(me, n), at + " reduce" + r);
    const auto mine = data_of<T>(me, n, 3);
    std::vector<T> all(me == root ? P * n : 0), want;
    h.gather(view(mine), view(all), root);
    if (me == root) {
      for (int q = 0; q < p; ++q) {
        auto d = data_of<T>(q, n, 3);
        want.insert(want.end(), d.begin(), d.end());
      }
      testing::expect_equal(rep, me, all, want, at + " gather" + r);
    }
    std::vector<T> src, got(n);
    if (me == root)
      for (int q = 0; q < p; ++q) {
        auto d = data_of<T>(q * 5, n);
        src.insert(src.end(), d.begin(), d.end());
      }
    h.scatter(view<const T>(src), view(got), root);
    testing::expect_equal(rep, me, got, data_of<T>(me * 5, n), at + " scatter" + r);
  }
  {  // all_gather
    const auto mine = data_of<T>(me, n, 1);
    std::vector<T> all(P * n), f(P * n), want;
    h.all_gather(view(mine), view(all));
    flat.all_gather(view(mine), view(f));
    for (int q = 0; q < p; ++q) {
      auto d = data_of<T>(q, n, 1);
      want.insert(want.end(), d.begin(), d.end());
    }
    testing::expect_equal(rep, me, all, want, at + " all_gather");
    testing::expect_equal(rep, me, all, f, at + " all_gather vs flat");
  }
  {  // reduce_scatter
    const auto in = data_of<T>(me, P * n);
    std::vector<T> out(n), f(n);
    h.reduce_scatter(view(in), view(out), op);
    flat.reduce_scatter(view(in), view(f), op);
    testing::expect_equal(rep, me, out, reduced(n, static_cast<std::size_t>(me) * n), at + " reduce_scatter");
    testing::expect_equal(rep, me, out, f, at + " reduce_scatter vs flat");
  }
}

/// Every collective at several counts: 0, 1, 3 · size + 2 (with groups of one size L, a tail
/// after the L blocks of all_reduce), and, with `large`, one that takes the windows and pieces.
template <class H>
void check_hierarchy(H& h, testing::report& rep, const std::string& label, bool large = false) {
  std::vector<std::size_t> counts{0, 1, 3 * static_cast<std::size_t>(h.size()) + 2};
#ifdef TUTTI_TEST_FEWER_TYPES
  if (large) counts.push_back(200003);  // the sanitizer builds: two pieces each for groups of up to 3
#else
  if (large) counts.push_back((std::size_t{1} << 18) + 3);
#endif
  for (std::size_t n : counts) {
    check_hierarchy_type<std::int32_t>(h, rep, n, op::sum{}, label + " int32 sum");
    check_hierarchy_type<float>(h, rep, n, op::max{}, label + " float max");
    check_hierarchy_type<double>(h, rep, n, op::sum{}, label + " double sum");
  }
  {  // avg over the hierarchy divides once, by the whole size
    std::vector<double> v(5, static_cast<double>(h.rank()));
    h.all_reduce(view(v), op::avg{});
    const double want = (h.size() - 1) / 2.0;
    rep.check(v[0] == want && v[4] == want, label + " all_reduce avg", h.rank(), "got " + std::to_string(v[0]));
  }
  h.barrier();
}

}  // namespace tutti::test
