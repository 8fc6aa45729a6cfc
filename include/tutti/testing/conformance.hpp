/// \file
/// The transport conformance suite: the contract every tutti transport keeps, as one executable
/// check that the author of a transport runs against it (and that tutti's own tests run against
/// inproc, shm, tcp and mpi).
///
///     #include <tutti/testing/conformance.hpp>
///
///     // ranks as threads of this process (a transport built on inproc, like
///     // examples/custom_transport.cpp):
///     auto rep = tutti::testing::conformance_over_threads<my_transport>(
///         [](int n, auto&& body) { tutti::inproc::run_wrapped(n, wrap, body); });
///     if (!rep.ok()) { std::puts(rep.text().c_str()); return 1; }
///
///     // ranks as processes (every rank of the job calls it; rank 0's report has everything):
///     tutti::testing::report rep;
///     auto run = tutti::testing::make_process_runner(world, [] { return fresh_communicator(); });
///     tutti::testing::check_transport<tutti::testing::every_algorithm>(run, rep);
///
/// What it checks (each part is also a function of its own, for a test per part):
/// 1. every collective and v-collective, with every algorithm that has it on the transport, at
///    each world size, counts 0, 1, fewer than the ranks and not divisible by them, zero counts,
///    one rank holding everything, 16 MiB in all, against a reference (testing/collectives.hpp);
/// 2. `mismatch_error` naming both ranks and both values for every way ranks can disagree about a
///    call: count, element type, op, root, order of calls, the v-collectives' counts, and point
///    to point (testing/mismatch.hpp);
/// 3. `timeout_error` naming a silent peer, `peer_lost` naming a rank that fails, `abort()`
///    releasing a blocked call within about 20 ms, one rank's usage error failing the call on
///    every rank, and a communicator used from two threads at once (testing/failures.hpp);
/// 4. the non-blocking twins: the blocking results, 64 in flight, blocking calls ordered after
///    posted ones, `wait_all`/`wait_any`, and `mismatch_error` among pending operations that
///    disagree (testing/nonblocking.hpp);
/// 5. reproducible reductions: `op::ordered` bitwise the serial fold in rank order with every
///    algorithm, fused and unfused, and plain sums shown to differ (testing/ordered.hpp);
/// 6. point-to-point matched by source and tag, where the transport models `matched_p2p`:
///    any posting order, 64 outstanding, `any_source`/`any_tag`, shorter messages, and the
///    receive's errors (testing/p2p.hpp).
///
/// A case that hangs ends the process with "tutti::testing: HANG: ..." on stderr: a transport
/// that hangs fails loudly instead of stalling its test suite.
#pragma once

#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/testing/collectives.hpp"
#include "tutti/testing/failures.hpp"
#include "tutti/testing/mismatch.hpp"
#include "tutti/testing/p2p.hpp"
#include "tutti/testing/nonblocking.hpp"
#include "tutti/testing/ordered.hpp"
#include "tutti/testing/outcomes.hpp"
#include "tutti/testing/report.hpp"

namespace tutti::testing {

/// Every algorithm tutti has; the checks skip those without a schedule on the transport.
using every_algorithm = std::tuple<algo::ring, algo::tree, algo::recursive_doubling, algo::direct, algo::shared_memory,
                                   algo::native, algo::automatic>;

/// Which parts to run, and how hard.
struct options {
  bool results = true;           ///< part 1: results against the reference
  bool every_type = true;        ///< part 1 with nine element-type/op pairs (false: four)
  bool large = true;             ///< part 1's 16 MiB v-collectives
  bool mismatches = true;        ///< part 2
  bool failures = true;          ///< part 3
  bool nonblocking = true;       ///< part 4
  bool ordered = true;           ///< part 5
  bool p2p = true;               ///< part 6
  std::chrono::milliseconds deadline{5000};        ///< the timeout of the communicators in parts 2 and 3
  std::chrono::milliseconds silent_deadline{300};  ///< the timeout of the silent-peer case
  std::chrono::milliseconds abort_within{20};      ///< how soon abort() must release a blocked call
};

/// Part 1 for every algorithm of `Algorithms` (a std::tuple of algorithm types).
template <class Algorithms, class Runner>
void check_results(Runner& run, report& rep, const options& o = {}) {
  each_type<Algorithms>([&](auto a) {
    using A = decltype(a);
    auto body = [&](auto& comm, report& r) {
      comm.set_timeout(std::chrono::seconds(120));
      check_every_type<A>(comm, r, o.every_type);
    };
    run.each(body, rep, "results(" + std::string(A::name) + ") on " + std::to_string(run.size()) + " ranks");
  });
  if (o.large) {
    auto body = [&](auto& comm, report& r) {
      comm.set_timeout(std::chrono::seconds(120));
      each_type<Algorithms>([&](auto a) { check_large_v(comm, r, a); });
    };
    run.each(body, rep, "large v-collectives on " + std::to_string(run.size()) + " ranks");
  }
}

/// Part 2: every collective in the table, then point to point.
template <class Algorithms, class Runner>
void check_all_mismatches(Runner& run, report& rep) {
  if (run.size() < 2) return;
  for_each_collective([&](auto c) { check_mismatches<Algorithms>(run, rep, decltype(c)::value); });
  check_send_recv(run, rep);
}

/// Part 3.
template <class Runner>
void check_failures(Runner& run, report& rep, const options& o = {}) {
  if (run.size() < 2) return;
  check_silent_peer(run, rep, o.silent_deadline);
  check_lost_peer(run, rep);
  check_abort(run, rep, o.abort_within);
  for_each_collective([&](auto c) { check_one_rank_usage<decltype(c)::value>(run, rep); });
  check_concurrent_use(run, rep);
}

/// Part 4.
template <class Runner>
void check_nonblocking(Runner& run, report& rep) {
  auto body = [&](auto& comm, report& r) {
    comm.set_timeout(std::chrono::seconds(120));
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{70000}}) check_nonblocking_results(comm, r, n);
    check_many_in_flight(comm, r);
    check_fused(comm, r);
    check_p2p_batch(comm, r);
    check_groups_in_flight(comm, r);
  };
  run.each(body, rep, "non-blocking operations on " + std::to_string(run.size()) + " ranks");
  check_nonblocking_mismatches(run, rep);
}

/// Part 5 (`o.large`: with the 1 and 16 MiB all_reduces).
template <class Algorithms, class Runner>
void check_reproducible(Runner& run, report& rep, const options& o = {}) {
  auto body = [&](auto& comm, report& r) {
    comm.set_timeout(std::chrono::seconds(120));
    check_ordered<Algorithms>(comm, r, o.large);
  };
  run.each(body, rep, "reproducible reductions on " + std::to_string(run.size()) + " ranks");
}

/// The whole suite on one runner (one world size).
template <class Algorithms = every_algorithm, class Runner>
void check_transport(Runner& run, report& rep, const options& o = {}) {
  if (o.results) check_results<Algorithms>(run, rep, o);
  if (o.mismatches) check_all_mismatches<Algorithms>(run, rep);
  if (o.failures) check_failures(run, rep, o);
  if (o.nonblocking) check_nonblocking(run, rep);
  if (o.ordered) check_reproducible<Algorithms>(run, rep, o);
  if (o.p2p) check_point_to_point(run, rep, o.silent_deadline);
}

/// The whole suite with ranks as threads: `launch(n, body)` runs `body(comm)` on n threads,
/// each with a communicator<Transport> of a fresh group of n ranks. Part 1 runs at every size
/// of `sizes`, parts 2 and 3 at those of `failure_sizes`.
template <class Transport, class Algorithms = every_algorithm, class Launch>
report conformance_over_threads(Launch launch, const options& o = {},
                                std::vector<int> sizes = {1, 2, 3, 4, 5, 6, 7, 8, 9},
                                std::vector<int> failure_sizes = {2, 3, 5}) {
  report rep;
  for (int n : sizes) {
    auto run = make_thread_runner<Transport>(n, launch, o.deadline);
    options part = o;
    part.mismatches = part.failures = part.p2p = false;
    check_transport<Algorithms>(run, rep, part);
  }
  for (int n : failure_sizes) {
    auto run = make_thread_runner<Transport>(n, launch, o.deadline);
    options part = o;
    part.results = part.ordered = false;
    check_transport<Algorithms>(run, rep, part);
  }
  return rep;
}

}  // namespace tutti::testing
