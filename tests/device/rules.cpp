// The host-side rules of the device transports (tutti/transport/device/rules.hpp), on the CPU:
// how a request settles on its event and its barriers' reports, the kernels' deadline against
// the host's, the bounded teardown wait.
#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <tutti/transport/device/rules.hpp>

using namespace tutti;
namespace dv = tutti::detail::device;
using namespace std::chrono_literals;

namespace {

/// A report as a block of call `call` writes it (its first barrier's generation + `k`).
dv::barrier_report report(dv::report_reason why, int rank, int peer, int block, std::uint64_t call, int k = 0) {
  dv::barrier_report r{};
  r.reason = static_cast<unsigned>(why);
  r.rank = rank;
  r.peer = peer;
  r.block = block;
  r.gen = dv::first_generation(call) + static_cast<unsigned>(k);
  r.seen = r.gen - 1;
  r.stamp = r.gen;
  return r;
}

}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("device rules: a request whose kernel ended cleanly fails on a barrier's report, naming the peer") {
  std::array<dv::barrier_report, dv::report_slots> slots{};
  slots[5] = report(dv::report_reason::timed_out, 0, 1, 5, 7, 1);
  const auto rep = dv::read_reports(slots.data(), dv::report_slots, 7, 7, 2250ms);
  REQUIRE(rep);
  CHECK(rep->code == errc::timeout);
  CHECK(rep->text.find("rank 0 waited at a device barrier for rank 1") != std::string::npos);
  CHECK(rep->text.find("block 5") != std::string::npos);
  CHECK(rep->text.find("2.25 s") != std::string::npos);
  // The event says done: before, that was success with unreduced data; now the report fails it.
  const auto d = dv::decide_poll(dv::work_state::done, "", false, false, rep, "all_reduce(native) on rank 0", 3000ms);
  CHECK(d.k == dv::poll_decision::kind::failure);
  CHECK(d.failure.code == errc::timeout);
  CHECK(d.failure.text.find("all_reduce(native) on rank 0: rank 0 waited at a device barrier for rank 1") == 0);
  CHECK(dv::to_exception(d.failure) != nullptr);
  // Done without a report: success. Pending with a report: fails at once, before the deadline.
  CHECK(dv::decide_poll(dv::work_state::done, "", false, false, std::nullopt, "x", 3000ms).k == dv::poll_decision::kind::success);
  CHECK(dv::decide_poll(dv::work_state::pending, "", false, false, rep, "x", 3000ms).k == dv::poll_decision::kind::failure);
  CHECK(dv::decide_poll(dv::work_state::pending, "", false, false, std::nullopt, "x", 3000ms).k == dv::poll_decision::kind::pending);
  const auto late = dv::decide_poll(dv::work_state::pending, "", true, false, std::nullopt, "x", 3000ms);
  CHECK(late.failure.code == errc::timeout);
  CHECK(late.failure.text.find("did not finish within 3 s") != std::string::npos);
  const auto stop = dv::decide_poll(dv::work_state::pending, "", false, true, std::nullopt, "x", 3000ms);
  CHECK(stop.failure.code == errc::aborted);
  const auto bad = dv::decide_poll(dv::work_state::failed, "cudaErrorIllegalAddress (an illegal memory access)", false,
                                   false, std::nullopt, "x", 3000ms);
  CHECK(bad.failure.code == errc::aborted);
  CHECK(bad.failure.text.find("cudaErrorIllegalAddress") != std::string::npos);
}

TEST_CASE("device rules: reports belong to their calls by generation, and say why the block left") {
  std::array<dv::barrier_report, dv::report_slots> slots{};
  slots[0] = report(dv::report_reason::timed_out, 1, 0, 0, 3);  // an earlier call's
  CHECK_FALSE(dv::read_reports(slots.data(), dv::report_slots, 4, 6, 1000ms));
  CHECK(dv::read_reports(slots.data(), dv::report_slots, 2, 3, 1000ms));
  CHECK_FALSE(dv::read_reports(slots.data(), dv::report_slots, 5, 4, 1000ms));  // no call with barriers
  // A slot being rewritten (its stamp not yet its generation) is not taken.
  slots[1] = report(dv::report_reason::timed_out, 1, 0, 1, 5);
  slots[1].gen = dv::first_generation(6);
  CHECK_FALSE(dv::read_reports(slots.data(), dv::report_slots, 5, 5, 1000ms));
  slots[2] = report(dv::report_reason::peer_gave_up, 0, 1, 2, 5, 2);
  const auto gave_up = dv::read_reports(slots.data(), dv::report_slots, 5, 5, 1000ms);
  REQUIRE(gave_up);
  CHECK(gave_up->code == errc::peer_lost);
  CHECK(gave_up->text.find("because rank 1 gave up") != std::string::npos);
  slots[2] = report(dv::report_reason::aborted, 0, 1, 2, 5);
  const auto aborted = dv::read_reports(slots.data(), dv::report_slots, 5, 5, 1000ms);
  REQUIRE(aborted);
  CHECK(aborted->code == errc::aborted);
  CHECK(aborted->text.find("this rank's host aborted") != std::string::npos);
  // Generations of consecutive calls never overlap (4 per call, 3 barriers at most).
  CHECK(dv::first_generation(8) + 2 < dv::first_generation(9));
}

TEST_CASE("device rules: the kernels' deadline comes before the host's, by a quarter, at most 2 s") {
  CHECK(dv::kernel_timeout_ns(3000ms) == 2250ull * 1000000);
  CHECK(dv::kernel_timeout_ns(10000ms) == 8000ull * 1000000);
  CHECK(dv::kernel_timeout_ns(300000ms) == 298000ull * 1000000);
  CHECK(dv::kernel_timeout_ns(1ms) == 1000000ull);
  for (auto t : {1ms, 40ms, 3000ms, 60000ms})
    CHECK(dv::kernel_timeout_ns(t) <= static_cast<unsigned long long>(t.count()) * 1000000);
  for (auto t : {40ms, 3000ms, 60000ms})
    CHECK(dv::kernel_timeout_ns(t) < static_cast<unsigned long long>(t.count()) * 1000000);
}

TEST_CASE("device rules: teardown waits a bounded time for device work that never ends") {
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(dv::wait_bounded([] { return false; }, 50ms));
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 50ms);
  CHECK(took < 2s);
  int polls = 0;
  CHECK(dv::wait_bounded([&] { return ++polls == 3; }, 10s));
  CHECK(polls == 3);
  CHECK(dv::teardown_bound(300000ms) == 10000ms);
  CHECK(dv::teardown_bound(3000ms) == 3000ms);
}

TEST_SUITE_END();
