/// \file
/// The flight recorder: every communicator keeps its last `flight_capacity` operations (the
/// fingerprint, the algorithm, when it started and ended, and whether it completed or failed) in
/// a slot of a fixed, process-wide table. A rank prints its slots' records to stderr when a call
/// fails and when it receives SIGUSR1, so a user of a stuck or failed job sees on every rank which
/// operation it is in and which it finished last: the rank that is behind is the one whose last
/// sequence number is lowest. After the records, how many posted (non-blocking) operations wait
/// to start, which the progress engine counts in the slot.
///
/// `TUTTI_FLIGHT_RECORDER=N`: how many records a failure prints (default 8); 0 prints none and
/// installs no SIGUSR1 handler. The handler is installed only where SIGUSR1 has its default
/// disposition (which would kill the process), so a program's own handler is never replaced.
///
/// The table is static storage, so the SIGUSR1 handler never reads freed memory; records are
/// guarded by a sequence counter (odd while being written), and the printing is async-signal-safe
/// (no allocation, no stdio, only `write` and `clock_gettime`).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/dtype.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/core/op_id.hpp"

namespace tutti::detail {

inline constexpr std::size_t flight_capacity = 64;  ///< records kept per communicator
inline constexpr std::size_t flight_slots = 64;     ///< communicators recorded at once per process

enum class flight_state : std::uint8_t { empty, running, done, failed };

struct flight_record {
  fingerprint fp{};
  char algorithm[24]{};
  std::int64_t start_ns = 0;  ///< CLOCK_REALTIME, so ranks' records line up across processes
  std::int64_t end_ns = 0;
  flight_state state = flight_state::empty;
};

struct flight_entry {
  std::atomic<std::uint32_t> version{0};  ///< odd while the record is being written
  flight_record r;
};

struct flight_slot {
  std::atomic<bool> used{false};
  std::atomic<std::uint64_t> next{0};  ///< operations recorded so far
  std::atomic<std::uint64_t> waiting{0};  ///< posted (non-blocking) and not yet started
  int rank = 0;
  int size = 0;
  std::uint64_t context = 0;
  flight_entry ring[flight_capacity];
};

inline flight_slot flight_table[flight_slots];

/// The table's layout, as a launcher that reads it from outside the process checks it (tuttirun's
/// hang report): raised with any change to `flight_slot` or its parts.
inline constexpr std::uint32_t flight_layout_version = 1;

/// With `TUTTI_FLIGHT_MAP=dir` in the environment (tuttirun sets it), tells the launcher where
/// this process's table lies, once: `dir/<pid>.map` holds one line, "tutti-flight <version>
/// <address> <bytes> <job rank>" (the job rank the launcher set: `RANK`, `TUTTI_RANK`,
/// `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `PMIX_RANK`, `SLURM_PROCID`; -1 without), so that
/// it can read the table with `process_vm_readv` whether the process runs, hangs or is stopped.
TUTTI_DECL void publish_flight_map() noexcept;
/// With `TUTTI_FLIGHT_MAP=dir`: a copy of the whole table in `dir/<pid>.table`, made when a call
/// fails, so the launcher's report still has this process's records after it has exited.
TUTTI_DECL void save_flight_table() noexcept;

TUTTI_DECL std::int64_t realtime_ns() noexcept;

/// A line under construction, without allocation.
struct line_buffer {
  char b[320];
  std::size_t n = 0;
  line_buffer& put(std::string_view s) noexcept {
    for (char c : s)
      if (n < sizeof b - 1) b[n++] = c;
    return *this;
  }
  line_buffer& num(std::uint64_t v, int width = 0) noexcept;
  line_buffer& snum(std::int64_t v) noexcept {
    if (v < 0) return put("-").num(static_cast<std::uint64_t>(-v));
    return num(static_cast<std::uint64_t>(v));
  }
  void write_line(int fd) noexcept;
};

/// Writes `slot`'s last `max` records (oldest first) to `fd`, one line each.
void print_flight_slot(const flight_slot& slot, std::size_t max, int fd, const char* why) noexcept;

TUTTI_DECL void flight_signal_handler(int) noexcept;

/// `TUTTI_FLIGHT_RECORDER`, read once: records printed on failure (0: off, and no SIGUSR1).
std::size_t flight_print_count();

void install_flight_signal_handler();

/// Where `flight_recorder::begin` put an operation's record, and when.
struct flight_mark {
  std::uint64_t index;
  std::int64_t start_ns;
};

/// One communicator's slot; move-only. Without a free slot it records nothing.
class flight_recorder {
 public:
  flight_recorder() = default;
  flight_recorder(int rank, int size, std::uint64_t context);
  flight_recorder(flight_recorder&& o) noexcept : slot_(std::exchange(o.slot_, nullptr)) {}
  flight_recorder& operator=(flight_recorder&& o) noexcept;
  ~flight_recorder() { release(); }

  /// The count of posted operations not yet started, which the progress engine keeps (null
  /// without a slot).
  std::atomic<std::uint64_t>* waiting() noexcept { return slot_ ? &slot_->waiting : nullptr; }

  /// Records the start of an operation now; returns its index for `end` and the time
  /// (`realtime_ns()`, read without a slot too: the communicator's counters take it).
  flight_mark begin(const fingerprint& fp, std::string_view algorithm) noexcept;
  /// Marks record `i` done or failed now (a record already ended stays as it is); returns the time.
  std::int64_t end(std::uint64_t i, bool ok) noexcept;
  /// Prints the last `max` records to stderr (a failure's default: `TUTTI_FLIGHT_RECORDER`).
  void print(const char* why, std::size_t max = flight_print_count()) const noexcept;
  /// Saves the table for the launcher (`save_flight_table`), where it asked for it.
  void save() const noexcept;
  /// The last `max` records as print() writes them, for programs that log elsewhere.
  std::string text(std::size_t max = flight_capacity) const;
  bool active() const noexcept { return slot_ != nullptr; }

 private:
  template <class F>
  void write(std::uint64_t i, F f) noexcept {
    flight_entry& e = slot_->ring[i % flight_capacity];
    const std::uint32_t v = e.version.load(std::memory_order_relaxed);
    e.version.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    f(e.r);
    e.version.store(v + 2, std::memory_order_release);
  }
  void release() noexcept {
    if (slot_) slot_->used.store(false, std::memory_order_release);
    slot_ = nullptr;
  }
  /// `name_` from `algorithm` (cold: once per change of the algorithm's name).
  void remember_name(std::string_view algorithm) noexcept;
  flight_slot* slot_ = nullptr;
  /// The last algorithm's name as a record keeps it (NUL-padded), and the view it came from:
  /// a call names its algorithm by a string that lives as long as the program (the algorithm's
  /// `name`, a literal), mostly the same as the last call's, which then costs a fixed 24-byte
  /// copy rather than a measured one.
  const char* name_from_ = nullptr;
  std::size_t name_size_ = 0;
  char name_[sizeof flight_record::algorithm]{};
};

}  // namespace tutti::detail

#if defined(TUTTI_DEFINITIONS)
#include "tutti/detail/flight_recorder.ipp"
#endif
