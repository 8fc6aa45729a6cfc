// tutti::hierarchy<shm, tcp> over processes on several hosts: the layout it learns from the node
// keys (against the one the script announces in TUTTI_TEST_HOSTS), and every collective against
// the reference and the flat collective over tcp (tests/support/hierarchy_checks.hpp). Run by
// tests/multiproc/two_hosts.sh (two tuttirun --nnodes=2 on loopback, told apart by
// TUTTI_NODE_ID) and tests/multiproc/netns.sh (hosts as network namespaces: one hostname, one
// kernel, different namespaces; 2+2, 2+2+2 and 2+1+1 numbered out of host order).
#include <doctest/doctest.h>

#include <algorithm>
#include <tutti/group/hierarchy.hpp>
#include <tutti/transport/shm.hpp>
#include <tutti/transport/tcp.hpp>

#include "../support/expected_hosts.hpp"
#include "../support/hierarchy_checks.hpp"

using namespace tutti;

namespace {
hierarchy<shm, tcp>& job() {
  static hierarchy<shm, tcp> h = [] {
    auto x = hierarchy<shm, tcp>::from_env();
    x.world().set_timeout(std::chrono::seconds(60));
    return x;
  }();
  return h;
}
}  // namespace

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("hierarchy<shm, tcp>: the groups learned from the node keys are the hosts") {
  auto& h = job();
  MESSAGE(h.layout());
  const auto labels = tutti::test::expected_hosts();
  if (!labels) return;
  REQUIRE(static_cast<int>(labels->size()) == h.size());
  const auto want = tutti::test::ranks_on_host_of(*labels, h.rank());
  std::vector<int> got(static_cast<std::size_t>(h.local_size()));
  const int me = h.rank();
  h.local().all_gather(view<const int>(&me, 1), view(got));
  std::sort(got.begin(), got.end());
  CHECK_MESSAGE(got == want, h.layout());
  std::vector<std::string> distinct(*labels);
  std::sort(distinct.begin(), distinct.end());
  CHECK(h.hosts() == std::unique(distinct.begin(), distinct.end()) - distinct.begin());
}

TEST_CASE("hierarchy<shm, tcp>: every collective equals the reference and the flat collective") {
  testing::report rep;
  tutti::test::check_hierarchy(job(), rep, "hierarchy<shm, tcp>", true);
  CHECK_MESSAGE(rep.ok(), rep.text());
  CHECK(rep.checks() > 0);
}

TEST_SUITE_END();
