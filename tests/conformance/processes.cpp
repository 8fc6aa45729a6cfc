// The installed conformance suite (tutti/testing/conformance.hpp) over a transport whose ranks
// are processes: tutti::shm, tutti::tcp or tutti::mpi (TUTTI_CONFORMANCE_TCP / _MPI; shm
// otherwise). Every rank runs the same cases; each case gets a fresh communicator of the whole
// job (a segment, a mesh with a store of its own, a duplicate of MPI_COMM_WORLD), as a failed
// one stays failed, and the world communicator, never part of a failure, gathers what each rank
// saw; rank 0 judges. ctest runs the results at 2..5 processes and the rest at 2 and 3:
//   tuttirun --nproc-per-node=3 tutti_conformance_shm -tc='*disagree*'
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <tutti/testing/conformance.hpp>
#include <tutti/tutti.hpp>
#include <vector>

#include "../support/job_world.hpp"
#include "../support/conformance.hpp"

#if defined(TUTTI_CONFORMANCE_TCP)
#include <tutti/transport/tcp.hpp>

#include "../support/sockets.hpp"
using transport_under_test = tutti::tcp;
#elif defined(TUTTI_CONFORMANCE_MPI)
#include <tutti/transport/mpi.hpp>
using transport_under_test = tutti::mpi;
#else
using transport_under_test = tutti::shm;
#endif

using namespace tutti;
using tutti::test::suite_options;

namespace {
communicator<transport_under_test>& world() { return tutti::test::job_world<transport_under_test>(std::chrono::seconds(120)); }

/// A fresh communicator of every rank of the job (every rank calls it together).
communicator<transport_under_test> fresh() {
#if defined(TUTTI_CONFORMANCE_TCP)
  auto& w = world();
  std::vector<int> port{w.rank() == 0 ? tutti::test::free_port() : 0};
  w.broadcast(view(port), 0);
  job_env job = job_env::from_env();
  job.master_addr = "127.0.0.1";
  job.master_port = port[0];
  config cfg = config::from_env();
  cfg.timeout = std::chrono::seconds(30);  // start-up only; each case sets its calls' deadline
  const char* token = std::getenv("TUTTI_JOB_TOKEN");
  return communicator<transport_under_test>(tcp::create(job, cfg, tcp_options::from_env(), token ? token : ""));
#elif defined(TUTTI_CONFORMANCE_MPI)
  return communicator<transport_under_test>(mpi::create(MPI_COMM_WORLD, std::chrono::seconds(30)));
#else
  static int cases = 0;
  const job_env job = job_env::from_env();
  return communicator<transport_under_test>(shm::create(job.rank, job.world_size, job.job_id + ".conformance." + std::to_string(++cases),
                                             shm_options::from_env(job.world_size), std::chrono::seconds(30)));
#endif
}

auto runner() { return testing::make_process_runner(world(), [] { return fresh(); }); }

}  // namespace

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("conformance: results of every collective and v-collective with every algorithm") {
  testing::report rep;
  auto run = runner();
  testing::check_results<testing::every_algorithm>(run, rep, suite_options());
  tutti::test::verdict(rep, world().rank() == 0);
}

TEST_CASE("conformance: every way ranks can disagree") {
  testing::report rep;
  auto run = runner();
  testing::check_all_mismatches<testing::every_algorithm>(run, rep);
  tutti::test::verdict(rep, world().rank() == 0);
}

TEST_CASE("conformance: a silent peer, a lost peer and abort") {
  testing::report rep;
  auto run = runner();
  testing::check_failures(run, rep, suite_options());
  tutti::test::verdict(rep, world().rank() == 0);
}

TEST_CASE("conformance: non-blocking operations") {
  testing::report rep;
  auto run = runner();
  testing::check_nonblocking(run, rep);
  tutti::test::verdict(rep, world().rank() == 0);
}

TEST_CASE("conformance: reproducible reductions") {
  testing::report rep;
  auto run = runner();
  auto o = suite_options();
  o.large = !tutti::test::fewer_types;  // the instrumented builds: no 1 and 16 MiB all_reduces
  testing::check_reproducible<testing::every_algorithm>(run, rep, o);
  tutti::test::verdict(rep, world().rank() == 0);
}

TEST_CASE("conformance: point-to-point matching") {
  testing::report rep;
  auto run = runner();
  testing::check_point_to_point(run, rep, suite_options().silent_deadline);
  tutti::test::verdict(rep, world().rank() == 0);
}

TEST_SUITE_END();
