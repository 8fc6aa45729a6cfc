// Every collective x every algorithm x world sizes 1..9 x counts {0, 1, size-1, not divisible}
// x element types x ops, against a naive reference each rank computes on its own.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../support/ranks.hpp"

TEST_SUITE_BEGIN("multirank");

using namespace tutti;
using tutti::test::value;
using tutti::test::vec3;
using tutti::test::vec3_max_abs;

namespace {

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

template <class A, collective C>
constexpr bool has = std::is_same_v<A, algo::automatic> || algorithm_for<A, C>;

/// Runs every collective the algorithm offers with element type T, op `op`, and `count`
/// (the whole buffer for broadcast/reduce/all_reduce, the per-rank block elsewhere).
template <class A, class T, class Op, class Comm>
void check_collectives(Comm& comm, std::size_t count, const Op& op, const A& a = {}) {
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

  if constexpr (has<A, collective::broadcast>)
    for (int root : roots) {
      auto buf = mine(count);
      comm.broadcast(view(buf), root, a);
      std::vector<T> want(count);
      for (std::size_t i = 0; i < count; ++i) want[i] = value<T>(root, i);
      expect_equal(buf, want, tag + " broadcast root=" + std::to_string(root));
    }
  if constexpr (has<A, collective::reduce>)
    for (int root : roots) {
      auto buf = mine(count);
      comm.reduce(view(buf), root, op, a);
      expect_equal(buf, me == root ? reduced(count) : mine(count), tag + " reduce root=" + std::to_string(root));
    }
  if constexpr (has<A, collective::all_reduce>) {
    auto buf = mine(count);
    comm.all_reduce(view(buf), op, a);
    expect_equal(buf, reduced(count), tag + " all_reduce in place");
    const auto in = mine(count);
    std::vector<T> out(count);
    comm.all_reduce(view(in), view(out), op, a);
    expect_equal(out, reduced(count), tag + " all_reduce out of place");
    expect_equal(in, mine(count), tag + " all_reduce leaves its input alone");
  }
  if constexpr (has<A, collective::gather>)
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
  if constexpr (has<A, collective::all_gather>) {
    const auto in = mine(count);
    std::vector<T> out(count * N), want;
    comm.all_gather(view(in), view(out), a);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(r, i));
    expect_equal(out, want, tag + " all_gather");
  }
  if constexpr (has<A, collective::scatter>)
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
  if constexpr (has<A, collective::all_to_all>) {
    std::vector<T> in, out(count * N), want;
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i) in.push_back(value<T>(me * n + j, i));
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(j * n + me, i));
    comm.all_to_all(view(in), view(out), a);
    expect_equal(out, want, tag + " all_to_all");
  }
  if constexpr (has<A, collective::reduce_scatter>) {
    const auto in = mine(count * N);
    std::vector<T> out(count);
    comm.reduce_scatter(view(in), view(out), op, a);
    expect_equal(out, reduced(count, static_cast<std::size_t>(me) * count), tag + " reduce_scatter");
    expect_equal(in, mine(count * N), tag + " reduce_scatter leaves its input alone");
  }
  if constexpr (has<A, collective::barrier>) comm.barrier(a);
}

template <class A, class Comm>
void check_every_type(Comm& comm) {
  const auto n = static_cast<std::size_t>(comm.size());
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, 3 * n + 2}) {
    check_collectives<A, std::int32_t>(comm, count, op::sum{});
    check_collectives<A, std::int32_t>(comm, count, op::max{});
    check_collectives<A, float>(comm, count, op::sum{});
    check_collectives<A, float>(comm, count, op::max{});
    check_collectives<A, double>(comm, count, op::sum{});
    check_collectives<A, double>(comm, count, op::max{});
    check_collectives<A, bfloat16>(comm, count, op::sum{});
    check_collectives<A, bfloat16>(comm, count, op::max{});
    check_collectives<A, vec3>(comm, count, vec3_max_abs{});
  }
}

}  // namespace

TEST_CASE_TEMPLATE("every collective matches the naive reference at world sizes 1..9", A, algo::ring,
                   algo::tree, algo::recursive_doubling, algo::direct, algo::automatic) {
  for (int n = 1; n <= 9; ++n) {
    CAPTURE(n);
    tutti::test::run_ranks<A>(n, [](auto& comm) { check_every_type<A>(comm); });
  }
}

TEST_CASE("the remaining built-in ops reduce correctly") {
  for (int n : {2, 3, 5}) {
    tutti::test::run_ranks(n, [](auto& comm) {
      const int me = comm.rank(), p = comm.size();
      std::vector<std::int64_t> v(37);
      auto fill = [&] {
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>((me + 1) * 3 + static_cast<int>(i % 5));
      };
      auto want = [&](auto op) {
        std::vector<std::int64_t> w(v.size());
        for (std::size_t i = 0; i < w.size(); ++i) {
          std::int64_t acc = 3 + static_cast<int>(i % 5);
          for (int r = 1; r < p; ++r) acc = op(acc, static_cast<std::int64_t>((r + 1) * 3 + static_cast<int>(i % 5)));
          w[i] = acc;
        }
        return w;
      };
      auto check = [&](auto op) {
        fill();
        comm.all_reduce(view(v), op);
        CHECK(v == want(op));
        fill();
        comm.all_reduce(view(v), op, algo::ring{.chunk_bytes = 16});
        CHECK(v == want(op));
      };
      check(op::prod{});
      check(op::min{});
      check(op::band{});
      check(op::bor{});
      check(op::bxor{});
      // avg: a sum, divided once by the group size (integer division for integers).
      fill();
      comm.all_reduce(view(v), op::avg{});
      auto w = want(op::sum{});
      for (auto& x : w) x /= p;
      CHECK(v == w);
      std::vector<float> f(10, float(me));
      comm.all_reduce(view(f), op::avg{});
      CHECK(f[3] == doctest::Approx((p - 1) / 2.0));
      std::vector<float16> h(10, float16(float(me)));
      comm.reduce(view(h), 0, op::avg{});
      if (me == 0) CHECK(float(h[9]) == doctest::Approx((p - 1) / 2.0));
    });
  }
}

TEST_CASE("large messages exercise chunking and pipelining") {
  constexpr std::size_t big = (std::size_t{1} << 20) + 3;  // 1 Mi + 3 floats
  for (int n : {3, 4}) {
    CAPTURE(n);
    tutti::test::run_ranks(n, [&](auto& comm) {
      const int me = comm.rank();
      auto mine = [&] {
        std::vector<float> v(big);
        for (std::size_t i = 0; i < big; ++i) v[i] = value<float>(me, i);
        return v;
      };
      std::vector<float> want(big);
      for (std::size_t i = 0; i < big; ++i) {
        float acc = 0;
        for (int r = 0; r < comm.size(); ++r) acc += value<float>(r, i);
        want[i] = acc;
      }
      auto v = mine();
      comm.all_reduce(view(v), op::sum{}, algo::ring{.chunk_bytes = 64 << 10});
      expect_equal(v, want, "ring all_reduce 1Mi");
      v = mine();
      comm.all_reduce(view(v), op::sum{}, algo::recursive_doubling{});
      expect_equal(v, want, "rabenseifner all_reduce 1Mi");
      v = mine();
      comm.all_reduce(view(v), op::sum{}, algo::direct{});
      expect_equal(v, want, "direct all_reduce 1Mi");
      v = mine();
      comm.reduce(view(v), 1, op::sum{}, algo::ring{.chunk_bytes = 128 << 10});
      expect_equal(v, me == 1 ? want : mine(), "ring reduce 1Mi");
      v = mine();
      comm.broadcast(view(v), 2 % comm.size(), algo::ring{.chunk_bytes = 100000});
      std::vector<float> b(big);
      for (std::size_t i = 0; i < big; ++i) b[i] = value<float>(2 % comm.size(), i);
      expect_equal(v, b, "ring broadcast 1Mi");
      const auto in = mine();
      std::vector<float> out(big / 4 + 1);
      std::vector<float> rs_in(out.size() * static_cast<std::size_t>(comm.size()));
      for (std::size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = value<float>(me, i);
      comm.reduce_scatter(view(rs_in), view(out), op::sum{}, algo::ring{.chunk_bytes = 32 << 10});
      for (std::size_t i = 0; i < out.size(); ++i) {
        float acc = 0;
        for (int r = 0; r < comm.size(); ++r) acc += value<float>(r, static_cast<std::size_t>(me) * out.size() + i);
        if (out[i] != acc) {
          FAIL_CHECK("ring reduce_scatter 1Mi differs at " << i);
          break;
        }
      }
      std::vector<float> all(in.size() * static_cast<std::size_t>(comm.size()));
      comm.all_gather(view(in), view(all), algo::ring{.chunk_bytes = 256 << 10});
      bool ok = true;
      for (int r = 0; r < comm.size() && ok; ++r)
        for (std::size_t i = 0; i < big && ok; i += 997) ok = all[static_cast<std::size_t>(r) * big + i] == value<float>(r, i);
      CHECK_MESSAGE(ok, "ring all_gather 1Mi");
    });
  }
}

TEST_CASE("recursive doubling folds non-powers of two for large all_reduce") {
  for (int n : {5, 6, 7, 8}) {
    CAPTURE(n);
    tutti::test::run_ranks(n, [](auto& comm) {
      std::vector<double> v(300001, double(comm.rank()));
      comm.all_reduce(view(v), op::sum{}, algo::recursive_doubling{.halving_threshold_bytes = 1024});
      const double want = comm.size() * (comm.size() - 1) / 2.0;
      CHECK(v.front() == want);
      CHECK(v[150000] == want);
      CHECK(v.back() == want);
    });
  }
}
TEST_SUITE_END();
