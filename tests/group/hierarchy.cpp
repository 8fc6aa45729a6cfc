// Hierarchies over inproc threads, their layouts given as keys (each rank says which "host" and
// which "NUMA node" it is on): host by host, uneven hosts numbered out of order, three levels,
// levels that collapse, one host, one rank per host; every collective against the reference and
// against the flat collective (tests/support/hierarchy_checks.hpp, also run over processes).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../support/hierarchy_checks.hpp"
#include "../support/outcomes.hpp"

TEST_SUITE_BEGIN("multirank");

using namespace tutti;
using tutti::test::contains;
using tutti::test::rethrow_if;

namespace {

/// `keys[r]`: rank r's key per inner level; `local[r]`: the size of its innermost group.
template <class H>
void check_layout(const std::vector<std::vector<std::string>>& keys, const std::vector<int>& local, int hosts,
                  const std::string& label, const std::string& layout_says = "", bool large = false) {
  const int p = static_cast<int>(keys.size());
  auto body = [&](auto& comm) {
    auto world = comm.split(0, comm.rank());
    H h(std::move(*world), keys[static_cast<std::size_t>(comm.rank())]);
    CHECK_MESSAGE(h.local_size() == local[static_cast<std::size_t>(comm.rank())], label << ": " << h.layout());
    CHECK_MESSAGE(h.hosts() == hosts, label << ": " << h.layout());
    if (!layout_says.empty()) CHECK_MESSAGE(contains(h.layout(), layout_says), h.layout());
    testing::report rep;
    tutti::test::check_hierarchy(h, rep, label, large);
    CHECK_MESSAGE(rep.ok(), rep.text());
    CHECK(rep.checks() > 0);
  };
  const auto err = tutti::test::run_watched(p, body, label);
  CHECK_NOTHROW(rethrow_if(err));
}

std::vector<std::vector<std::string>> hosts_of(const std::vector<int>& host) {
  std::vector<std::vector<std::string>> k;
  for (int h : host) k.push_back({"host" + std::to_string(h)});
  return k;
}

using two_levels = hierarchy<inproc, inproc>;
using three_levels = hierarchy<level<inproc, scope::numa>, inproc, inproc>;

}  // namespace

TEST_CASE("hierarchy: 3 hosts of 2 ranks numbered host by host") {
  // Large enough for several pieces of the pipelined all_reduce, all_gather and reduce_scatter.
  check_layout<two_levels>(hosts_of({0, 0, 1, 1, 2, 2}), {2, 2, 2, 2, 2, 2}, 3, "2+2+2", "3 groups of 2+2+2", true);
}

TEST_CASE("hierarchy: uneven hosts 2+1+1 numbered out of host order") {
  // Host "a" holds ranks 1 and 3, host "b" rank 0, host "c" rank 2.
  check_layout<two_levels>(hosts_of({1, 0, 2, 0}), {1, 2, 1, 2}, 3, "2+1+1 out of order", "not numbered group by group");
}

TEST_CASE("hierarchy: 3 + 2 ranks on two hosts, interleaved") {
  check_layout<two_levels>(hosts_of({0, 1, 0, 1, 0}), {3, 2, 3, 2, 3}, 2, "3+2 interleaved");
  // Equal hosts numbered out of order: the pipelined paths place each piece by rank.
  check_layout<two_levels>(hosts_of({1, 0, 1, 0, 0, 1}), {3, 3, 3, 3, 3, 3}, 2, "3+3 interleaved", "", true);
}

TEST_CASE("hierarchy: three levels, NUMA nodes inside hosts, uneven and out of order") {
  // 7 ranks: host 0 has NUMA nodes {0, 4} and {2}; host 1 has {1, 3, 5} and {6}.
  const std::vector<int> host{0, 1, 0, 1, 0, 1, 1}, numa{0, 0, 1, 0, 0, 0, 1};
  std::vector<std::vector<std::string>> keys;
  for (std::size_t r = 0; r < host.size(); ++r)
    keys.push_back({"numa" + std::to_string(numa[r]), "host" + std::to_string(host[r])});
  check_layout<three_levels>(keys, {2, 3, 1, 3, 2, 3, 1}, 2, "3 levels", "level 1 (host): 2 groups of");
}

TEST_CASE("hierarchy: a level with the groups of the one below collapses") {
  // One NUMA node per host: the host level adds nothing.
  std::vector<std::vector<std::string>> keys;
  for (int r = 0; r < 6; ++r) keys.push_back({"numa", "host" + std::to_string(r / 3)});
  check_layout<three_levels>(keys, {3, 3, 3, 3, 3, 3}, 2, "collapsed level", "level 1 (host) collapses");
}

TEST_CASE("hierarchy: one host (nothing crosses the outer level) and one rank per host") {
  check_layout<two_levels>(hosts_of({0, 0, 0, 0, 0}), {5, 5, 5, 5, 5}, 1, "one host", "nothing crosses it");
  check_layout<two_levels>(hosts_of({0, 1, 2, 3}), {1, 1, 1, 1}, 4, "one rank per host");
  check_layout<two_levels>(hosts_of({0}), {1}, 1, "one rank");
}

TEST_CASE("hierarchy: cross() exists for equal groups only, and bad roots and sizes are usage errors") {
  auto body = [&](auto& comm) {
    auto world = comm.split(0, comm.rank());
    two_levels h(std::move(*world), {comm.rank() < 2 ? "a" : "b"});
    CHECK(h.cross().size() == 2);
    std::vector<int> small(3), in(2);
    CHECK_THROWS_AS(h.broadcast(view(small), 4), usage_error);
    CHECK_THROWS_AS(h.all_gather(view(in), view(small)), usage_error);
    auto w2 = comm.split(0, comm.rank());
    two_levels uneven(std::move(*w2), {comm.rank() < 3 ? "a" : "b"});
    CHECK_THROWS_AS((void)uneven.cross(), usage_error);
    h.barrier();
  };
  const auto err = tutti::test::run_watched(4, body, "hierarchy errors");
  CHECK_NOTHROW(rethrow_if(err));
}

TEST_SUITE_END();
