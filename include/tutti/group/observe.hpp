/// \file
/// Seeing what a communicator does: hooks for the user's own tools (`communicator::on_start`,
/// `on_end`, `on_error`), counters (`communicator::stats()`), and a timeline trace
/// (`TUTTI_TRACE=dir`, Chrome trace-event JSON that Perfetto and chrome://tracing open).
///
/// All three hang off the one place every operation passes through (`communicator::recorded`,
/// beside the flight recorder), so they see collectives, point to point, fused batches and
/// the checks alike, blocking or posted. The counters cost a few stores per call and reuse the
/// flight recorder's clock readings; the hooks and the trace cost one test of a pointer when
/// none is set. Time a rank spends waiting for a peer is counted where every transport waits
/// (`toolkit::wait_until`), and only in a wait that did not find its data at the first look.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/detail/flight_recorder.hpp"

namespace tutti {

/// One operation, as the hooks see it (and the trace writes it).
struct op_event {
  std::string_view name;          ///< "all_reduce", "send", "recv", "new_group/split", ...
  const fingerprint* fp = nullptr;  ///< its fingerprint (collective, sequence, dtype, count, op, root or tag)
  std::string_view algorithm;     ///< the schedule that ran ("ring", ...; "p2p" for point to point)
  std::size_t bytes = 0;          ///< this rank's larger buffer of the call, in bytes
  int rank = 0;                   ///< this rank, in the communicator
  int peer = -1;                  ///< point to point: the other rank; -1 otherwise
  bool posted = false;            ///< it ran on the progress engine (an `i` call)
  std::int64_t start_ns = 0;      ///< CLOCK_REALTIME, so ranks' events line up across processes
  std::int64_t end_ns = 0;        ///< on_end and on_error; 0 in on_start
  const std::exception* error = nullptr;  ///< on_error: what the call raises
};

/// A hook: called on the thread that runs the operation (the progress engine's for `i` calls),
/// inside the call. It must not call the communicator; an exception it throws is reported on
/// stderr once and otherwise ignored (the peers are in the call already). Groups made after it
/// was set have copies of it, and groups may run on threads of their own: a hook shared that
/// way must be safe to call from several threads at once. `on_error` runs after the peers were
/// told of the failure.
using op_hook = std::function<void(const op_event&)>;

/// One kind of operation's totals on a communicator.
struct op_totals {
  std::string_view name;  ///< "all_reduce", "send", "recv", ...
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;  ///< summed `op_event::bytes`
  // A fused batch of all_reduces counts as one all_reduce of their total; a send and a receive
  // run as one step of a point-to-point batch count as one send of both sizes.
  std::chrono::nanoseconds time{0};  ///< summed from start to end, failed calls included
};

/// A communicator's counters since it was made (`communicator::stats()`).
struct comm_stats {
  int rank = 0;
  int size = 0;
  std::uint64_t context = 0;  ///< 0: the world
  std::vector<op_totals> ops;  ///< each kind of operation called at least once, in the collective table's order
  /// Per peer rank: time this rank's calls spent in the transport's waits for that peer (a wait
  /// that found its data at the first look counts nothing, and one that ended in an error is
  /// not counted). A full-duplex exchange's wait counts for the peer it receives from.
  std::vector<std::chrono::nanoseconds> waited;
  /// Waits for no one rank in particular (a phase every rank must reach, on the shared windows).
  std::chrono::nanoseconds waited_for_all{0};
  /// The peer waited for longest, -1 when no wait lasted.
  int slowest_peer = -1;

  /// The totals of `name` ("all_reduce", "send", ...), or null if it was never called.
  const op_totals* find(std::string_view name) const noexcept;
  /// A table, one line per kind of operation, then the waits per peer.
  std::string text() const;
};

namespace detail {

/// Where a counted operation goes: the scheduled collectives by their value, then these.
inline constexpr std::size_t kind_send = scheduled_count, kind_recv = scheduled_count + 1,
                             kind_group = scheduled_count + 2, kind_other = scheduled_count + 3,
                             op_kinds = scheduled_count + 4;
TUTTI_DECL std::string_view kind_name(std::size_t kind) noexcept;
/// The kind of an operation of `c` other than point to point.
constexpr std::size_t kind_of(collective c) noexcept {
  const auto v = static_cast<std::size_t>(c);
  return v < scheduled_count ? v : c == collective::group ? kind_group : kind_other;
}

/// A communicator's counters. One thread at a time runs its operations and writes them (the
/// caller or its progress engine, never both: `ordered()`), so writes are plain relaxed stores;
/// `stats()` may read them from another thread meanwhile.
class op_counters {
 public:
  explicit op_counters(int size) : s_(std::make_unique<state>(size)) {}
  void add(std::size_t kind, std::size_t bytes, std::int64_t ns) noexcept {
    totals& t = s_->kinds[kind];
    bump(t.calls, 1);
    bump(t.bytes, bytes);
    bump(t.ns, static_cast<std::uint64_t>(ns));  // CLOCK_REALTIME stepping back: summed as it came
  }
  /// What `wait_context::waited_ns` points to: index 0 for no peer in particular, 1 + peer.
  std::atomic<std::int64_t>* waits() noexcept { return s_->waited.get(); }
  /// Whether any operation was counted.
  bool active() const noexcept;
  comm_stats snapshot(int rank, std::uint64_t context) const;

 private:
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t by) noexcept {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  struct totals {
    std::atomic<std::uint64_t> calls{0}, bytes{0}, ns{0};
  };
  struct state {  // on the heap: the communicator moves, the waits' pointer stays
    explicit state(int n)
        : waited(std::make_unique<std::atomic<std::int64_t>[]>(static_cast<std::size_t>(n) + 1)), size(n) {}
    std::array<totals, op_kinds> kinds{};
    std::unique_ptr<std::atomic<std::int64_t>[]> waited;
    int size;
  };
  std::unique_ptr<state> s_;
};

/// The end of an operation begun at `m`: its record marked done or failed, and its count.
/// Returns the time. One call, out of line, as the recorder's end alone was before: the call
/// path around it stays as small (and as inlined) as without the counters.
TUTTI_DECL std::int64_t end_operation(flight_recorder& r, op_counters& c, const flight_mark& m, std::size_t kind,
                                      std::size_t bytes, bool ok) noexcept;

/// What is watching a communicator besides its counters: the user's hooks and the trace. Null
/// in the communicator while nothing is (the one test a call makes).
struct observers {
  op_hook start, end, error;
  bool trace = false;       ///< TUTTI_TRACE is set: every operation goes to the trace
  int trace_rank = 0;       ///< the job rank the trace files this communicator's events under
  std::uint64_t context = 0;
  bool empty() const noexcept { return !start && !end && !error && !trace; }
  /// The trace's snapshots of the per-peer waits (1 + size entries) when each operation in
  /// progress began, innermost last (a call may run another: new_group's all_gather).
  std::vector<std::vector<std::int64_t>> waits_at_start;
  void push_waits(const std::atomic<std::int64_t>* waits, int size) {
    std::vector<std::int64_t> w(static_cast<std::size_t>(size) + 1);
    for (std::size_t k = 0; k < w.size(); ++k) w[k] = waits[k].load(std::memory_order_relaxed);
    waits_at_start.push_back(std::move(w));
  }
  std::vector<std::int64_t> pop_waits() {
    if (waits_at_start.empty()) return {};
    std::vector<std::int64_t> w = std::move(waits_at_start.back());
    waits_at_start.pop_back();
    return w;
  }
};

/// Calls `h(e)`, reporting on stderr (once per process) an exception it throws.
TUTTI_DECL void call_hook(const op_hook& h, const op_event& e) noexcept;

/// The trace's directory (`TUTTI_TRACE`), read once; empty: no trace.
TUTTI_DECL const std::string& trace_dir();

/// Adds one finished operation to this process's trace (`TUTTI_TRACE`), with the time it waited
/// per peer since `waits_before` (the counters' per-peer totals when it began: 1 + size entries;
/// may be null). The process's events go to `<dir>/tutti-trace-<host>-<pid>.json`, kept valid
/// JSON after every write; written when 256 KiB have gathered, when a communicator is
/// destroyed, on a failure and at exit.
TUTTI_DECL void trace_event(const observers& o, const op_event& e, const std::int64_t* waits_before,
                            const std::atomic<std::int64_t>* waits_now, int size);
/// Writes what the trace holds to its file.
TUTTI_DECL void trace_flush() noexcept;

}  // namespace detail
}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/group/observe.ipp"
#endif
