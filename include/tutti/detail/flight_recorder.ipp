/// \file
/// Definitions for tutti/detail/flight_recorder.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tutti/detail/flight_recorder.hpp"

namespace tutti::detail {

/// `clk`'s reading in nanoseconds.
inline std::int64_t clock_ns(clockid_t clk) noexcept {
  timespec ts{};
  ::clock_gettime(clk, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

#if defined(__x86_64__)
/// The recorder's clock reads CLOCK_REALTIME through the time-stamp counter where the processor
/// says it ticks at one rate on every core whatever the power state (CPUID's "invariant TSC"):
/// `rdtsc` costs some 11 ns here against 28 for `clock_gettime` under kvm-clock, and each call
/// reads the clock twice. The conversion is a pair (TSC, CLOCK_REALTIME) taken again every
/// 100 ms and a rate measured against CLOCK_MONOTONIC since the first pair (so it sharpens as
/// the process lives, and a step of the wall clock does not bend it), published under a
/// sequence lock: a reader never waits, and one that finds the pair being replaced (or runs in
/// a signal handler that interrupted its writer) reads `clock_gettime` instead. Until 10 ms
/// have passed, and again after the counter jumped (a migrated virtual machine), every read is
/// `clock_gettime`'s.
struct tsc_conversion {
  std::atomic<std::uint32_t> seq{0};  // odd while a writer replaces the rest
  std::atomic<std::int64_t> tsc{0}, ns{0}, mono{0};  // the last pair (and CLOCK_MONOTONIC then)
  std::atomic<double> ns_per_tick{0};                 // 0: not measured yet
  std::atomic<std::int64_t> renew{0};                 // the TSC at which the pair is taken again
  std::atomic<std::int64_t> base_tsc{0}, base_mono{0};  // the rate's first pair (0: none)
};
inline tsc_conversion tsc_now;

inline bool tsc_invariant() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;
}
inline const bool tsc_usable = tsc_invariant();

/// A read that found no valid pair: CLOCK_REALTIME itself, and the pair taken (or the rate
/// measured) where it is due and no other thread is at it.
TUTTI_COLD inline std::int64_t realtime_slow_ns() noexcept {
  tsc_conversion& k = tsc_now;
  std::uint32_t s = k.seq.load(std::memory_order_relaxed);
  if ((s & 1) || !k.seq.compare_exchange_strong(s, s + 1, std::memory_order_acquire)) return clock_ns(CLOCK_REALTIME);
  std::atomic_thread_fence(std::memory_order_release);
  // The three clocks read together, between two reads of the counter: a pair read across a
  // preemption or a signal handler (more than 20,000 ticks, some microseconds) is not taken.
  const auto before = static_cast<std::int64_t>(__builtin_ia32_rdtsc());
  const std::int64_t real = clock_ns(CLOCK_REALTIME), mono = clock_ns(CLOCK_MONOTONIC);
  const auto t = static_cast<std::int64_t>(__builtin_ia32_rdtsc());
  if (t - before > 20'000 || t < before) {
    k.seq.store(s + 2, std::memory_order_release);
    return real;
  }
  constexpr std::int64_t first_ns = 10'000'000, period_ns = 100'000'000, jump_ns = 1'000'000;
  const std::int64_t t0 = k.base_tsc.load(std::memory_order_relaxed), m0 = k.base_mono.load(std::memory_order_relaxed);
  double rate = k.ns_per_tick.load(std::memory_order_relaxed);
  // Since the last pair, the counter and CLOCK_MONOTONIC disagree by more than 1 ms: the
  // counter jumped (or went back), and the rate is measured again from here.
  const bool jumped =
      t <= t0 || (rate > 0 && std::abs(static_cast<double>(t - k.tsc.load(std::memory_order_relaxed)) * rate -
                                       static_cast<double>(mono - k.mono.load(std::memory_order_relaxed))) > jump_ns);
  if (t0 == 0 || jumped) {
    k.base_tsc.store(t, std::memory_order_relaxed);
    k.base_mono.store(mono, std::memory_order_relaxed);
    k.ns_per_tick.store(0, std::memory_order_relaxed);
  } else if (mono - m0 >= first_ns) {
    rate = static_cast<double>(mono - m0) / static_cast<double>(t - t0);
    k.tsc.store(t, std::memory_order_relaxed);
    k.ns.store(real, std::memory_order_relaxed);
    k.mono.store(mono, std::memory_order_relaxed);
    k.ns_per_tick.store(rate, std::memory_order_relaxed);
    k.renew.store(t + static_cast<std::int64_t>(static_cast<double>(period_ns) / rate), std::memory_order_relaxed);
  }
  k.seq.store(s + 2, std::memory_order_release);
  return real;
}
#endif

TUTTI_DECL std::int64_t realtime_ns() noexcept {
#if defined(__x86_64__)
  if (tsc_usable) {
    const auto t = static_cast<std::int64_t>(__builtin_ia32_rdtsc());
    const tsc_conversion& k = tsc_now;
    const std::uint32_t s = k.seq.load(std::memory_order_acquire);
    const std::int64_t t0 = k.tsc.load(std::memory_order_relaxed), ns0 = k.ns.load(std::memory_order_relaxed);
    const double rate = k.ns_per_tick.load(std::memory_order_relaxed);
    const std::int64_t renew = k.renew.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (!(s & 1) && rate > 0 && t >= t0 && t < renew && k.seq.load(std::memory_order_relaxed) == s)
      return ns0 + static_cast<std::int64_t>(static_cast<double>(t - t0) * rate);
    return realtime_slow_ns();
  }
#endif
  return clock_ns(CLOCK_REALTIME);
}

TUTTI_DECL line_buffer& line_buffer::num(std::uint64_t v, int width) noexcept {
  char d[24];
  int k = 0;
  do d[k++] = static_cast<char>('0' + v % 10); while ((v /= 10) != 0);
  for (int i = k; i < width; ++i) put("0");
  while (k) {
    const char c[1] = {d[--k]};
    put(std::string_view(c, 1));
  }
  return *this;
}

TUTTI_DECL void line_buffer::write_line(int fd) noexcept {
  b[n++] = '\n';
  for (std::size_t off = 0; off < n;) {
    const ssize_t k = ::write(fd, b + off, n - off);
    if (k <= 0) break;
    off += static_cast<std::size_t>(k);
  }
  n = 0;
}

TUTTI_COLD TUTTI_DECL void print_flight_slot(const flight_slot& slot, std::size_t max, int fd,
                                             const char* why) noexcept {
  const std::uint64_t total = slot.next.load(std::memory_order_acquire);
  const std::uint64_t shown = std::min<std::uint64_t>({total, max, flight_capacity});
  const std::int64_t now = realtime_ns();
  line_buffer l;
  l.put("[tutti rank ").num(static_cast<std::uint64_t>(slot.rank)).put("] flight recorder (").put(why)
      .put("): communicator ").num(slot.context).put(", rank ").num(static_cast<std::uint64_t>(slot.rank))
      .put(" of ").num(static_cast<std::uint64_t>(slot.size)).put(", last ").num(shown).put(" of ").num(total)
      .put(" operations");
  l.write_line(fd);
  for (std::uint64_t i = total - shown; i < total; ++i) {
    const flight_entry& e = slot.ring[i % flight_capacity];
    const std::uint32_t v0 = e.version.load(std::memory_order_acquire);
    flight_record r;
    std::memcpy(static_cast<void*>(&r), &e.r, sizeof r);
    std::atomic_thread_fence(std::memory_order_acquire);
    l.put("[tutti rank ").num(static_cast<std::uint64_t>(slot.rank)).put("]   ");
    if ((v0 & 1u) || e.version.load(std::memory_order_relaxed) != v0 || r.state == flight_state::empty) {
      l.put("(being written)");
      l.write_line(fd);
      continue;
    }
    const fingerprint& f = r.fp;
    l.put(collective_name(f.coll)).put("(").put(std::string_view(r.algorithm, strnlen(r.algorithm, sizeof r.algorithm)))
        .put(")");
    if (f.coll != collective::send_recv) l.put(" #").num(f.seq);
    // A uniform collective with counts in `shape` is a fused batch (communicator::fuse).
    const bool fused = f.shape && info(f.coll).counts != counts_kind::per_rank;
    l.put(fused ? " fused count=" : " count=").num(f.count).put(" dtype=");
    if (const char* dn = builtin_dtype_name(f.dtype)) l.put(dn);
    else l.put("user(").num(f.elem_size).put(" bytes)");
    if (f.op) l.put(" op=").put(op_name(f.op));
    if (f.root >= 0) l.put(f.coll == collective::send_recv ? " tag=" : " root=").snum(f.root);
    const std::int64_t s = r.start_ns / 1000000000, us = (r.start_ns % 1000000000) / 1000;
    l.put("  started ").num(static_cast<std::uint64_t>((s / 3600) % 24), 2).put(":")
        .num(static_cast<std::uint64_t>((s / 60) % 60), 2).put(":").num(static_cast<std::uint64_t>(s % 60), 2)
        .put(".").num(static_cast<std::uint64_t>(us), 6).put(" UTC");
    if (r.state == flight_state::running)
      l.put(", still running after ").snum((now - r.start_ns) / 1000000).put(" ms");
    else
      l.put(r.state == flight_state::done ? ", done in " : ", FAILED after ").snum((r.end_ns - r.start_ns) / 1000)
          .put(" us");
    l.write_line(fd);
  }
  if (const std::uint64_t w = slot.waiting.load(std::memory_order_relaxed)) {
    l.put("[tutti rank ").num(static_cast<std::uint64_t>(slot.rank)).put("]   and ").num(w)
        .put(w == 1 ? " posted operation" : " posted operations").put(" waiting to start");
    l.write_line(fd);
  }
}

TUTTI_DECL void flight_signal_handler(int) noexcept {
  const int saved = errno;
  for (const flight_slot& s : flight_table)
    if (s.used.load(std::memory_order_acquire)) print_flight_slot(s, flight_capacity, STDERR_FILENO, "SIGUSR1");
  errno = saved;
}

TUTTI_COLD TUTTI_DECL std::size_t flight_print_count() {
  static const std::size_t n = [] {
    const char* v = std::getenv("TUTTI_FLIGHT_RECORDER");
    if (!v || !*v) return std::size_t{8};
    char* end = nullptr;
    const unsigned long k = std::strtoul(v, &end, 10);
    if (*end != '\0' || v[0] == '-')
      throw config_error(std::string("TUTTI_FLIGHT_RECORDER='") + v +
                         "': expected how many operations to print on failure, like 8 (0: off)");
    return static_cast<std::size_t>(k);
  }();
  return n;
}

TUTTI_COLD TUTTI_DECL void install_flight_signal_handler() {
  static const bool installed = [] {
    struct sigaction old {};
    if (::sigaction(SIGUSR1, nullptr, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO))
      return false;
    struct sigaction sa {};
    sa.sa_handler = flight_signal_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    return ::sigaction(SIGUSR1, &sa, nullptr) == 0;
  }();
  (void)installed;
}

TUTTI_DECL flight_recorder::flight_recorder(int rank, int size, std::uint64_t context) {
  if (flight_print_count() == 0) return;
  for (flight_slot& s : flight_table) {
    bool expected = false;
    if (!s.used.load(std::memory_order_relaxed) &&
        s.used.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      s.rank = rank;
      s.size = size;
      s.context = context;
      s.next.store(0, std::memory_order_release);
      s.waiting.store(0, std::memory_order_release);
      slot_ = &s;
      break;
    }
  }
  install_flight_signal_handler();
  publish_flight_map();
}

TUTTI_DECL flight_recorder& flight_recorder::operator=(flight_recorder&& o) noexcept {
  if (this != &o) {
    release();
    slot_ = std::exchange(o.slot_, nullptr);
  }
  return *this;
}

TUTTI_DECL flight_mark flight_recorder::begin(const fingerprint& fp, std::string_view algorithm) noexcept {
  const std::int64_t now = realtime_ns();
  if (!slot_) return {0, now};
  const std::uint64_t i = slot_->next.load(std::memory_order_relaxed);
  if (algorithm.data() != name_from_ || algorithm.size() != name_size_) [[unlikely]]
    remember_name(algorithm);
  write(i, [&](flight_record& r) {
    r.fp = fp;
    std::memcpy(r.algorithm, name_, sizeof r.algorithm);
    r.start_ns = now;
    r.end_ns = 0;
    r.state = flight_state::running;
  });
  slot_->next.store(i + 1, std::memory_order_release);
  return {i, now};
}

TUTTI_COLD TUTTI_DECL void flight_recorder::remember_name(std::string_view algorithm) noexcept {
  const std::size_t n = std::min(algorithm.size(), sizeof name_ - 1);
  std::memset(name_, 0, sizeof name_);
  std::memcpy(name_, algorithm.data(), n);
  name_from_ = algorithm.data();
  name_size_ = algorithm.size();
}

TUTTI_DECL std::int64_t flight_recorder::end(std::uint64_t i, bool ok) noexcept {
  const std::int64_t now = realtime_ns();
  if (!slot_ || slot_->ring[i % flight_capacity].r.state != flight_state::running) return now;
  write(i, [&](flight_record& r) {
    r.end_ns = now;
    r.state = ok ? flight_state::done : flight_state::failed;
  });
  return now;
}

TUTTI_COLD TUTTI_DECL void flight_recorder::print(const char* why, std::size_t max) const noexcept {
  if (slot_ && max) print_flight_slot(*slot_, max, STDERR_FILENO, why);
}

TUTTI_COLD TUTTI_DECL void flight_recorder::save() const noexcept {
  if (slot_) save_flight_table();
}

/// `TUTTI_FLIGHT_MAP`'s directory, or null.
TUTTI_COLD TUTTI_DECL const char* flight_map_dir() noexcept {
  static const char* dir = [] {
    const char* d = std::getenv("TUTTI_FLIGHT_MAP");
    return d && *d ? d : nullptr;
  }();
  return dir;
}

/// Writes `n` bytes to a new `dir/<pid><suffix>`, whole or not at all (a temporary renamed).
TUTTI_COLD TUTTI_DECL void write_flight_file(const char* suffix, const void* data, std::size_t n) noexcept {
  const char* dir = flight_map_dir();
  if (!dir) return;
  line_buffer path, tmp;
  path.put(dir).put("/").num(static_cast<std::uint64_t>(::getpid())).put(suffix);
  tmp.put(std::string_view(path.b, path.n)).put(".tmp");
  path.b[path.n] = '\0';
  tmp.b[tmp.n] = '\0';
  const int fd = ::open(tmp.b, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const char* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t k = ::write(fd, p + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    done += static_cast<std::size_t>(k);
  }
  ::close(fd);
  if (done == n) ::rename(tmp.b, path.b);
  else ::unlink(tmp.b);
}

TUTTI_COLD TUTTI_DECL void publish_flight_map() noexcept {
  static std::atomic<bool> done{false};
  if (!flight_map_dir() || done.exchange(true)) return;
  // Under Yama's ptrace_scope 1 only an ancestor may read this process's memory. tuttirun is its
  // ranks' ancestor, but `tuttirun --dump` from another shell, or beside mpirun, is not: the
  // process allows any of its user's, as Open MPI's CMA and tutti's shm single copy do. Only for
  // a process that asked for the report (TUTTI_FLIGHT_MAP, which tuttirun sets).
  ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  const char* rank = nullptr;  // the launcher's: tuttirun, torchrun, Open MPI, MPICH (PMI), Slurm
  for (const char* var : {"RANK", "TUTTI_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if ((rank = std::getenv(var)) && *rank) break;
  line_buffer l;
  l.put("tutti-flight ").num(flight_layout_version).put(" ")
      .num(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&flight_table[0]))).put(" ")
      .num(sizeof flight_table).put(" ").put(rank && *rank ? std::string_view(rank) : std::string_view("-1")).put("\n");
  write_flight_file(".map", l.b, l.n);
}

TUTTI_COLD TUTTI_DECL void save_flight_table() noexcept {
  // One at a time (two communicators may fail at once on two threads, and would write the same
  // temporary file); a save already under way holds this one's records too.
  static std::atomic_flag saving = ATOMIC_FLAG_INIT;
  if (saving.test_and_set(std::memory_order_acq_rel)) return;
  write_flight_file(".table", static_cast<const void*>(&flight_table[0]), sizeof flight_table);
  saving.clear(std::memory_order_release);
}

TUTTI_COLD TUTTI_DECL std::string flight_recorder::text(std::size_t max) const {
  if (!slot_) return {};
  int fds[2];
  if (::pipe(fds) != 0) return {};
  print_flight_slot(*slot_, max, fds[1], "requested");  // at most 65 short lines: fits a pipe
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t k; (k = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(k));
  ::close(fds[0]);
  return out;
}

}  // namespace tutti::detail
