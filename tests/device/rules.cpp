// The host-side rules of the device transports (tutti/transport/device/rules.hpp), on the CPU:
// how a request settles on its event and its barriers' reports, the kernels' deadline against
// the host's, which peers share a process, the mappings of peers' allocations and their
// retirement, the bounded teardown wait; and (algo::native) that the ring a transport runs for
// what it cannot reduce itself (NCCL and user ops) agrees on the fingerprint first.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <tutti/transport/device/control.hpp>
#include <tutti/transport/device/rules.hpp>
#include <tutti/tutti.hpp>
#include <vector>

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

TEST_CASE("device rules: peers share this process by pid, one by one (processes of several threads)") {
  const std::vector<std::int64_t> pids = {100, 100, 200, 200};
  const auto at0 = dv::same_process_peers(pids, 0), at3 = dv::same_process_peers(pids, 3);
  CHECK(at0 == std::vector<char>{1, 1, 0, 0});
  CHECK(at3 == std::vector<char>{0, 0, 1, 1});
  CHECK_FALSE(dv::all_local(at0));
  const std::vector<std::int64_t> threads = {7, 7, 7};
  CHECK(dv::all_local(dv::same_process_peers(threads, 1)));
  const std::vector<std::int64_t> processes = {1, 2};
  CHECK(dv::same_process_peers(processes, 1) == std::vector<char>{0, 1});
}

TEST_CASE("device rules: a peer's freed allocations are unmapped here once it names them, and the mappings stay few") {
  struct handle {
    char bytes[64];
  };
  auto h = [](int k) {
    handle x{};
    x.bytes[0] = static_cast<char>(k);
    return x;
  };
  // Rank 1 (the exporter) and rank 0 (the importer), through 200 calls that each free the
  // previous call's buffer and allocate a new one, as the GPU checks do.
  dv::export_registry<handle> exporter;
  dv::import_cache<handle> importer;
  std::vector<std::uint64_t> alive;  // the exporter's live allocations, by id
  int opened = 0, closed = 0;
  std::uint64_t next_id = 1;
  const std::uint64_t flags_id = next_id++;  // its flags: alive throughout
  alive.push_back(flags_id);
  exporter.add({0x1000, 64, flags_id, h(0)});
  importer.find_or_open(1, flags_id, h(0), [&](const handle&) { return reinterpret_cast<void*>(++opened * 4096); });
  for (int call = 0; call < 200; ++call) {
    if (alive.size() > 1) alive.pop_back();  // the previous buffer is freed
    const std::uint64_t id = next_id++;
    alive.push_back(id);
    // The exporter's record: what it freed, then its buffer.
    exporter.sweep([&](std::uintptr_t, std::uint64_t i) { return std::find(alive.begin(), alive.end(), i) != alive.end(); },
                   std::uint64_t{1} << 0);
    const auto retired = exporter.take_retired();
    if (!exporter.find(id)) exporter.add({0x2000, 64, id, h(static_cast<int>(id))});
    // The importer: closes what was named, maps the new buffer.
    importer.retire(1, retired, [&](void*) { ++closed; });
    importer.find_or_open(1, id, h(static_cast<int>(id)), [&](const handle&) { return reinterpret_cast<void*>(++opened * 4096); });
    CHECK(importer.size_of(1) <= 3);
  }
  CHECK(opened == 201);
  CHECK(closed == 199);
  CHECK(importer.size() == 2);  // the flags and the last buffer
  CHECK(exporter.size() == 2);
  // A mapping already open is found, not opened again.
  importer.find_or_open(1, flags_id, h(0), [&](const handle&) { return reinterpret_cast<void*>(++opened * 4096); });
  CHECK(opened == 201);
  // Another peer's mapping of the same id is its own.
  importer.find_or_open(2, flags_id, h(0), [&](const handle&) { return reinterpret_cast<void*>(++opened * 4096); });
  CHECK(importer.size_of(2) == 1);
  CHECK(importer.retire(1, std::array<std::uint64_t, 2>{flags_id, 0}, [&](void*) { ++closed; }) == 1);
  CHECK(importer.size_of(2) == 1);
  importer.close_all([&](void*) { ++closed; });
  CHECK(importer.size() == 0);
}

TEST_CASE("device rules: freed allocations are named to every peer, a few per record, by records or by offers") {
  struct handle {
    char bytes[64];
  };
  dv::export_registry<handle> reg;
  for (std::uint64_t id = 1; id <= 6; ++id) reg.add({id * 0x1000, 16, id, {}});
  // Peers 1 and 2 may have mapped them (a bit each); all six are freed.
  CHECK(reg.sweep([](std::uintptr_t, std::uint64_t) { return false; }, 0b110) == 6);
  CHECK(reg.size() == 0);
  // An offer to peer 2 tells peer 2 only.
  const auto to2 = reg.take_retired_for(2);
  CHECK(to2 == std::array<std::uint64_t, 4>{1, 2, 3, 4});
  CHECK(reg.pending() == 6);
  // A record tells everyone: the four oldest any peer lacks, then the rest.
  const auto first = reg.take_retired();
  CHECK(first == std::array<std::uint64_t, 4>{1, 2, 3, 4});
  const auto second = reg.take_retired();
  CHECK(second == std::array<std::uint64_t, 4>{5, 6, 0, 0});
  CHECK(reg.pending() == 0);
  CHECK(reg.take_retired() == std::array<std::uint64_t, 4>{});
  // Nobody to tell (every peer in this process): nothing queued.
  reg.add({0x9000, 16, 9, {}});
  CHECK(reg.sweep([](std::uintptr_t, std::uint64_t) { return false; }, 0) == 1);
  CHECK(reg.pending() == 0);
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

// ---- algo::native's ring for what the transport cannot reduce --------------------------------

namespace {

/// A transport as tutti::nccl is to algo::native: collectives of its own, which reduce built-in
/// ops only (`native_reduces`), and messages that carry no fingerprint (NCCL's ncclSend/ncclRecv
/// move bytes); its agreement is the host all-gather of the fingerprint over a host transport of
/// its own (device::control, as tutti::nccl's shm beside NCCL's own channels).
class nccl_like {
 public:
  template <class T, class Op>
  static constexpr bool native_reduces = !std::is_same_v<Op, op::band>;

  nccl_like(inproc messages, inproc host) : inner_(std::move(messages)), host_(host), ctl_(std::move(host)) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  void send(int peer, const header& h, const std::byte* data, const wait_context& w) { inner_.send(peer, bare(h), data, w); }
  void recv(int peer, const header& h, std::byte* data, const wait_context& w) { inner_.recv(peer, bare(h), data, w); }
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& w) {
    inner_.sendrecv(to, bare(hs), sdata, from, bare(hr), rdata, w);
  }
  nccl_like sub(std::span<const int> members, std::uint64_t context) const {
    return nccl_like(inner_.sub(members, context), host_.sub(members, context));
  }
  void fail(std::string_view what) noexcept {
    inner_.fail(what);
    ctl_.fail(what);
  }

  bool native_agree(const fingerprint& fp, const wait_context& w, bool, bool = false) {
    ++agreements;
    ctl_.all_gather(fp, nullptr, nullptr, 0, w);
    return false;
  }
  // The native calls (NCCL's own): not reached by what this test calls.
  template <class... A>
  void native_broadcast(A&&...) { unused(); }
  template <class... A>
  void native_reduce(A&&...) { unused(); }
  template <class... A>
  void native_all_reduce(A&&...) { unused(); }
  template <class... A>
  void native_gather(A&&...) { unused(); }
  template <class... A>
  void native_all_gather(A&&...) { unused(); }
  template <class... A>
  void native_scatter(A&&...) { unused(); }
  template <class... A>
  void native_all_to_all(A&&...) { unused(); }
  template <class... A>
  void native_reduce_scatter(A&&...) { unused(); }
  template <class... A>
  void native_barrier(A&&...) { unused(); }
  template <class... A>
  void native_all_gather_v(A&&...) { unused(); }
  template <class... A>
  void native_gather_v(A&&...) { unused(); }
  template <class... A>
  void native_scatter_v(A&&...) { unused(); }
  template <class... A>
  void native_all_to_all_v(A&&...) { unused(); }
  template <class... A>
  void native_reduce_scatter_v(A&&...) { unused(); }

  int agreements = 0;

 private:
  [[noreturn]] static void unused() { throw usage_error("nccl_like: a native call the test does not make"); }
  /// NCCL's messages carry no fingerprint: here only what inproc needs to keep calls apart (the
  /// communicator and the call's number), nothing of what the call is (collective, count, type,
  /// op, root), so that ranks in different calls pass each other bytes.
  static header bare(const header& h) {
    fingerprint fp;
    fp.context = h.fp.context;
    fp.seq = h.fp.seq;
    return header{fp, h.bytes};
  }
  inproc inner_, host_;
  dv::control ctl_;
};
static_assert(native_collectives<nccl_like> && failure_notices<nccl_like>);

/// Runs `body(comm)` on n threads: communicator<nccl_like, algo::native>, its host side a world
/// of its own.
template <class Body>
void on_nccl_like(int n, Body&& body) {
  auto host = std::make_shared<inproc::world>(n);
  inproc::run_wrapped<algo::native>(
      n, [host](inproc t) {
        const int r = t.rank();
        return nccl_like(std::move(t), inproc(host, r));
      },
      std::forward<Body>(body));
}

}  // namespace

TEST_SUITE_BEGIN("multirank");

TEST_CASE("algo::native: the ring run for an op the transport lacks agrees on the fingerprint first") {
  ::setenv("TUTTI_TIMEOUT", "5", 1);
  // All agree: the ring runs, after one agreement per call.
  std::vector<int> agreed(3);
  on_nccl_like(3, [&](auto& comm) {
    std::vector<std::int32_t> v(10, 1 << comm.rank());
    comm.all_reduce(v, op::band{});
    comm.reduce(v, 0, op::band{});
    std::vector<std::int32_t> out(4);
    std::vector<std::int32_t> in(12, 7);
    comm.reduce_scatter(in, out, op::band{});
    agreed[static_cast<std::size_t>(comm.rank())] = comm.transport().agreements;
  });
  for (int a : agreed) CHECK(a == 3);
  // Rank 1 calls reduce where the others call all_reduce, same count, same op: the ring's
  // messages would not tell (NCCL's carry nothing); the agreement does, naming both calls.
  std::vector<std::string> errors(3);
  try {
    on_nccl_like(3, [&](auto& comm) {
      std::vector<std::int32_t> v(10, 1);
      try {
        if (comm.rank() == 1) comm.reduce(v, 0, op::band{});
        else comm.all_reduce(v, op::band{});
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(comm.rank())] = e.what();
        throw;
      }
    });
  } catch (const std::exception&) {
  }
  for (const auto& e : errors) {
    CAPTURE(e);
    CHECK(e.find("reduce") != std::string::npos);
    CHECK(e.find("all_reduce") != std::string::npos);
  }
  ::unsetenv("TUTTI_TIMEOUT");
}

TEST_SUITE_END();
