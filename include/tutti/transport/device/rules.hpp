/// \file
/// The host-side rules of `tutti::cuda_ipc` that need no device, as pure functions and small
/// classes, so that they are tested on the CPU (tests/device/rules.cpp):
///
/// - what a kernel's barrier reports (one slot per block, in host-mapped memory) and how a
///   request settles on its event and those reports: a report of the request's calls fails it,
///   whether or not the kernel has ended (a block that gives up ends its kernel cleanly);
/// - the kernels' deadline, shorter than the host's, so that a late peer is named by the
///   kernel's report before the host's own deadline says only "did not finish";
/// - which peers share this process (per peer, by pid: in a job of several processes of several
///   threads each, a peer of this process is reached by its pointer, the others through CUDA IPC);
/// - the mappings of peers' allocations opened here, and the allocations this rank exported,
///   which it sweeps for the ones since freed so that its peers close their mappings;
/// - a bounded wait, for teardown (a dead peer's event must not hold a destructor forever).
///
/// Host code only: compiles without CUDA.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tutti/core/error.hpp"

namespace tutti::detail::device {

// ---- barriers: reports, generations, deadlines -----------------------------------------------

/// Why a block left a barrier without every peer.
enum class report_reason : unsigned int {
  none = 0,
  timed_out = 1,     ///< the kernels' deadline passed while it waited for `peer`
  peer_gave_up = 2,  ///< `peer` had given up (its own deadline, or its host failed): waiting is futile
  aborted = 3,       ///< this rank's host set its abort word (a failure here, or teardown)
};

/// A block's report of a barrier it left without every peer (host-mapped memory, one slot per
/// block). Within a kernel only the block's first thread to give up writes it (a claim in shared
/// memory), all fields first and `stamp` (the generation again) last, so that the host takes a
/// slot as a report of its call only when `stamp` lies in the call's generations and equals `gen`.
/// Slots are never cleared: a report of an earlier call has an earlier generation.
struct barrier_report {
  unsigned int reason;      ///< a report_reason
  int rank, peer, block;    ///< who waited, for whom, in which block
  unsigned long long gen;   ///< which barrier
  unsigned long long seen;  ///< the peer's flag when it gave up
  unsigned long long stamp; ///< `gen`, written last
};

/// Report slots: one per block of a kernel with barriers (at most 64 blocks).
inline constexpr int report_slots = 64;

/// The words of a rank's flags: one generation per block, then the word it sets when it gives
/// up (a block of one of its kernels left a barrier, or its host failed). Peers' barriers read
/// it and stop waiting for a rank that will not come.
inline constexpr int flag_blocks_max = 64;
inline constexpr int gave_up_word = flag_blocks_max;
inline constexpr std::size_t flag_bytes = 2 * flag_blocks_max * sizeof(unsigned long long);  // 16-byte multiple

/// The barriers of call number `call` (1, 2, ...) have generations first_generation(call) + 0..2,
/// all below first_generation(call + 1): 4 per call, never reused.
constexpr std::uint64_t first_generation(std::uint64_t call) noexcept { return 4 * call + 1; }

/// The kernels' deadline for a host deadline `host`: a quarter earlier, by at most 2 s, so that
/// a block that times out has reported (and its kernel ended) before the host gives up on the
/// request: the report names the peer. At least 1 ms.
inline unsigned long long kernel_timeout_ns(std::chrono::milliseconds host) noexcept {
  const auto margin = std::min(host / 4, std::chrono::milliseconds(2000));
  const auto k = std::max(host - margin, std::chrono::milliseconds(1));
  return static_cast<unsigned long long>(k.count()) * 1000000ull;
}

/// A failure of device work as the host raises it.
struct device_failure {
  errc code = errc::aborted;
  std::string text;
};

/// The exception for `f`: timeout_error, peer_lost, or error(aborted).
inline std::exception_ptr to_exception(const device_failure& f) {
  switch (f.code) {
    case errc::timeout: return std::make_exception_ptr(timeout_error(f.text));
    case errc::peer_lost: return std::make_exception_ptr(peer_lost(f.text));
    default: return std::make_exception_ptr(error(f.code, f.text));
  }
}

/// The first report in `slots` (n of them) of the calls [first_call, last_call], as the failure
/// a request raises; none when no block of those calls gave up. `kernel_timeout`: the kernels'
/// deadline, for the text. Reads the slots as the device writes them (volatile: host-mapped).
inline std::optional<device_failure> read_reports(const barrier_report* slots, int n, std::uint64_t first_call,
                                                  std::uint64_t last_call, std::chrono::milliseconds kernel_timeout) {
  if (!slots || first_call > last_call) return std::nullopt;
  const std::uint64_t lo = first_generation(first_call), hi = first_generation(last_call + 1);
  for (int b = 0; b < n; ++b) {
    const auto& v = const_cast<const volatile barrier_report&>(slots[b]);
    const unsigned long long stamp = v.stamp;
    if (stamp < lo || stamp >= hi) continue;
    std::atomic_thread_fence(std::memory_order_acquire);
    const auto reason = static_cast<report_reason>(v.reason);
    const int rank = v.rank, peer = v.peer, block = v.block;
    const unsigned long long gen = v.gen, seen = v.seen;
    if (gen != stamp || reason == report_reason::none) continue;  // being rewritten: not this call's
    const std::string where = "(block " + std::to_string(block) + ", generation " + std::to_string(gen) +
                              ", its flag at " + std::to_string(seen) + ")";
    const std::string r = "rank " + std::to_string(rank), p = "rank " + std::to_string(peer);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g s", static_cast<double>(kernel_timeout.count()) / 1000.0);
    switch (reason) {
      case report_reason::timed_out:
        return device_failure{errc::timeout, r + " waited at a device barrier for " + p + " " + where +
                                                 " until the kernels' deadline (" + secs + "): " + p +
                                                 "'s kernel never arrived (its process gone or stopped, its stream "
                                                 "blocked, or the device too full to run every rank's kernel at once)"};
      case report_reason::peer_gave_up:
        return device_failure{errc::peer_lost, r + " left a device barrier " + where + " because " + p +
                                                   " gave up (its kernel's deadline passed or its host failed; " + p +
                                                   "'s error says why)"};
      default:
        return device_failure{errc::aborted, r + " left a device barrier " + where + " waiting for " + p +
                                                 ": this rank's host aborted its device work"};
    }
  }
  return std::nullopt;
}

// ---- a request's poll ------------------------------------------------------------------------

/// What the event recorded after a request's work says.
enum class work_state { pending, done, failed };

/// What a poll of a request decides.
struct poll_decision {
  enum class kind { pending, success, failure } k = kind::pending;
  device_failure failure;
};

/// A poll of a request named `name`: its event's state (`cuda_error`: the error text when it
/// failed), whether its deadline `timeout` has passed (`late`) or the communicator was aborted
/// (`stopped`), and the report of its calls' barriers (`report`). A report fails the request
/// even when the work is done: a block that gives up ends its kernel without error, leaving the
/// output unreduced. While the work is pending a report fails it at once (the peer will not
/// come), before the host's deadline.
inline poll_decision decide_poll(work_state state, const std::string& cuda_error, bool late, bool stopped,
                                 const std::optional<device_failure>& report, const std::string& name,
                                 std::chrono::milliseconds timeout) {
  poll_decision d;
  auto fail = [&](errc code, std::string text) {
    d.k = poll_decision::kind::failure;
    d.failure = device_failure{code, name + ": " + std::move(text)};
    return d;
  };
  if (state == work_state::failed)
    return fail(errc::aborted, "the device work failed: " + cuda_error + (report ? " (" + report->text + ")" : ""));
  if (report) return fail(report->code, report->text);
  if (state == work_state::done) {
    d.k = poll_decision::kind::success;
    return d;
  }
  if (stopped) return fail(errc::aborted, "the communicator was aborted (communicator::abort) while its device work was pending");
  if (late) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g s", static_cast<double>(timeout.count()) / 1000.0);
    return fail(errc::timeout, std::string("the device work did not finish within ") + secs +
                                   " (its stream is blocked by earlier work, a peer never enqueued its part, or the "
                                   "device does not progress)");
  }
  return d;
}

// ---- who is where ----------------------------------------------------------------------------

/// Per rank: whether it runs in this process (its pid is `pids[me]`). Ranks of this process reach
/// each other's buffers and events by pointer; the others only through CUDA IPC handles (a
/// process cannot open its own IPC handles).
inline std::vector<char> same_process_peers(std::span<const std::int64_t> pids, int me) {
  std::vector<char> local(pids.size(), 0);
  for (std::size_t q = 0; q < pids.size(); ++q) local[q] = pids[q] == pids[static_cast<std::size_t>(me)];
  return local;
}
/// Whether every rank runs in this process (threads: one CUDA context per device, in-kernel
/// barriers by default).
inline bool all_local(std::span<const char> local) {
  return std::all_of(local.begin(), local.end(), [](char c) { return c != 0; });
}

// ---- peers' allocations mapped here, and this rank's exported ones ----------------------------

/// The mappings this rank opened of its peers' allocations (CUDA IPC), one per (peer, allocation
/// id, handle). A mapping stays open while its exporter keeps the allocation: the exporter sweeps
/// its exports and names the ones freed in its next records (`retired`), and the importer closes
/// them then; the rest close at teardown. `Handle` is trivially copyable (cudaIpcMemHandle_t).
template <class Handle>
class import_cache {
 public:
  struct entry {
    int peer;
    std::uint64_t id;
    Handle handle;
    void* base;
  };

  /// The mapping of `peer`'s allocation `id` (exported as `h`), opened by `open(h)` on a miss.
  template <class Open>
  void* find_or_open(int peer, std::uint64_t id, const Handle& h, Open&& open) {
    for (auto& e : entries_)
      if (e.peer == peer && e.id == id && std::memcmp(&e.handle, &h, sizeof h) == 0) return e.base;
    void* base = open(h);
    entries_.push_back({peer, id, h, base});
    return base;
  }

  /// Closes (`close(base)`) `peer`'s mappings of the allocations `ids` (0: no id); returns how
  /// many it closed.
  template <class Close>
  int retire(int peer, std::span<const std::uint64_t> ids, Close&& close) {
    int closed = 0;
    for (std::uint64_t id : ids) {
      if (id == 0) continue;
      for (auto it = entries_.begin(); it != entries_.end();)
        if (it->peer == peer && it->id == id) {
          close(it->base);
          it = entries_.erase(it);
          ++closed;
        } else {
          ++it;
        }
    }
    return closed;
  }

  template <class Close>
  void close_all(Close&& close) {
    for (auto& e : entries_) close(e.base);
    entries_.clear();
  }

  std::size_t size() const noexcept { return entries_.size(); }
  std::size_t size_of(int peer) const noexcept {
    return static_cast<std::size_t>(std::count_if(entries_.begin(), entries_.end(), [&](const entry& e) { return e.peer == peer; }));
  }

 private:
  std::vector<entry> entries_;
};

/// The allocations this rank exported to its peers (CUDA IPC), by the driver's buffer id, and
/// the ids of those found freed since, to be named to each peer that may have mapped them
/// (`retired_per_record` at a time): in a call's record, which every peer reads, or in a send's
/// offer, which only its receiver reads. So each retired id keeps the set of peers not yet told.
template <class Handle>
class export_registry {
 public:
  static constexpr int retired_per_record = 4;
  using retired = std::array<std::uint64_t, retired_per_record>;
  struct entry {
    std::uintptr_t base;
    std::size_t size;
    std::uint64_t id;
    Handle handle;
  };

  const entry* find(std::uint64_t id) const {
    for (const auto& e : entries_)
      if (e.id == id) return &e;
    return nullptr;
  }
  void add(const entry& e) { entries_.push_back(e); }

  /// Drops the exports whose allocation is gone (`alive(base, id)` false: the driver knows no
  /// allocation at `base`, or another one) and queues their ids for the peers in `peers` (a bit
  /// per rank: those that may have mapped them); returns how many it found.
  template <class Alive>
  int sweep(Alive&& alive, std::uint64_t peers) {
    int gone = 0;
    for (auto it = entries_.begin(); it != entries_.end();)
      if (!alive(it->base, it->id)) {
        if (peers) retired_.push_back({it->id, peers});
        it = entries_.erase(it);
        ++gone;
      } else {
        ++it;
      }
    return gone;
  }

  /// The next retired ids to name in a record every peer reads (0 where none); every peer counts
  /// as told.
  retired take_retired() { return take(~std::uint64_t{0}); }
  /// The next retired ids `peer` has not been told, for a message only it reads.
  retired take_retired_for(int peer) { return take(std::uint64_t{1} << peer); }

  std::size_t size() const noexcept { return entries_.size(); }
  /// Retired ids some peer has not been told yet.
  std::size_t pending() const noexcept { return retired_.size(); }

 private:
  struct gone {
    std::uint64_t id;
    std::uint64_t untold;  ///< a bit per peer
  };
  retired take(std::uint64_t whom) {
    retired out{};
    int n = 0;
    for (auto& g : retired_)
      if (n < retired_per_record && (g.untold & whom)) {
        out[static_cast<std::size_t>(n++)] = g.id;
        g.untold &= ~whom;
      }
    retired_.erase(std::remove_if(retired_.begin(), retired_.end(), [](const gone& g) { return g.untold == 0; }),
                   retired_.end());
    return out;
  }
  std::vector<entry> entries_;
  std::vector<gone> retired_;
};

// ---- teardown --------------------------------------------------------------------------------

/// Polls `done()` until it is true or `bound` has passed; whether it became true. For teardown:
/// the device work of a group whose peer died may wait on that peer's event forever, so a
/// destructor waits a bounded time and then leaves the memory that work may still touch.
template <class Done>
bool wait_bounded(Done&& done, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (i < 100) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

/// How long a destructor waits for its group's device work: the communicator's deadline, at most 10 s.
inline std::chrono::milliseconds teardown_bound(std::chrono::milliseconds timeout) noexcept {
  return std::min(timeout, std::chrono::milliseconds(10000));
}

}  // namespace tutti::detail::device
