// The multi-rank test bodies again, as the processes of an MPI job over tutti::mpi: every
// point-to-point algorithm over MPI_Isend/MPI_Irecv, and algo::native over MPI's own collectives.
// Run under mpirun: `mpirun --allow-run-as-root --oversubscribe -np N tutti_mpi_tests` (ctest does
// so for N = 2..4).
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <tutti/transport/mpi.hpp>

#include "../support/job_world.hpp"
#include "../support/collective_checks.hpp"
#include "../support/observe_checks.hpp"
#include "../support/outcomes.hpp"
#include "../../examples/point_to_point.hpp"

using namespace tutti;
using namespace tutti::test;

namespace {
communicator<mpi>& world() { return tutti::test::job_world<mpi>(); }

/// A communicator of every rank, apart from the world, for tests that break theirs on purpose.
communicator<mpi> fresh(std::chrono::milliseconds timeout) {
  auto c = world().split(0, world().rank());
  REQUIRE(c.has_value());
  c->set_timeout(timeout);
  return std::move(*c);
}

/// What `f()` raised on this rank.
template <class F>
kind outcome(F&& f, std::string& what) {
  try {
    f();
  } catch (...) {
    return classify(std::current_exception(), what);
  }
  return kind::none;
}

/// Sets an environment variable for one scope, restoring what was there.
struct scoped_env {
  std::string name;
  std::optional<std::string> old;
  scoped_env(const char* n, const std::string& v) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    ::setenv(n, v.c_str(), 1);
  }
  ~scoped_env() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};
}  // namespace

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("over mpi: native's variants (unchecked, blocking) and native chosen by TUTTI_ALGO") {
  auto& comm = world();
  check_collectives<algo::native, float>(comm, 7, op::sum{}, algo::native{.check_fingerprint = false});
  check_collectives<algo::native, double>(comm, 7, op::max{}, algo::native{.blocking = true});
  check_collectives<algo::native, vec3>(comm, 3, vec3_max_abs{}, algo::native{.check_fingerprint = false, .blocking = true});
  check_collectives<algo::native, std::int64_t>(comm, 5, op::bxor{});
  check_collectives<algo::native, std::uint8_t>(comm, 9, op::band{});
  check_collectives<algo::native, float16>(comm, 6, op::sum{});
  check_collectives<algo::native, char>(comm, 4, op::max{});
  config cfg;
  cfg.timeout = std::chrono::seconds(60);
  cfg.algo_override = "native";
  communicator<mpi> by_name(mpi::create(comm.transport().native_handle(), cfg.timeout), algo::automatic{}, cfg);
  check_collectives<algo::automatic, double>(by_name, 11, op::prod{});
  check_collectives<algo::automatic, vec3>(by_name, 3, vec3_max_abs{});
  cfg.algo_override = "all_reduce=native,broadcast=tree";
  communicator<mpi> mixed(mpi::create(comm.transport().native_handle(), cfg.timeout), algo::automatic{}, cfg);
  check_collectives<algo::automatic, std::int32_t>(mixed, 13, op::min{});
}

TEST_CASE("over mpi: messages larger than MPI's eager limit, and payloads split into pieces") {
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
  comm.all_reduce(view(v), op::sum{}, algo::ring{.chunk_bytes = 100000});
  expect_equal(v, want, "ring all_reduce 12 MiB");
  fill();
  comm.all_reduce(view(v), op::sum{}, algo::recursive_doubling{});
  expect_equal(v, want, "rabenseifner all_reduce 12 MiB");
  fill();
  comm.all_reduce(view(v), op::sum{}, algo::native{});
  expect_equal(v, want, "native all_reduce 12 MiB");
  fill();
  std::vector<float> out(n);
  comm.all_reduce(view<const float>(v), view(out), op::sum{}, algo::native{});
  expect_equal(out, want, "native out-of-place all_reduce 12 MiB");
  fill();
  comm.broadcast(view(v), p - 1, algo::native{});
  std::vector<float> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = value<float>(p - 1, i);
  expect_equal(v, b, "native broadcast 12 MiB");

  // The split of payloads above 1 GiB into several MPI messages, at a size a test can afford.
  const std::size_t saved = detail::mpi_impl::max_piece;
  detail::mpi_impl::max_piece = 100003;
  fill();
  comm.all_reduce(view(v), op::sum{}, algo::ring{});
  detail::mpi_impl::max_piece = saved;
  expect_equal(v, want, "ring all_reduce 12 MiB in 100003-byte pieces");
}

TEST_CASE("over mpi: sub-groups are MPI communicators of their own") {
  auto& comm = world();
  std::vector<int> evens;
  for (int r = 0; r < comm.size(); r += 2) evens.push_back(r);
  auto group = comm.new_group(evens);
  CHECK(group.has_value() == (comm.rank() % 2 == 0));
  if (group) {
    CHECK(group->size() == static_cast<int>(evens.size()));
    CHECK(group->rank() == comm.rank() / 2);
    check_collectives<algo::automatic, float>(*group, 5, op::sum{});
    check_collectives<algo::native, std::int32_t>(*group, 3, op::max{});
  }
  auto halves = comm.split(comm.rank() < comm.size() / 2 ? 0 : 1, -comm.rank());
  REQUIRE(halves.has_value());
  check_collectives<algo::automatic, double>(*halves, 7, op::sum{});
  check_collectives<algo::native, double>(*halves, 7, op::sum{});
  // Reversed order (key = -rank): new rank 0 is the highest old rank of each half.
  const int first = comm.rank() < comm.size() / 2 ? comm.size() / 2 - 1 : comm.size() - 1;
  CHECK(halves->rank() == first - comm.rank());
  comm.barrier();
}

TEST_CASE("over mpi: destroying many sub-communicators is quick and takes no memory") {
  // Each destruction drains the notices nobody waited for. It read MPI_Get_count from a status
  // MPI_Iprobe had not written when no notice was there, and allocated and received what the
  // garbage said: 0.3-15 s and up to 1.66 GB per run (issue 26, item 8). The bounds are far
  // above what 100 take here (well under a second, a few MB): they catch that, not a slow run.
  const auto peak_kib = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<long>(u.ru_maxrss);
  };
  const long before = peak_kib();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    auto c = world().split(0, world().rank());
    REQUIRE(c.has_value());
    int x = 1;
    c->all_reduce(x);
    CHECK(x == c->size());
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_MESSAGE(took < 60, "100 sub-communicators made and destroyed in " << took << " s");
  CHECK_MESSAGE(peak_kib() - before < 128 * 1024, "peak resident memory grew by " << (peak_kib() - before) << " KiB");
}

TEST_CASE("over mpi: send and recv, with tags received in any order") {
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
  // Small messages (sent eagerly, so the sender does not wait): tag 1 first, received second.
  std::vector<int> one(10, 1), two(10, 2), got1(10), got2(10);
  if (me == 0) {
    comm.send(view(one), 1, 1);
    comm.send(view(two), 1, 2);
  } else if (me == 1) {
    comm.recv(view(got2), 0, 2);
    comm.recv(view(got1), 0, 1);
    CHECK(got1 == one);
    CHECK(got2 == two);
  }
  comm.barrier();
}

TEST_CASE("over mpi: the point-to-point examples: the tutorial's ring, a halo exchange, a manager") {
  auto& comm = world();
  CHECK(tutti_examples::run_all(comm));
  comm.barrier();
}

TEST_CASE("over mpi: ranks that disagree get mismatch_error or peer_lost, never a hang") {
  // Rank 0 passes one element more than the others.
  const std::size_t count = world().rank() == 0 ? 6 : 5;
  {
    auto comm = fresh(std::chrono::seconds(20));
    std::vector<float> v(count, 1.0f);
    std::string what;
    const kind k = outcome([&] { comm.all_reduce(view(v), op::sum{}, algo::native{}); }, what);
    INFO(what);
    CHECK(k == kind::mismatch);  // every rank sees the failed agreement
    CHECK(contains(what, "count=6"));
    CHECK(contains(what, "count=5"));
  }
  {
    auto comm = fresh(std::chrono::seconds(20));
    std::vector<float> v(count, 1.0f);
    std::string what;
    const kind k = outcome([&] { comm.all_reduce(view(v), op::sum{}, algo::ring{}); }, what);
    INFO(what);
    // The ranks that receive a bad header raise mismatch_error; the others hear of it (peer_lost).
    CHECK((k == kind::mismatch || k == kind::peer_lost));
    // Afterwards the communicator refuses work.
    CHECK_THROWS_AS(comm.barrier(), tutti::error);
  }
  world().barrier();
}

TEST_CASE("over mpi: a rank that never comes raises timeout_error naming it") {
  auto comm = fresh(std::chrono::milliseconds(500));
  if (comm.rank() != 0) {
    std::string what;
    const kind k = outcome([&] { comm.barrier(algo::direct{}); }, what);
    INFO(what);
    // direct's barrier: everyone reports to rank 0, which never listens.
    CHECK(k == kind::timeout);
    CHECK(contains(what, "rank 0"));
    CHECK(contains(what, "timed out after 0.5 s"));
  }
  world().barrier();
}

TEST_CASE("over mpi: MPI's errors return as tutti errors with MPI's text, and tags beyond MPI_TAG_UB are usage errors") {
  INFO("rank " << world().rank());
  auto comm = fresh(std::chrono::seconds(20));
  std::vector<float> v(4);
  fingerprint fp;
  fp.coll = collective::broadcast;
  std::string what;
  // A root outside the group: MPI_ERRORS_RETURN on our communicator turns MPI's argument check
  // (on by default: Open MPI's mpi_param_check) into a throw.
  const kind k = outcome([&] { comm.transport().native_broadcast(v.data(), v.size(), 99, fp, wait_context{}); }, what);
  INFO(what);
  CHECK(k == kind::aborted);
  CHECK(contains(what, "MPI_Ibcast failed: MPI_ERR_ROOT"));
  // A tag beyond MPI_TAG_UB, where there is one (Open MPI's bound is INT_MAX itself).
  void* ub = nullptr;
  int has = 0;
  MPI_Comm_get_attr(comm.transport().native_handle(), MPI_TAG_UB, &ub, &has);
  const int tag_ub = has && ub ? *static_cast<int*>(ub) : INT_MAX;
  if (tag_ub == INT_MAX) {
    MESSAGE("MPI_TAG_UB is INT_MAX: no tag lies beyond it");
  } else if (comm.rank() < 2) {
    const int peer = 1 - comm.rank();
    CHECK(outcome([&] { comm.send(view(v), peer, tag_ub + 1); }, what) == kind::usage);
    CHECK(contains(what, "MPI_TAG_UB"));
    // A usage error of a send breaks the communicator (its peer may wait for it already).
    CHECK(outcome([&] { comm.send(view(v), peer, 5); }, what) == kind::aborted);
    CHECK(contains(what, "MPI_TAG_UB"));
  } else {
    // The others learn of it at their next call: that usage error, naming rank 0 or 1 first.
    CHECK(outcome([&] { comm.barrier(); }, what) == kind::usage);
    CHECK((what.rfind("rank 0 failed with usage_error", 0) == 0 || what.rfind("rank 1 failed with usage_error", 0) == 0));
  }
  world().barrier();
}

TEST_CASE("over mpi: from_env checks the launcher's variables against MPI") {
  auto& comm = world();
  const int me = comm.rank(), p = comm.size();
  {
    scoped_env e("OMPI_COMM_WORLD_SIZE", std::to_string(p + 1));
    std::string what;
    CHECK(outcome([] { (void)mpi::from_env(); }, what) == kind::config);
    CHECK(contains(what, "OMPI_COMM_WORLD_SIZE=" + std::to_string(p + 1)));
  }
  {
    scoped_env e("PMI_RANK", std::to_string((me + 1) % p));
    std::string what;
    CHECK(outcome([] { (void)mpi::from_env(); }, what) == kind::config);
    CHECK(contains(what, "PMI_RANK"));
  }
  {
    // Under mpirun, Slurm's variables describe mpirun's daemons, not the ranks: ignored.
    scoped_env a("SLURM_PROCID", std::to_string(me + 1)), b("SLURM_NTASKS", "1000");
    auto t = mpi::from_env();
    CHECK(t.rank() == me);
    CHECK(t.size() == p);
  }
  comm.barrier();
}

TEST_CASE("over mpi: hooks see every operation and stats count calls and bytes and waits per peer") {
  check_observe(world());
}

TEST_SUITE_END();

TEST_CASE("over mpi: shrink needs ULFM (MPIX_Comm_shrink), without it a usage_error that says so") {
#if defined(MPIX_ERR_PROC_FAILED)
  MESSAGE("this MPI has ULFM: shrink is MPIX_Comm_shrink, not tested without a failure here");
#else
  std::string what;
  CHECK(outcome([&] { (void)world().shrink(); }, what) == kind::usage);
  CHECK(what.find("no ULFM") != std::string::npos);
  CHECK(what.find("MPIX_Comm_shrink") != std::string::npos);
  CHECK(what.find("tuttirun --max-restarts") != std::string::npos);
  // The communicator is untouched and works on.
  std::vector<int> v{world().rank()};
  world().all_reduce(view(v));
  CHECK(v[0] == world().size() * (world().size() - 1) / 2);
#endif
  auto g = fresh(std::chrono::seconds(30));
  auto sub = g.split(0, g.rank());
  REQUIRE(sub.has_value());
  CHECK(outcome([&] { (void)sub->shrink(); }, what) == kind::usage);
  CHECK(what.find("world communicator") != std::string::npos);
}
