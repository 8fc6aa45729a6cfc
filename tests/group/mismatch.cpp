// mismatch_error for every collective over threads (inproc), world sizes 2, 3 and 5: the bodies
// of tests/support/mismatch_checks.hpp, which tests/multiproc/mismatch_*.cpp run as processes
// over shm, tcp and mpi.
#include <doctest/doctest.h>

#include "../support/mismatch_checks.hpp"

using namespace tutti;
using namespace tutti::test::mismatch;

namespace {
using runner = thread_runner<algo::ring, algo::tree, algo::recursive_doubling, algo::direct, algo::automatic>;

void on_every_size(collective c) {
  for (int n : {2, 3, 5}) {
    runner run{n};
    check_collective(run, c);
  }
}
}  // namespace

TEST_SUITE_BEGIN("multirank");

TEST_CASE("mismatch over threads: broadcast") { on_every_size(collective::broadcast); }
TEST_CASE("mismatch over threads: reduce") { on_every_size(collective::reduce); }
TEST_CASE("mismatch over threads: all_reduce") { on_every_size(collective::all_reduce); }
TEST_CASE("mismatch over threads: gather") { on_every_size(collective::gather); }
TEST_CASE("mismatch over threads: all_gather") { on_every_size(collective::all_gather); }
TEST_CASE("mismatch over threads: scatter") { on_every_size(collective::scatter); }
TEST_CASE("mismatch over threads: all_to_all") { on_every_size(collective::all_to_all); }
TEST_CASE("mismatch over threads: reduce_scatter") { on_every_size(collective::reduce_scatter); }
TEST_CASE("mismatch over threads: barrier") { on_every_size(collective::barrier); }
TEST_CASE("mismatch over threads: send/recv") {
  for (int n : {2, 3, 5}) {
    runner run{n};
    check_send_recv(run);
  }
}

TEST_SUITE_END();
