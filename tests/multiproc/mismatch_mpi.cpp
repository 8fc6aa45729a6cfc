// mismatch_error for every collective as real processes over tutti::mpi, every algorithm
// including native (MPI's own collectives, checked by the fingerprint agreement before each):
// the bodies of tests/support/mismatch_checks.hpp. Run under mpirun (ctest: -np 2 and 3).
//
// A failed communicator is never freed and may keep pending requests: each case works on a
// duplicate of MPI_COMM_WORLD of its own; another duplicate, never part of a mismatch, gathers
// the outcomes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <tutti/transport/mpi.hpp>

#include "../support/mismatch_checks.hpp"

using namespace tutti;
using namespace tutti::test::mismatch;

namespace {
communicator<mpi>& control() {
  static communicator<mpi> comm = [] {
    auto c = communicator<mpi>::from_env();
    c.set_timeout(std::chrono::seconds(120));
    return c;
  }();
  return comm;
}

auto runner() {
  auto fresh = [] { return communicator<mpi>(mpi::create(MPI_COMM_WORLD, std::chrono::seconds(30))); };
  return make_process_runner<communicator<mpi>, algo::native, algo::ring, algo::tree, algo::recursive_doubling,
                             algo::direct, algo::automatic>(control(), fresh);
}
}  // namespace

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("mismatch over mpi: broadcast") { auto run = runner(); check_collective(run, collective::broadcast); }
TEST_CASE("mismatch over mpi: reduce") { auto run = runner(); check_collective(run, collective::reduce); }
TEST_CASE("mismatch over mpi: all_reduce") { auto run = runner(); check_collective(run, collective::all_reduce); }
TEST_CASE("mismatch over mpi: gather") { auto run = runner(); check_collective(run, collective::gather); }
TEST_CASE("mismatch over mpi: all_gather") { auto run = runner(); check_collective(run, collective::all_gather); }
TEST_CASE("mismatch over mpi: scatter") { auto run = runner(); check_collective(run, collective::scatter); }
TEST_CASE("mismatch over mpi: all_to_all") { auto run = runner(); check_collective(run, collective::all_to_all); }
TEST_CASE("mismatch over mpi: reduce_scatter") { auto run = runner(); check_collective(run, collective::reduce_scatter); }
TEST_CASE("mismatch over mpi: barrier") { auto run = runner(); check_collective(run, collective::barrier); }
TEST_CASE("mismatch over mpi: send/recv") { auto run = runner(); check_send_recv(run); }

TEST_SUITE_END();
