// Results over inproc threads beyond the conformance suite's (tests/conformance/inproc.cpp, every
// collective x algorithm x world sizes 1..9): the other built-in ops, large messages.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../support/collective_checks.hpp"

TEST_SUITE_BEGIN("multirank");

using namespace tutti;

using namespace tutti::test;

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
