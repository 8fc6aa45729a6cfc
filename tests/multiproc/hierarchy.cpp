// tutti::hierarchy<shm, tcp> against the flat all_reduce over tcp and the naive reference. Run on
// several hosts of several ranks each: tests/multiproc/two_hosts.sh (two tuttirun --nnodes=2 on
// loopback) and tests/multiproc/netns.sh (hosts in network namespaces).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <tutti/group/hierarchy.hpp>
#include <tutti/transport/shm.hpp>
#include <tutti/transport/tcp.hpp>

#include "../support/collective_checks.hpp"

using namespace tutti;
using namespace tutti::test;

namespace {
hierarchy<shm, tcp>& job() {
  static hierarchy<shm, tcp> h = [] {
    auto x = hierarchy<shm, tcp>::from_env();
    x.world().set_timeout(std::chrono::seconds(60));
    return x;
  }();
  return h;
}

template <class T, class Op>
void check_against_flat(std::size_t n, const Op& op, const char* what) {
  auto& h = job();
  const int me = h.rank(), p = h.size();
  std::vector<T> v(n), flat(n), want(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = flat[i] = value<T>(me, i);
    T acc = value<T>(0, i);
    for (int r = 1; r < p; ++r) acc = op(acc, value<T>(r, i));
    want[i] = acc;
  }
  h.all_reduce(view(v), op);
  h.world().all_reduce(view(flat), op);
  CAPTURE(n);
  expect_equal(v, flat, (std::string(what) + ": hierarchical vs flat").c_str());
  expect_equal(v, want, (std::string(what) + ": hierarchical vs naive").c_str());
}
}  // namespace

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("hierarchy<shm, tcp>: the shape of the job") {
  auto& h = job();
  const auto env = job_env::from_env();
  CHECK(h.local_size() == env.local_world_size);
  CHECK(h.local_rank() == env.local_rank);
  CHECK(h.hosts() == env.world_size / env.local_world_size);
  CHECK(h.host() == env.rank / env.local_world_size);
  CHECK(h.cross().size() == h.hosts());
}

TEST_CASE("hierarchy<shm, tcp>: all_reduce equals the flat all_reduce and the naive reference") {
  auto& h = job();
  const std::size_t L = static_cast<std::size_t>(h.local_size()), p = static_cast<std::size_t>(h.size());
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, L - 1 + (L == 1), L + 1, 3 * p + 2, (std::size_t{1} << 20) + 3}) {
    check_against_flat<float>(n, op::sum{}, "float sum");
    check_against_flat<int>(n, op::max{}, "int max");
    check_against_flat<double>(n, op::min{}, "double min");
  }
}

TEST_CASE("hierarchy<shm, tcp>: the other collectives run over the world") {
  auto& h = job();
  std::vector<int> b(5, h.rank() == 1 ? 7 : 0);
  h.broadcast(view(b), 1);
  CHECK(b == std::vector<int>(5, 7));
  h.barrier();
}
