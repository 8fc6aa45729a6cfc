// The multi-rank test bodies of tests/group/ again, as real processes over tutti::tcp. Run under
// the launcher: `tuttirun --nproc-per-node=N tutti_tcp_tests` (ctest does so for N = 2..5, over
// IPv6, and striped over 3 streams), or on several nodes (tests/multiproc/netns.sh).
#include <doctest/doctest.h>

#include <numeric>
#include <tutti/transport/tcp.hpp>

#include "../support/job_world.hpp"
#include "../support/collective_checks.hpp"
#include "../support/observe_checks.hpp"
#include "../support/p2p_checks.hpp"
#include "../../examples/point_to_point.hpp"

using namespace tutti;
using namespace tutti::test;

namespace {
communicator<tcp>& world() { return tutti::test::job_world<tcp>(); }
}  // namespace

TEST_SUITE_BEGIN("multiproc");

TEST_CASE_TEMPLATE("over tcp: every collective matches the naive reference", A, algo::ring, algo::tree,
                   algo::recursive_doubling, algo::direct, algo::automatic) {
  check_every_type<A>(world());
}

TEST_CASE("over tcp: large messages, larger than the socket buffers") {
  auto& comm = world();
  const int me = comm.rank(), p = comm.size();
  const std::size_t n = (std::size_t{3} << 20) + 5;  // 12 MiB of floats
  std::vector<float> v(n), want(n);
  auto fill = [&] {
    for (std::size_t i = 0; i < n; ++i) v[i] = value<float>(me, i);
  };
  for (std::size_t i = 0; i < n; ++i) {
    float acc = 0;
    for (int r = 0; r < p; ++r) acc += value<float>(r, i);
    want[i] = acc;
  }
  fill();
  comm.all_reduce(view(v), op::sum{}, algo::ring{});
  expect_equal(v, want, "ring all_reduce 12 MiB");
  fill();
  comm.all_reduce(view(v), op::sum{}, algo::ring{.chunk_bytes = 100000});
  expect_equal(v, want, "ring all_reduce 12 MiB in 100 kB pieces");
  fill();
  comm.all_reduce(view(v), op::sum{}, algo::recursive_doubling{});
  expect_equal(v, want, "recursive doubling / rabenseifner all_reduce 12 MiB");
  fill();
  comm.all_reduce(view(v), op::sum{}, algo::direct{});
  expect_equal(v, want, "direct all_reduce 12 MiB");
  fill();
  std::vector<float> out(n);
  comm.all_reduce(view<const float>(v), view(out), op::sum{});
  expect_equal(out, want, "automatic out-of-place all_reduce 12 MiB");
  fill();
  comm.broadcast(view(v), p - 1);
  std::vector<float> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = value<float>(p - 1, i);
  expect_equal(v, b, "broadcast 12 MiB");
  // All to all: every pair exchanges 4 MiB at once in both directions.
  const std::size_t blk = std::size_t{1} << 20;
  std::vector<std::int32_t> in(blk * static_cast<std::size_t>(p)), got(in.size()), expect(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::int32_t>(me * 1000003 + static_cast<int>(i));
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < blk; ++i)
      expect[static_cast<std::size_t>(r) * blk + i] =
          static_cast<std::int32_t>(r * 1000003 + static_cast<int>(static_cast<std::size_t>(me) * blk + i));
  comm.all_to_all(view<const std::int32_t>(in), view(got));
  expect_equal(got, expect, "all_to_all 4 MiB per pair");
}

TEST_CASE("over tcp: sub-groups run over connections of their own") {
  auto& comm = world();
  std::vector<int> evens;
  for (int r = 0; r < comm.size(); r += 2) evens.push_back(r);
  auto group = comm.new_group(evens);
  CHECK(group.has_value() == (comm.rank() % 2 == 0));
  if (group) {
    CHECK(group->size() == static_cast<int>(evens.size()));
    check_collectives<algo::automatic, float>(*group, 5, op::sum{});
    check_collectives<algo::ring, std::int32_t>(*group, 3, op::max{});
  }
  auto halves = comm.split(comm.rank() < comm.size() / 2 ? 0 : 1, -comm.rank());
  REQUIRE(halves.has_value());
  check_collectives<algo::automatic, double>(*halves, 7, op::sum{});
  // A world collective after the groups' ones: the world's streams are untouched by them.
  check_collectives<algo::recursive_doubling, float>(comm, 9, op::sum{});
  comm.barrier();
}

TEST_CASE("over tcp: send and recv") {
  auto& comm = world();
  const int me = comm.rank(), p = comm.size();
  std::vector<int> data(1000000);
  if (me == 0) {
    for (int r = 1; r < p; ++r) {
      std::iota(data.begin(), data.end(), r);
      comm.send(view(data), r, 7);
    }
  } else {
    comm.recv(view(data), 0, 7);
    CHECK(data[0] == me);
    CHECK(data[999999] == me + 999999);
  }
  comm.barrier();
}

TEST_CASE("over tcp: a rendezvous send given up is not received") { check_given_up_rendezvous(world()); }

TEST_CASE("over tcp: a receive given up after it cleared a message fails its send") {
  check_given_up_receive(world());
}

TEST_CASE("over tcp: point-to-point within groups") { check_group_p2p(world()); }

TEST_CASE("over tcp: the point-to-point examples: the tutorial's ring, a halo exchange, a manager") {
  auto& comm = world();
  CHECK(tutti_examples::run_all(comm));
  comm.barrier();
}

TEST_CASE("over tcp: hooks see every operation and stats count calls and bytes and waits per peer") {
  check_observe(world());
}

TEST_SUITE_END();
