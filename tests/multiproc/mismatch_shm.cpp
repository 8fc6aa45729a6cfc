// mismatch_error for every collective as real processes over tutti::shm, every algorithm
// including shared_memory (windows, one shot, two shot, single copy): the bodies of
// tests/support/mismatch_checks.hpp. Run under the launcher: `tuttirun --nproc-per-node=N
// tutti_mismatch_shm_tests` (ctest: N = 2, 3, and 3 with single copy forced on).
//
// After a mismatch the failed ranks have marked themselves failed in the segment, so every
// communicator on it (sub-groups too) is unusable: each case joins a segment of its own (a job id
// of its own), and the world communicator of the job, never part of a mismatch, gathers the
// outcomes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "../support/mismatch_checks.hpp"

using namespace tutti;
using namespace tutti::test::mismatch;

namespace {
communicator<shm>& control() {
  static communicator<shm> comm = [] {
    auto c = communicator<shm>::from_env();
    c.set_timeout(std::chrono::seconds(120));
    return c;
  }();
  return comm;
}

auto runner() {
  auto fresh = [] {
    static int cases = 0;
    const job_env job = job_env::from_env();
    return communicator<shm>(shm::create(job.rank, job.world_size, job.job_id + ".mismatch." + std::to_string(++cases),
                                         shm_options::from_env(job.world_size), deadline));
  };
  return make_process_runner<communicator<shm>, algo::shared_memory, algo::ring, algo::tree, algo::recursive_doubling,
                             algo::direct, algo::automatic>(control(), fresh);
}
}  // namespace

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("mismatch over shm: broadcast") { auto run = runner(); check_collective(run, collective::broadcast); }
TEST_CASE("mismatch over shm: reduce") { auto run = runner(); check_collective(run, collective::reduce); }
TEST_CASE("mismatch over shm: all_reduce") { auto run = runner(); check_collective(run, collective::all_reduce); }
TEST_CASE("mismatch over shm: gather") { auto run = runner(); check_collective(run, collective::gather); }
TEST_CASE("mismatch over shm: all_gather") { auto run = runner(); check_collective(run, collective::all_gather); }
TEST_CASE("mismatch over shm: scatter") { auto run = runner(); check_collective(run, collective::scatter); }
TEST_CASE("mismatch over shm: all_to_all") { auto run = runner(); check_collective(run, collective::all_to_all); }
TEST_CASE("mismatch over shm: reduce_scatter") { auto run = runner(); check_collective(run, collective::reduce_scatter); }
TEST_CASE("mismatch over shm: barrier") { auto run = runner(); check_collective(run, collective::barrier); }
TEST_CASE("mismatch over shm: send/recv") { auto run = runner(); check_send_recv(run); }

TEST_SUITE_END();
