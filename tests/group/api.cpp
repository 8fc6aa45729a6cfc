// The call surface over inproc threads: buffers as ranges and single values, the usage errors
// of the v-collectives (what a rank can see alone is raised before any traffic), and batches.
#include <doctest/doctest.h>

#include <chrono>
#include <array>
#include <chrono>
#include <span>
#include <string>
#include <tutti/tutti.hpp>
#include <vector>

#include "../support/outcomes.hpp"
#include "../support/ranks.hpp"

TEST_SUITE_BEGIN("multirank");

using namespace tutti;
using tutti::test::contains;

TEST_CASE("collectives take std::vector, std::array, std::span and single values as buffers") {
  for (int p : {1, 3}) {
    CAPTURE(p);
    tutti::test::run_ranks(p, [p](auto& comm) {
      const int me = comm.rank();
      const int sum = p * (p - 1) / 2;
      std::vector<int> v(5, me);
      comm.all_reduce(v);
      CHECK(v == std::vector<int>(5, sum));
      std::array<double, 3> a{double(me), 1.0, 2.0};
      comm.all_reduce(a, op::max{});
      CHECK(a[0] == p - 1);
      std::vector<int> w(4, me);
      comm.all_reduce(std::span<int>(w).subspan(1, 2));
      CHECK(w == std::vector<int>{me, sum, sum, me});
      int one = me + 1;
      comm.all_reduce(one);  // a single trivially copyable value: a buffer of one element
      CHECK(one == p * (p + 1) / 2);
      const std::vector<int> in(2, me);  // const ranges are inputs, out of place
      std::vector<int> out(2);
      comm.all_reduce(in, out);
      CHECK(out == std::vector<int>(2, sum));
      std::vector<int> gathered(static_cast<std::size_t>(p));
      comm.all_gather(me, gathered);
      for (int r = 0; r < p; ++r) CHECK(gathered[static_cast<std::size_t>(r)] == r);
      int root_value = me == 0 ? 42 : 0;
      comm.broadcast(root_value, 0);
      CHECK(root_value == 42);
      // The v-collectives take them too, with counts learned in one call.
      const std::vector<float> mine(static_cast<std::size_t>(me) + 1, float(me));
      const auto counts = comm.all_gather_counts(mine.size());
      std::vector<float> all(static_cast<std::size_t>(p * (p + 1) / 2));
      comm.all_gather_v(mine, all, counts);
      CHECK(all.back() == float(p - 1));
    });
  }
}

TEST_CASE("usage_error: v-collective arguments a rank can see are wrong alone, before any traffic") {
  tutti::test::run_ranks(3, [](auto& comm) {
    comm.set_timeout(std::chrono::seconds(20));
    const std::vector<std::size_t> counts{2, 3, 4}, short_counts{2, 3};
    const auto me = static_cast<std::size_t>(comm.rank());
    std::vector<float> in(counts[me]), out(9), small(8), big(20);
    auto raises = [&](auto&& f, std::initializer_list<const char*> needles) {
      try {
        f();
        FAIL_CHECK("no usage_error; expected one mentioning " << *needles.begin());
      } catch (const usage_error& e) {
        for (const char* n : needles) CHECK_MESSAGE(contains(e.what(), n), std::string(e.what()));
      }
    };
    raises([&] { comm.all_gather_v(in, small, counts); }, {"all_gather_v", "out has 8 elements", "sum of the counts"});
    raises([&] { comm.all_gather_v(in, out, short_counts); }, {"counts has 2 entries", "one per rank"});
    raises([&] { comm.reduce_scatter_v(small, in, counts); }, {"reduce_scatter_v", "in has 8 elements", "sum of the counts = 9"});
    raises([&] { comm.gather_v(in, out, short_counts, 1); }, {"gather_v", "counts has 2 entries"});
    raises([&] { comm.gather_v(in, out, counts, 3); }, {"root 3 is outside 0..2"});
    raises([&] { comm.scatter_v(out, counts, in, -1); }, {"scatter_v", "root -1 is outside 0..2"});
    std::vector<std::size_t> send{1, 1, 1}, recv{1, 1, 1};
    recv[me] = 2;
    std::vector<float> three(3), four(4);
    raises([&] { comm.all_to_all_v(three, send, four, recv); }, {"all_to_all_v", "this rank's block to itself"});
    raises([&] { comm.all_to_all_v(three, send, three, std::vector<std::size_t>{1, 1, 1}); }, {"overlap"});
    // in and out hold exactly the sums of their counts (issue 29: a larger buffer hid a wrong count).
    raises([&] { comm.all_to_all_v(big, send, four, recv); }, {"all_to_all_v", "in has 20 elements", "sum of send_counts = 3"});
    // Unusable since the first: each was a call the peers take part in.
    try {
      comm.all_gather_v(in, out, counts);
      FAIL_CHECK("a call after usage errors returned");
    } catch (const tutti::error& e) {
      CHECK(e.code() == errc::aborted);
    }
  });
}

TEST_CASE("a batch open while its communicator moves ends with the move, a held request refuses wait") {
  // Before: the batch kept the moved-from communicator and its requests never completed.
  for (int n : {2, 3}) {
    CAPTURE(n);
    tutti::test::run_ranks(n, [n](auto& comm) {
      using namespace std::chrono_literals;
      comm.set_timeout(3s);
      const int me = comm.rank();
      std::vector<int> a(10, me + 1), b(1000, 2 * me);
      std::vector<request> r;
      {
        auto batch = comm.fuse();
        r.push_back(comm.iall_reduce(view(a)));
        r.push_back(comm.iall_reduce(view(b)));
        try {
          r[0].wait();
          FAIL_CHECK("wait on a held request returned");
        } catch (const usage_error& e) {
          CHECK_MESSAGE(contains(e.what(), "batch that is still open"), e.what());
        }
        CHECK_THROWS_AS((void)wait_any(std::span<request>(r)), usage_error);
        CHECK(r[0].active());  // refused, not consumed
        auto moved = std::move(comm);  // ends the batch: its operations run before the move returns
        wait_all(std::span<request>(r));
        comm = std::move(moved);
      }
      CHECK(a == std::vector<int>(10, n * (n + 1) / 2));
      CHECK(b == std::vector<int>(1000, n * (n - 1)));
      {
        auto batch = comm.fuse();
        auto held = comm.iall_reduce(view(a));
        auto carried = std::move(batch);  // the batch moves; the communicator still knows it
        auto moved = std::move(comm);
        held.wait();
        comm = std::move(moved);
      }
      CHECK(a == std::vector<int>(10, n * n * (n + 1) / 2));
      comm.barrier();
    });
  }
}

TEST_SUITE_END();
