// Meshes over processes, under the launcher: the checks of tests/group/mesh.cpp (every 2-D shape
// of the job's size and 2 x 2 x size/4, every collective on every axis) over tutti::shm, or over
// tutti::tcp (TUTTI_MESH_TCP), where an axis may run over shm inside the tcp job: the mesh checks
// by the ranks' node keys (TUTTI_NODE_ID here, standing in for hosts) that such an axis lies
// within hosts, also when the hosts' ranks are not numbered host by host.
//   tuttirun --nproc-per-node=6 tutti_mesh_shm        tuttirun --nproc-per-node=4 tutti_mesh_tcp
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include "../support/job_world.hpp"
#include "../support/expected_hosts.hpp"
#include "../support/mesh_checks.hpp"
#include "../support/outcomes.hpp"

#if defined(TUTTI_MESH_TCP)
#include <tutti/transport/tcp.hpp>
using world_transport = tutti::tcp;
#else
using world_transport = tutti::shm;
#endif

using namespace tutti;
using tutti::test::contains;

namespace {
communicator<world_transport>& world() { return tutti::test::job_world<world_transport>(); }

/// Sets TUTTI_NODE_ID for the scope (every rank says which "host" it is on).
struct node_id {
  explicit node_id(const std::string& id) { ::setenv("TUTTI_NODE_ID", id.c_str(), 1); }
  ~node_id() { ::unsetenv("TUTTI_NODE_ID"); }
};
}  // namespace

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("mesh over processes: every collective on every axis of every shape matches the reference") {
  testing::report rep;
  tutti::test::check_meshes(world(), rep);
  CHECK_MESSAGE(rep.ok(), rep.text());
  CHECK(rep.checks() > 0);
}

#if defined(TUTTI_MESH_TCP)
TEST_CASE("mesh over tcp: the tp axis runs over shm inside each host, dp over tcp") {
  auto& w = world();
  REQUIRE(w.size() % 2 == 0);
  const int hosts = w.size() / 2;
  node_id here("host" + std::to_string(w.rank() / 2));  // ranks numbered host by host
  auto m = tutti::mesh<axis<"dp">, axis<"tp", shm>>(w, {hosts, 2});
  using M = decltype(m);
  static_assert(std::is_same_v<M::axis_communicator<"tp">, communicator<shm>>);
  static_assert(std::is_same_v<M::axis_communicator<"dp">, communicator<tcp>>);
  testing::report rep;
  tutti::test::check_axis<0, axis<"dp">>(m, rep, "tcp mesh");
  tutti::test::check_axis<1, axis<"tp", shm>>(m, rep, "tcp mesh");
  CHECK_MESSAGE(rep.ok(), rep.text());
}

TEST_CASE("mesh over tcp: on the hosts a script announces, tp over shm holds each host's ranks") {
  const auto labels = tutti::test::expected_hosts();  // set by tests/multiproc/netns.sh
  if (!labels) return;
  auto& w = world();
  const auto here = tutti::test::ranks_on_host_of(*labels, w.rank());
  const int per_host = static_cast<int>(here.size());
  REQUIRE(w.size() % per_host == 0);
  auto m = tutti::mesh<axis<"dp">, axis<"tp", shm>>(w, {w.size() / per_host, per_host});
  CHECK(tutti::test::members_of(m.axis<"tp">(), m) == here);
  testing::report rep;
  tutti::test::check_axis<0, axis<"dp">>(m, rep, "hosts mesh");
  tutti::test::check_axis<1, axis<"tp", shm>>(m, rep, "hosts mesh");
  CHECK_MESSAGE(rep.ok(), rep.text());
}

TEST_CASE("mesh over tcp: hosts whose ranks are not numbered host by host") {
  // TUTTI_NODE_ID stands in for hosts on one machine; on real (namespace) hosts it would claim
  // that ranks of two hosts share one, which shm cannot join.
  if (tutti::test::expected_hosts()) return;
  auto& w = world();
  REQUIRE(w.size() % 2 == 0);
  const int hosts = w.size() / 2;
  // Host h holds ranks h and h + hosts: the ranks of a tp slice of a 2 x hosts mesh.
  node_id here("host" + std::to_string(w.rank() % hosts));
  {
    auto m = tutti::mesh<axis<"tp", shm>, axis<"dp">>(w, {2, hosts});
    testing::report rep;
    tutti::test::check_axis<0, axis<"tp", shm>>(m, rep, "interleaved hosts");
    CHECK_MESSAGE(rep.ok(), rep.text());
  }
  // The other way round, shm would span hosts: config_error on every rank, naming two ranks
  // and their node keys; the communicator still works.
  try {
    (void)tutti::mesh<axis<"tp">, axis<"dp", shm>>(w, {2, hosts});
    FAIL_CHECK("a shm axis across hosts was accepted");
  } catch (const config_error& e) {
    CHECK_MESSAGE(contains(e.what(), "axis \"dp\" has a transport of one host, but its ranks 0 and 1 are on different hosts"), e.what());
    CHECK_MESSAGE(contains(e.what(), "'TUTTI_NODE_ID=host0' and 'TUTTI_NODE_ID=host1'"), e.what());
  }
  std::vector<int> v{1};
  w.all_reduce(view(v));
  CHECK(v[0] == w.size());
}
#endif

TEST_SUITE_END();
