// What tutti::shm does beyond the conformance suite (tests/conformance/processes.cpp), as real
// processes: messages past the rings and windows, sub-groups, the arena, large blocks. Run under
// the launcher: `tuttirun --nproc-per-node=N tutti_shm_tests` (ctest does so for N = 2..5).
#include <doctest/doctest.h>

#include <numeric>
#include <thread>

#include "../support/job_world.hpp"
#include "../support/collective_checks.hpp"
#include "../support/observe_checks.hpp"
#include "../support/p2p_checks.hpp"
#include "../../examples/point_to_point.hpp"

using namespace tutti;
using namespace tutti::test;

namespace {
communicator<shm>& world() { return tutti::test::job_world<shm>(); }
}  // namespace

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("over shm: messages larger than a ring and a window") {
  auto& comm = world();
  const int me = comm.rank(), p = comm.size();
  const std::size_t n = (std::size_t{3} << 20) + 5;  // 12 MiB of floats: > the 4 MiB window, > the rings
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
  comm.all_reduce(view(v), op::sum{}, algo::shared_memory{});
  expect_equal(v, want, "shared_memory two-shot all_reduce 12 MiB");
  fill();
  comm.all_reduce(view(v), op::sum{}, algo::shared_memory{.single_copy = false});
  expect_equal(v, want, "shared_memory two-shot all_reduce 12 MiB through the windows");
  fill();
  comm.all_reduce(view(v), op::sum{}, algo::ring{.chunk_bytes = 100000});
  expect_equal(v, want, "ring all_reduce 12 MiB over the byte rings");
  fill();
  comm.all_reduce(view(v), op::sum{}, algo::recursive_doubling{});
  expect_equal(v, want, "rabenseifner all_reduce 12 MiB over the byte rings");
  fill();
  std::vector<float> out(n);
  comm.all_reduce(view<const float>(v), view(out), op::sum{}, algo::shared_memory{.one_shot_bytes = 0});
  expect_equal(out, want, "shared_memory out-of-place all_reduce 12 MiB");
  fill();
  comm.broadcast(view(v), p - 1);
  std::vector<float> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = value<float>(p - 1, i);
  expect_equal(v, b, "shared_memory broadcast 12 MiB");
}

TEST_CASE("over shm: sub-groups run over the byte rings") {
  auto& comm = world();
  std::vector<int> evens;
  for (int r = 0; r < comm.size(); r += 2) evens.push_back(r);
  auto group = comm.new_group(evens);
  CHECK(group.has_value() == (comm.rank() % 2 == 0));
  if (group) {
    CHECK(group->size() == static_cast<int>(evens.size()));
    check_collectives<algo::automatic, float>(*group, 5, op::sum{});
    check_collectives<algo::shared_memory, std::int32_t>(*group, 3, op::max{});
  }
  auto halves = comm.split(comm.rank() < comm.size() / 2 ? 0 : 1, -comm.rank());
  REQUIRE(halves.has_value());
  check_collectives<algo::automatic, double>(*halves, 7, op::sum{});
  comm.barrier();
}

TEST_CASE("over shm: send and recv") {
  auto& comm = world();
  const int me = comm.rank(), p = comm.size();
  std::vector<int> data(100000);
  if (me == 0) {
    for (int r = 1; r < p; ++r) {
      std::iota(data.begin(), data.end(), r);
      comm.send(view(data), r, 7);
    }
  } else {
    comm.recv(view(data), 0, 7);
    CHECK(data[0] == me);
    CHECK(data[99999] == me + 99999);
  }
  comm.barrier();
}

// The reader of a point-to-point ring finds each frame by the stamp where the previous one
// ended (shm/matching.ipp). A message's bytes, left in the ring from its previous round, must
// never pass for a frame: here every stamp word of the payloads of the first round holds the
// very stamp the reader looks for there in the next round, where 8-byte messages (one frame
// each, every line a frame's place) sent one at a time, each answered, keep the reader looking
// at a place before it is written.
TEST_CASE("over shm: a message's bytes never pass for a frame when its ring comes round") {
  auto& comm = world();
  auto pair = comm.new_group({0, 1});  // a fresh segment: the rings' streams start at 0
  if (!pair) return comm.barrier();
  auto& g = *pair;
  constexpr std::size_t ring = detail::shm_impl::p2p_ring_bytes, words = 128, need = 64 + words * 8;
  std::vector<std::uint64_t> m(words);
  std::uint64_t at = 0;  // the stream place of the next frame
  for (; at < ring; at += need) {
    if (g.rank() == 0) {
      for (std::size_t line = 0; line < words / 8; ++line) m[line * 8 + 7] = at + 64 + line * 64 + ring + 1;
      g.send(view(m), 1, 1);
    } else {
      g.recv(view(m), 0, 1);
      CHECK(m[7] == at + 64 + ring + 1);
    }
  }
  std::uint64_t x = 0;
  int checked = 0;
  for (std::size_t i = 0; i < ring / 64 + 16; ++i) {
    if (g.rank() == 0) {
      x = i;
      g.send(view(&x, 1), 1, 2);
      g.recv(view(&x, 1), 1, 3);
      checked += x == i + 1;
    } else {
      g.recv(view(&x, 1), 0, 2);
      ++x;
      g.send(view(&x, 1), 0, 3);
    }
  }
  if (g.rank() == 0) CHECK(checked == static_cast<int>(ring / 64 + 16));
  comm.barrier();
}

// A blocking receive's fast path reads the ring, and what it reads may owe the sender an answer:
// here a posted receive takes a rendezvous envelope it does not fit, so a `refuse` is due, and
// the blocking receive then takes the short message behind it. The answer must go before the
// receive returns: nothing else on rank 0 moves point-to-point afterwards (its barrier has
// nothing pending), and rank 1's send must fail with the mismatch, not time out.
TEST_CASE("over shm: a blocking receive's fast path sends the answers its reading owes") {
  auto& comm = world();
  auto pair = comm.new_group({0, 1});
  if (!pair) return comm.barrier();
  auto& g = *pair;
  g.set_timeout(std::chrono::seconds(10));
  std::vector<float> room(10);
  std::vector<int> big(100000, 7);
  std::uint64_t x = 0;
  if (g.rank() == 0) {
    auto r = g.irecv(view(room), 1, 1);
    g.barrier();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both messages in the ring
    CHECK(g.recv(view(&x, 1), 1, 2).count == 1);
    CHECK(x == 42);
    CHECK_THROWS_AS(r.wait(), mismatch_error);
  } else {
    g.barrier();
    auto s = g.isend(view(big), 0, 1);
    x = 42;
    g.send(view(&x, 1), 0, 2);
    CHECK_THROWS_AS(s.wait(), mismatch_error);
  }
  g.barrier();
  comm.barrier();
}

// A fast receive reads its ring only up to its own message; the eager messages behind it, which
// fill the ring, are read while the receiver waits in a collective, so that their sender, waiting
// for room, goes on (before, nothing read them and both ranks waited until the deadline).
TEST_CASE("over shm: eager sends that fill the ring go on while their receiver waits in a collective") {
  auto& comm = world();
  auto pair = comm.new_group({0, 1});
  if (!pair) return comm.barrier();
  auto& g = *pair;
  g.set_timeout(std::chrono::seconds(10));
  constexpr int n = 12;  // of 16 KiB: more than the 128 KiB ring holds at once
  std::vector<std::vector<char>> msgs(n, std::vector<char>(std::size_t{16} << 10));
  std::uint64_t x = 0;
  if (g.rank() == 0) {
    x = 42;
    g.send(view(&x, 1), 1, 1);
    for (int i = 0; i < n; ++i) {
      std::fill(msgs[i].begin(), msgs[i].end(), static_cast<char>(i));
      g.send(view(msgs[i]), 1, 2);
    }
    g.barrier();
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the ring full before the receive
    CHECK(g.recv(view(&x, 1), 0, 1).count == 1);
    CHECK(x == 42);
    g.barrier();
    for (int i = 0; i < n; ++i) {
      g.recv(view(msgs[i]), 0, 2);
      CHECK((msgs[i].front() == static_cast<char>(i) && msgs[i].back() == static_cast<char>(i)));
    }
  }
  g.barrier();
  comm.barrier();
}

TEST_CASE("over shm: a rendezvous send given up is not received") { check_given_up_rendezvous(world()); }

TEST_CASE("over shm: a receive given up after it cleared a message fails its send") {
  check_given_up_receive(world());
}

TEST_CASE("over shm: point-to-point within groups") { check_group_p2p(world()); }

TEST_CASE("over shm: the point-to-point examples: the tutorial's ring, a halo exchange, a manager") {
  auto& comm = world();
  CHECK(tutti_examples::run_all(comm));
  comm.barrier();
}

TEST_SUITE_END();

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("over shm: comm.allocate buffers are read in place, alone or mixed with plain buffers") {
  auto& comm = world();
  const int me = comm.rank(), p = comm.size();
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{300001}, (std::size_t{3} << 20) + 7}) {
    CAPTURE(n);
    std::vector<float> want(n);
    for (std::size_t i = 0; i < n; ++i) {
      float acc = 0;
      for (int r = 0; r < p; ++r) acc += value<float>(r, i);
      want[i] = acc;
    }
    auto shared = comm.allocate<float>(n);
    std::vector<float> plain(n);
    for (std::size_t i = 0; i < n; ++i) shared[i] = plain[i] = value<float>(me, i);
    // Even ranks pass shared memory, odd ranks their own: each rank's input is read where it lies.
    std::vector<float> got(n);
    if (me % 2 == 0) comm.all_reduce(view<const float>(shared.data(), n), view(got));
    else comm.all_reduce(view<const float>(plain), view(got));
    expect_equal(got, want, "mixed shared/plain out of place");
    comm.all_reduce(view(shared.data(), n));  // everyone in place in shared memory
    expect_equal(std::vector<float>(shared.begin(), shared.end()), want, "shared in place");
  }
  auto a = comm.allocate<int>(10);
  a = comm.allocate<int>(20);  // move assignment frees the first block
  CHECK(a.size() == 20);
  CHECK_THROWS_AS(comm.allocate<char>(std::size_t{1} << 40), usage_error);
}

TEST_SUITE_END();

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("over shm: block collectives with large blocks, read from their owners or through the windows") {
  auto& comm = world();
  const int me = comm.rank(), p = comm.size();
  const auto P = static_cast<std::size_t>(p), R = static_cast<std::size_t>(me);
  const std::size_t blk = 70001;  // 280 KB of floats: past single_copy_block_bytes, not a window multiple
  auto val = [](std::size_t owner, std::size_t i) { return value<float>(static_cast<int>(owner), i); };
  for (bool single : {true, false}) {
    CAPTURE(single);
    const algo::shared_memory a{.single_copy = single};
    // Even ranks pass inputs in their arena (comm.allocate), odd ranks plain memory.
    auto shared = comm.allocate<float>(blk * P);
    std::vector<float> plain(blk * P);
    float* in = me % 2 == 0 ? shared.data() : plain.data();

    for (std::size_t i = 0; i < blk; ++i) in[i] = val(R, i);
    std::vector<float> out(blk * P), want(blk * P);
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t i = 0; i < blk; ++i) want[r * blk + i] = val(r, i);
    comm.all_gather(view<const float>(in, blk), view(out), a);
    expect_equal(out, want, "all_gather, large blocks");

    std::vector<float> inplace(blk * P, -1.0f);
    for (std::size_t i = 0; i < blk; ++i) inplace[R * blk + i] = val(R, i);
    comm.all_gather(view<const float>(inplace.data() + R * blk, blk), view(inplace), a);
    expect_equal(inplace, want, "all_gather in place, large blocks");

    for (int root : {0, p - 1}) {
      std::vector<float> g(me == root ? blk * P : 0);
      comm.gather(view<const float>(in, blk), view(g), root, a);
      if (me == root) expect_equal(g, want, "gather, large blocks, root " + std::to_string(root));
    }

    for (int root : {p - 1, 0}) {
      if (me == root)
        for (std::size_t r = 0; r < P; ++r)
          for (std::size_t i = 0; i < blk; ++i) in[r * blk + i] = val(r + 100, i);
      std::vector<float> s(blk), swant(blk);
      for (std::size_t i = 0; i < blk; ++i) swant[i] = val(R + 100, i);
      comm.scatter(view<const float>(in, me == root ? blk * P : 0), view(s), root, a);
      expect_equal(s, swant, "scatter, large blocks, root " + std::to_string(root));
    }

    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t i = 0; i < blk; ++i) in[r * blk + i] = val(R * P + r, i);
    std::vector<float> t(blk * P), twant(blk * P);
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t i = 0; i < blk; ++i) twant[r * blk + i] = val(r * P + R, i);
    comm.all_to_all(view<const float>(in, blk * P), view(t), a);
    expect_equal(t, twant, "all_to_all, large blocks");
  }
}

TEST_CASE("over shm: hooks see every operation and stats count calls and bytes and waits per peer") {
  check_observe(world());
}

TEST_SUITE_END();
