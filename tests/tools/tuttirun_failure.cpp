// How tuttirun tells a failure's cause from its victims (tools/tuttirun/failure.hpp): the rank a
// rank's last words blame, and the cause picked from what the nodes saw.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "tuttirun/failure.hpp"

using namespace tuttirun;

namespace {

failure_report exit_of(long long rank, int code, long long unix_ms, failure_role role = failure_role::cause,
                       long long victim_of = -1) {
  failure_report r;
  r.rank = rank, r.local_rank = rank, r.exit_code = code, r.unix_ms = unix_ms, r.role = role, r.victim_of = victim_of;
  r.what = "exited with status " + std::to_string(code);
  return r;
}

}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("tuttirun: the rank a rank's last words blame") {
  CHECK(blamed_rank("  what():  rank 1 failed, so barrier(recursive_doubling) on rank 0 fails too: barrier("
                    "recursive_doubling): rank 2 lost rank 1 while receiving from it (0 bytes): ... (passed on by "
                    "rank 2): peer lost") == 1);
  CHECK(blamed_rank("restarts: attempt 0 rank 1: rank 2 failed with mismatch_error, so all_reduce(ring) on rank 1 "
                    "fails too: ...") == 2);
  CHECK(blamed_rank("rank 4 timed out, so barrier(ring) on rank 0 fails too: x") == 4);
  CHECK(blamed_rank("rank 0 aborted its communicator, so barrier(ring) on rank 3 fails too: x") == 0);
  CHECK(blamed_rank("rank 1 (world rank 5) failed, so barrier(ring) on rank 0 (world rank 2) fails too: x") == 5);
  CHECK(blamed_rank("  what():  barrier(recursive_doubling): rank 3 lost rank 1 while receiving from it (0 bytes)") == 1);
  CHECK(blamed_rank("all_reduce(ring): rank 0 lost rank 2 (world rank 6) while sending to it") == 6);
  // The first one in the line: what follows is the origin's own account.
  CHECK(blamed_rank("x: rank 0 lost rank 2 while receiving it: [tutti ...] rank 3 failed, so y on rank 2 fails too") == 2);
  CHECK(blamed_rank("") == -1);
  CHECK(blamed_rank("restarts: rank 1 fails on purpose with status 7 in attempt 0") == -1);
  CHECK(blamed_rank("rank 1 failed") == -1);
  CHECK(blamed_rank("Segmentation fault") == -1);
}

TEST_CASE("tuttirun: the cause is the rank the others followed, not the first failure seen") {
  SUBCASE("victims died first") {
    const std::vector<failure_report> seen = {exit_of(0, 134, 100, failure_role::victim, 1),
                                              exit_of(2, 134, 101, failure_role::victim, 1), exit_of(1, 7, 600)};
    REQUIRE(pick_cause(seen));
    CHECK(pick_cause(seen)->rank == 1);
    CHECK(job_status(*pick_cause(seen), seen) == 7);
  }
  SUBCASE("of the ranks that failed on their own, the one a victim blames, then the earliest") {
    CHECK(pick_cause({exit_of(3, 5, 100), exit_of(1, 7, 200), exit_of(0, 1, 50, failure_role::victim, 1)})->rank == 1);
    CHECK(pick_cause({exit_of(3, 5, 100), exit_of(1, 7, 200)})->rank == 3);
  }
  SUBCASE("ranks tuttirun stopped are not causes") {
    CHECK(pick_cause({exit_of(0, 143, 10, failure_role::stopped), exit_of(1, 9, 20)})->rank == 1);
  }
  SUBCASE("a rank that exited with status 0 and that the victims blame") {
    const std::vector<failure_report> seen = {exit_of(0, 1, 100, failure_role::victim, 2),
                                              exit_of(2, 0, 105, failure_role::early_exit),
                                              exit_of(3, 0, 90, failure_role::early_exit)};
    REQUIRE(pick_cause(seen));
    CHECK(pick_cause(seen)->rank == 2);
    CHECK(job_status(*pick_cause(seen), seen) == 1);
  }
  SUBCASE("a rank that exited with status 0 before any failure, blamed by none") {
    CHECK(pick_cause({exit_of(0, 1, 100, failure_role::victim, 7), exit_of(2, 0, 90, failure_role::early_exit)})->rank == 2);
    CHECK(pick_cause({exit_of(0, 1, 100, failure_role::victim, 7), exit_of(2, 0, 110, failure_role::early_exit)})->rank == 0);
  }
  SUBCASE("no failure: no cause") {
    CHECK(!pick_cause({}));
    CHECK(!pick_cause({exit_of(2, 0, 90, failure_role::early_exit)}));
    CHECK(node_pick({exit_of(2, 0, 90, failure_role::early_exit)})->rank == 2);
  }
  SUBCASE("only victims: the earliest") {
    CHECK(pick_cause({exit_of(0, 134, 100, failure_role::victim, 5), exit_of(2, 134, 99, failure_role::victim, 5)})->rank == 2);
  }
}
