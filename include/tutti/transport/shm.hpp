/// \file
/// `tutti::shm`: processes of one host, over one shared segment.
///
/// - Start-up (`shm::from_env`): rank 0 creates an anonymous memfd segment and passes it to the
///   other ranks over an abstract Unix socket named after the uid and the job id; every rank maps
///   and pre-faults it and closes the descriptor. Nothing has a name in any file system, so
///   nothing outlives the job, even after SIGKILL; the segment is not limited by /dev/shm.
/// - Point to point: one byte ring per ordered pair of ranks (head written only by the sender,
///   tail only by the receiver, each on its own cache line). A message is a 64-byte header
///   (fingerprint, byte count, magic) and the payload, padded to 64 bytes; it is written in
///   pieces as room appears, and a receiver reduces straight out of the ring (`zero_copy_recv`).
/// - Windows: every rank of the world communicator owns a window every rank can load from, and a
///   monotonically increasing phase counter that it alone writes, next to the fingerprint of the
///   phase (one cache line). The native schedules of `tutti::algo::shared_memory` run on these.
/// - Single copy: a start-up probe checks that every rank can read every peer's memory with
///   process_vm_readv (seccomp, Yama or different users may forbid it); where it can, peers read
///   large inputs straight out of each other's processes (`offer_source` / `read_source`).
/// - Waiting spins briefly, then yields, then sleeps on the rank's process-shared futex
///   "doorbell", which writers ring only when the reader sleeps; so 4 ranks on 2 cores progress.
///   While it sleeps a rank checks its deadline and its peers: a peer that died (pidfd) or
///   failed raises `peer_lost`; a peer blocked in a different collective raises `mismatch_error`.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/local_rendezvous.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/detail/futex.hpp"
#include "tutti/transport/transport.hpp"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace tutti {

/// Sizes of the shared segment (`TUTTI_SHM_RING_BYTES`, `TUTTI_SHM_WINDOW_BYTES`).
struct shm_options {
  std::size_t ring_bytes = std::size_t{256} << 10;    ///< per ordered pair of ranks
  std::size_t window_bytes = std::size_t{4} << 20;    ///< per rank, two halves
  std::size_t arena_bytes = std::size_t{256} << 20;   ///< per rank, for `allocate` (reserved, not touched)
  /// Single copy: peers read large inputs straight out of this process with `process_vm_readv`,
  /// where the start-up probe shows it works. `automatic`: unless ranks outnumber cores (the
  /// windows are faster there); `always`: even then (`TUTTI_SHM_SINGLE_COPY=1`); `never`
  /// (`TUTTI_SHM_SINGLE_COPY=0`).
  enum class mode { automatic, never, always };
  mode single_copy = mode::automatic;

  static shm_options from_env(int world_size) {
    shm_options o;
    if (world_size > 16) o.ring_bytes = std::size_t{64} << 10;  // p(p-1) rings: keep the total sane
    if (auto v = detail::env_int("TUTTI_SHM_RING_BYTES", 4096, 1L << 30)) o.ring_bytes = static_cast<std::size_t>(*v);
    if (auto v = detail::env_int("TUTTI_SHM_WINDOW_BYTES", 8192, 1L << 32)) o.window_bytes = static_cast<std::size_t>(*v);
    if (auto v = detail::env_int("TUTTI_SHM_ARENA_BYTES", 0, 1L << 40)) o.arena_bytes = static_cast<std::size_t>(*v);
    if (auto v = detail::env_int("TUTTI_SHM_SINGLE_COPY", 0, 1)) o.single_copy = *v ? mode::always : mode::never;
    o.arena_bytes = (o.arena_bytes + 4095) & ~std::size_t{4095};
    o.ring_bytes = (o.ring_bytes + 63) & ~std::size_t{63};
    o.window_bytes = (o.window_bytes + 127) & ~std::size_t{127};
    return o;
  }
};

namespace detail::shm_impl {

inline constexpr std::uint64_t segment_magic = 0x7475747469736d31ull;  // "tuttism1"
inline constexpr std::uint64_t message_magic = 0x6d73672d74747574ull;
inline constexpr std::size_t line = 64;

enum class rank_state : std::uint32_t { running = 0, failed = 1 };

/// Fingerprints travel as words of atomics, so readers and writers never race.
inline constexpr std::size_t fp_words = (sizeof(fingerprint) + 7) / 8;
inline void store_fp(std::atomic<std::uint64_t>* w, const fingerprint& fp) noexcept {
  std::uint64_t tmp[fp_words] = {};
  std::memcpy(tmp, &fp, sizeof fp);
  for (std::size_t i = 0; i < fp_words; ++i) w[i].store(tmp[i], std::memory_order_relaxed);
}
inline fingerprint load_fp(const std::atomic<std::uint64_t>* w) noexcept {
  std::uint64_t tmp[fp_words];
  for (std::size_t i = 0; i < fp_words; ++i) tmp[i] = w[i].load(std::memory_order_relaxed);
  fingerprint fp;
  std::memcpy(&fp, tmp, sizeof fp);
  return fp;
}

/// One rank's control block: each line has a single writer (the rank, except `sleepers`/bell).
struct control {
  alignas(line) std::atomic<std::uint32_t> state;
  std::atomic<std::int32_t> pid;
  char failure[line * 3 - 8];
  alignas(line) std::atomic<std::uint32_t> doorbell;  // bumped by whoever wakes this rank
  std::atomic<std::uint32_t> sleepers;               // > 0 while this rank may sleep on the bell
  alignas(line) std::atomic<std::uint64_t> phase;     // native phase counter
  std::atomic<std::uint64_t> phase_fp[fp_words];     // fingerprint of that phase
  std::atomic<std::uint64_t> fp_gen;                 // seqlock: 2g+1 while writing g's, 2g+2 after
  alignas(line) std::atomic<std::uint64_t> wait_gen;  // seqlock of the next fields (odd: writing)
  std::atomic<std::uint64_t> wait_fp[fp_words];      // what this rank is blocked in, if anything
  std::atomic<std::int32_t> wait_peer;               // the world rank it waits for there, or -1
  alignas(line) std::atomic<std::uint64_t> source[2];  // per phase parity: arena offset of the input, or none
  std::atomic<std::uint64_t> address[2];             // per phase parity: its address in the process, or 0
  alignas(line) std::atomic<std::uint64_t> probe_address;  // start-up: a word peers try to read
  std::atomic<std::int32_t> probe_result;            // 0: read every peer; errno of the first failure; -1: off; -2: too few cores
  std::atomic<std::uint32_t> startup_step;           // start-up barrier
  std::atomic<std::int32_t> probe_peer;              // the peer the first failure was on
  std::atomic<std::uint32_t> shrink_gen;             // shrink: how many times this rank entered it
  std::atomic<std::uint32_t> shrink_decided;         // shrink: the generation whose members follow
  std::atomic<std::uint64_t> shrink_members;         // shrink: bit r set: old rank r is in the new job
};
static_assert(sizeof(fingerprint) <= 48 && sizeof(control) == 8 * line);
inline constexpr std::uint64_t probe_magic = 0x7475747469636d61ull;  // "tutticma"
inline constexpr std::uint64_t no_source = ~std::uint64_t{0};

struct ring_ends {
  alignas(line) std::atomic<std::uint64_t> head;  // bytes published by the sender
  alignas(line) std::atomic<std::uint64_t> tail;  // bytes consumed by the receiver
};

struct segment_header {
  std::uint64_t magic;
  std::uint64_t bytes;
  std::int32_t world_size;
  std::uint32_t pad;
  std::uint64_t ring_bytes, window_bytes;
};

/// Where everything lives in the segment (every rank computes the same).
struct layout {
  std::size_t controls, rings, ring_stride, windows, arenas, total;
  shm_options opt;
  int p;
  layout(int world, shm_options o) : opt(o), p(world) {
    const auto P = static_cast<std::size_t>(world);
    controls = 4096;
    rings = controls + P * sizeof(control);
    ring_stride = sizeof(ring_ends) + o.ring_bytes;
    windows = (rings + P * (P > 1 ? P - 1 : 0) * ring_stride + 4095) & ~std::size_t{4095};
    arenas = windows + P * o.window_bytes;
    total = arenas + P * o.arena_bytes;
  }
  std::size_t ring(int src, int dst) const {  // ordered pair (src, dst), src != dst
    const int k = src * (p - 1) + (dst < src ? dst : dst - 1);
    return rings + static_cast<std::size_t>(k) * ring_stride;
  }
};

/// The mapping and what every transport of this process shares about it.
struct segment {
  layout lay;
  std::byte* base = nullptr;
  int world_rank = 0;
  std::vector<int> pids;
  std::vector<unique_fd> pidfds;
  std::uint64_t my_phase = 0;
  std::uint64_t compared_all = 0;  // the last phase whose every peer's fingerprint wait_all compared
  bool oversubscribed = false;
  std::vector<std::uint64_t> sent, received;  // local copies of my ring heads (per dst) and tails (per src)
  bool single_copy = false;                   // peers' inputs may be read with process_vm_readv
  std::string single_copy_note;               // why (not), for TUTTI_DEBUG=info
  std::vector<std::byte> staging[3];          // where single-copy reads land
  std::string job_id;                         // this job's rendezvous name (shrink derives new ones)

  std::byte* arena_base = nullptr;  // the arenas' mapping (not pre-faulted)
  std::mutex arena_mu;
  std::map<std::size_t, std::size_t> arena_free;  // offset -> bytes, in this rank's arena
  std::map<std::size_t, std::size_t> arena_used;

  segment(int world, shm_options o) : lay(world, o) {}
  ~segment() {
    if (base) ::munmap(base, lay.arenas);
    if (arena_base) ::munmap(arena_base, lay.total - lay.arenas);
  }
  std::byte* arena(int world_r) const {
    return arena_base + static_cast<std::size_t>(world_r) * lay.opt.arena_bytes;
  }
  control& ctl(int world_r) const {
    return reinterpret_cast<control*>(base + lay.controls)[world_r];
  }
  ring_ends& ends(int src, int dst) const { return *reinterpret_cast<ring_ends*>(base + lay.ring(src, dst)); }
  std::byte* ring_data(int src, int dst) const { return base + lay.ring(src, dst) + sizeof(ring_ends); }
  std::byte* window(int world_r) const {
    return base + lay.windows + static_cast<std::size_t>(world_r) * lay.opt.window_bytes;
  }

  /// Wakes `world_r` if it may be asleep. Call after publishing what it waits for.
  void ring_bell(int world_r) const noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    control& c = ctl(world_r);
    if (c.sleepers.load(std::memory_order_relaxed) > 0) {
      c.doorbell.fetch_add(1, std::memory_order_seq_cst);
      futex_wake_all(&c.doorbell);
    }
  }

  /// Whether world rank r's process is gone (it may have failed and still be alive otherwise).
  bool exited(int world_r) const {
    const auto r = static_cast<std::size_t>(world_r);
    if (r < pidfds.size() && pidfds[r]) {
      pollfd pf{pidfds[r].get(), POLLIN, 0};
      return ::poll(&pf, 1, 0) > 0;
    }
    return r < pids.size() && pids[r] > 0 && ::kill(pids[r], 0) != 0 && errno == ESRCH;
  }

  /// Empty when world rank r is alive; otherwise why it is not.
  std::string gone(int world_r) const {
    control& c = ctl(world_r);
    if (c.state.load(std::memory_order_acquire) == static_cast<std::uint32_t>(rank_state::failed)) {
      char msg[sizeof c.failure];
      std::memcpy(msg, c.failure, sizeof msg);
      msg[sizeof msg - 1] = '\0';
      return std::string("failed: ") + msg;
    }
    if (exited(world_r)) return "exited or was killed (pid " + std::to_string(pids[static_cast<std::size_t>(world_r)]) + ")";
    return {};
  }
};

}  // namespace detail::shm_impl

/// The shared-memory transport (see the file comment). Value type; copies share the mapping.
class shm {
 public:
  /// Joins the job described by the environment (`job_env::from_env`): every rank must be on
  /// this host (LOCAL_WORLD_SIZE == WORLD_SIZE). Waits for the others up to `TUTTI_TIMEOUT`.
  static shm from_env() { return create(job_env::from_env(), config::from_env()); }

  static shm create(const job_env& job, const config& cfg) {
    if (job.local_world_size != job.world_size)
      throw config_error("tutti::shm needs every rank on one host, but the environment (" + job.source + ") says " +
                         std::to_string(job.local_world_size) + " of " + std::to_string(job.world_size) +
                         " ranks run here; use tutti::tcp or a hierarchy across hosts");
    shm t = create(job.rank, job.world_size, job.job_id, shm_options::from_env(job.world_size), cfg.timeout);
    detail::log(log_level::info, cfg, job.rank, "shm: " + t.seg_->single_copy_note);
    return t;
  }

  static shm create(int rank, int world_size, const std::string& job_id, shm_options opt,
                    std::chrono::milliseconds timeout) {
    using namespace detail::shm_impl;
    auto seg = std::make_shared<segment>(world_size, opt);
    const std::string name = "tutti." + std::to_string(::getuid()) + "." + job_id;
    detail::rendezvous_result rv =
        rank == 0 ? detail::serve_segment(name, world_size, seg->lay.total, timeout)
                  : detail::join_segment(name, rank, world_size, seg->lay.total, timeout);
    // Control blocks, rings and windows are pre-faulted; the arenas only reserve address space.
    void* p = ::mmap(nullptr, seg->lay.arenas, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, rv.segment.get(), 0);
    if (p == MAP_FAILED)
      throw error(errc::config, "shm: cannot map " + std::to_string(seg->lay.arenas) + " bytes: " +
                                    detail::errno_text(errno));
    if (seg->lay.total > seg->lay.arenas) {
      void* a = ::mmap(nullptr, seg->lay.total - seg->lay.arenas, PROT_READ | PROT_WRITE, MAP_SHARED,
                       rv.segment.get(), static_cast<off_t>(seg->lay.arenas));
      if (a == MAP_FAILED) {
        ::munmap(p, seg->lay.arenas);
        throw error(errc::config, "shm: cannot map the arenas: " + detail::errno_text(errno));
      }
      seg->arena_base = static_cast<std::byte*>(a);
      seg->arena_free.emplace(0, opt.arena_bytes);
    }
    rv.segment.reset();  // the mapping keeps the memory; no descriptor or name remains
    seg->base = static_cast<std::byte*>(p);
    seg->world_rank = rank;
    seg->job_id = job_id;
    seg->pids = rv.pids;
    for (int pid : seg->pids) {
      const long fd = pid > 0 && pid != ::getpid() ? ::syscall(SYS_pidfd_open, pid, 0) : -1;
      seg->pidfds.emplace_back(static_cast<int>(fd));
    }
    seg->sent.assign(static_cast<std::size_t>(world_size), 0);
    seg->received.assign(static_cast<std::size_t>(world_size), 0);
    cpu_set_t cpus;
    const int ncpu = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    seg->oversubscribed = world_size > ncpu;
    // Pre-fault what this rank writes most: its window (first touch by its owner).
    std::memset(seg->window(rank), 0, opt.window_bytes);
    control& me = seg->ctl(rank);
    me.pid.store(::getpid(), std::memory_order_relaxed);
    me.state.store(0, std::memory_order_release);
    probe_single_copy(*seg, opt.single_copy, timeout);
    shm t;
    t.seg_ = std::move(seg);
    t.publish_waiting(std::nullopt);
    t.members_.resize(static_cast<std::size_t>(world_size));
    for (int i = 0; i < world_size; ++i) t.members_[static_cast<std::size_t>(i)] = i;
    t.rank_ = rank;
    return t;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }

  /// Whether peers read large inputs straight from this process (`process_vm_readv`), and why.
  bool single_copy() const noexcept { return seg_->single_copy && context_ == 0; }
  const std::string& single_copy_note() const noexcept { return seg_->single_copy_note; }

  shm sub(std::span<const int> members, std::uint64_t context) const {
    shm t = *this;
    t.context_ = context;
    std::tie(t.members_, t.rank_) = detail::pick_members(members_, rank_, members);
    return t;
  }

  // ---- point to point -------------------------------------------------------------------

  void send(int peer, const header& h, const std::byte* data, const wait_context& w) {
    outgoing out{peer, h, data};
    while (!progress(out)) wait_for(w, h, peer, -1, "to make room at", [&] { return room_changed(out); });
  }
  void recv(int peer, const header& h, std::byte* data, const wait_context& w) {
    copier c{data};
    recv_with(peer, h, c, w);
  }
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& w) {
    copier c{rdata};
    sendrecv_with(to, hs, sdata, from, hr, c, w);
  }
  void recv_with(int peer, const header& h, byte_consumer consume, const wait_context& w) {
    incoming in{peer, h, consume};
    while (!progress(in, w)) wait_for(w, h, peer, -1, "to receive from", [&] { return data_arrived(in); });
  }
  void sendrecv_with(int to, const header& hs, const std::byte* sdata, int from, const header& hr,
                     byte_consumer consume, const wait_context& w) {
    outgoing out{to, hs, sdata};
    incoming in{from, hr, consume};
    bool sent = false, received = false;
    while (true) {
      if (!sent) sent = progress(out);
      if (!received) received = progress(in, w);
      if (sent && received) return;
      wait_for(w, received ? hs : hr, received ? to : from, sent ? -1 : to, received ? "to make room at" : "to receive from",
               [&] { return (!sent && room_changed(out)) || (!received && data_arrived(in)); });
    }
  }

  // ---- windows and phases (the shared_window capability) ---------------------------------

  /// Windows exist on the world communicator only: sub-groups run their collectives over the
  /// rings (a phase counter is shared by every communicator of the process).
  bool has_window() const noexcept { return context_ == 0; }
  std::byte* window(int r) const noexcept { return seg_->window(world(r)); }
  std::size_t window_bytes() const noexcept { return seg_->lay.opt.window_bytes; }
  std::uint64_t phase() const noexcept { return seg_->my_phase; }

  /// Publishes this rank's phase `g` with the fingerprint of the call.
  void post(std::uint64_t g, const fingerprint& fp) noexcept {
    auto& c = seg_->ctl(seg_->world_rank);
    c.fp_gen.store(2 * g + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    detail::shm_impl::store_fp(c.phase_fp, fp);
    c.fp_gen.store(2 * g + 2, std::memory_order_release);
    c.phase.store(g, std::memory_order_release);
    seg_->my_phase = g;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (int r : members_)
      if (r != seg_->world_rank) {
        auto& o = seg_->ctl(r);
        if (o.sleepers.load(std::memory_order_relaxed) > 0) {
          o.doorbell.fetch_add(1, std::memory_order_seq_cst);
          detail::futex_wake_all(&o.doorbell);
        }
      }
  }

  /// Waits until rank `r` has posted phase `g`, the call being `fp`. With `compare`, a peer at
  /// exactly `g` must have posted `fp` too: `mismatch_error` otherwise.
  void wait_phase(int r, std::uint64_t g, const fingerprint& fp, bool compare, const wait_context& w) {
    auto& c = seg_->ctl(world(r));
    if (c.phase.load(std::memory_order_acquire) < g) {
      header h{fp, 0};
      if (!compare) h.fp.coll = collective::send_recv;  // liveness and deadline only
      wait_for(w, h, r, -1, "to reach the same step as", [&] { return c.phase.load(std::memory_order_acquire) >= g; });
    }
    if (!compare) return;
    // Seqlock read of the fingerprint of phase g; a peer already past g compared ours itself
    // (here, or in check_posted at its next step).
    const std::uint64_t gen = c.fp_gen.load(std::memory_order_acquire);
    if (gen == 2 * g + 2) {
      const fingerprint theirs = detail::shm_impl::load_fp(c.phase_fp);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (c.fp_gen.load(std::memory_order_relaxed) == gen && theirs != fp)
        throw mismatch_error(std::string(collective_name(fp.coll)) + "(" + std::string(w.algorithm) + "): " +
                             detail::describe_difference(fp, rank_, theirs, r));
    }
    check_ring(r, fp, w);
  }
  void wait_all(std::uint64_t g, const fingerprint& fp, bool compare, const wait_context& w) {
    for (int r = 0; r < size(); ++r)
      if (r != rank_) wait_phase(r, g, fp, compare, w);
    if (compare) seg_->compared_all = g;
  }
  /// At the start of a step on the windows, once every peer has posted g (this rank's last
  /// phase), for the call `fp`: catches what no wait of the earlier steps compared.
  /// - Each peer still at g must have posted g with this rank's fingerprint of g. A peer already
  ///   past g compared ours itself (in its wait for g, or here at its next step), so every pair
  ///   of ranks compares every phase, even where a schedule has one of them wait for nobody (a
  ///   broadcast root, a reduce leaf, ranks that disagree on the root).
  /// - No peer may have left an unread message of an earlier collective of this communicator in
  ///   its ring to this rank: ranks that disagreed about a point-to-point schedule (two ranks
  ///   that each took itself for the root) finish it with messages nobody receives, and the
  ///   windows never read the rings.
  /// Reads only control lines and ring heads; no extra synchronisation. The fingerprints are not
  /// read again where this rank's own wait_all at g compared every peer: a peer it found already
  /// past g had run this check at g while this rank was still at g, comparing ours (measured:
  /// 0.1 us of a 0.6 us 8-byte all_reduce at 2 ranks).
  void check_posted(std::uint64_t g, const fingerprint& fp, const wait_context& w) const {
    using namespace detail::shm_impl;
    auto& me = seg_->ctl(seg_->world_rank);
    const bool posted = g > 0 && seg_->compared_all != g && me.fp_gen.load(std::memory_order_relaxed) == 2 * g + 2;
    const fingerprint mine = posted ? load_fp(me.phase_fp) : fingerprint{};
    for (int r = 0; r < size(); ++r) {
      if (r == rank_) continue;
      auto& c = seg_->ctl(world(r));
      if (const std::uint64_t gen = c.fp_gen.load(std::memory_order_acquire); posted && gen == 2 * g + 2) {
        const fingerprint theirs = load_fp(c.phase_fp);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (c.fp_gen.load(std::memory_order_relaxed) == gen && theirs != mine)
          throw mismatch_error(std::string(collective_name(mine.coll)) + "(" + std::string(w.algorithm) + ") #" +
                               std::to_string(mine.seq) + ": " + detail::describe_difference(mine, rank_, theirs, r) +
                               " (seen when rank " + std::to_string(rank_) + " began its next step on the windows)");
      }
      check_ring(r, fp, w);
    }
  }

  /// No unread message of an earlier collective of this communicator may wait in rank r's ring
  /// to this rank (see check_posted); reliable once r has posted a phase of the current call,
  /// since its sends of every earlier call were written before.
  void check_ring(int r, const fingerprint& fp, const wait_context& w) const {
    using namespace detail::shm_impl;
    const int from = world(r), to = seg_->world_rank;
    const std::uint64_t tail = seg_->received[static_cast<std::size_t>(from)];
    if (seg_->ends(from, to).head.load(std::memory_order_acquire) - tail < 64) return;
    struct {
      std::uint64_t fp[fp_words];
      std::uint64_t bytes, magic;
    } hdr;
    std::memcpy(&hdr, seg_->ring_data(from, to) + tail % seg_->lay.opt.ring_bytes, 64);
    fingerprint theirs;
    std::memcpy(&theirs, hdr.fp, sizeof theirs);
    if (hdr.magic == message_magic && theirs.context == context_ && theirs.coll != collective::send_recv &&
        theirs.seq <= fp.seq && theirs != fp)
      throw mismatch_error(detail::where({fp, 0}, w.algorithm) + ": " + detail::describe_difference(fp, rank_, theirs, r) +
                           "; rank " + std::to_string(r) + "'s message of its " + std::string(collective_name(theirs.coll)) +
                           " #" + std::to_string(theirs.seq) + " to rank " + std::to_string(rank_) + " was never received");
  }

  // ---- shared allocation (zero copy) ------------------------------------------------------

  /// `bytes` of this rank's arena in the segment (64-byte aligned): peers read a collective's
  /// input straight from it. `usage_error` when the arena (`TUTTI_SHM_ARENA_BYTES`) is full.
  std::byte* allocate(std::size_t bytes) {
    bytes = std::max<std::size_t>((bytes + 63) & ~std::size_t{63}, 64);
    std::lock_guard lk(seg_->arena_mu);
    for (auto it = seg_->arena_free.begin(); it != seg_->arena_free.end(); ++it)
      if (it->second >= bytes) {
        const std::size_t off = it->first, left = it->second - bytes;
        seg_->arena_free.erase(it);
        if (left) seg_->arena_free.emplace(off + bytes, left);
        seg_->arena_used.emplace(off, bytes);
        return seg_->arena(seg_->world_rank) + off;
      }
    throw usage_error("shm::allocate: " + std::to_string(bytes) + " bytes do not fit in this rank's arena of " +
                      std::to_string(seg_->lay.opt.arena_bytes) + " bytes (set TUTTI_SHM_ARENA_BYTES)");
  }
  void deallocate(std::byte* p) noexcept {
    std::lock_guard lk(seg_->arena_mu);
    const auto off = static_cast<std::size_t>(p - seg_->arena(seg_->world_rank));
    auto used = seg_->arena_used.find(off);
    if (used == seg_->arena_used.end()) return;
    std::size_t start = off, bytes = used->second;
    seg_->arena_used.erase(used);
    auto next = seg_->arena_free.lower_bound(start);
    if (next != seg_->arena_free.end() && next->first == start + bytes) {
      bytes += next->second;
      next = seg_->arena_free.erase(next);
    }
    if (next != seg_->arena_free.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        bytes += prev->second;
        seg_->arena_free.erase(prev);
      }
    }
    seg_->arena_free.emplace(start, bytes);
  }
  /// Where `bytes` at `p` lie in this rank's arena, if they do.
  std::optional<std::uint64_t> arena_offset(const void* p, std::size_t bytes) const noexcept {
    if (!seg_->arena_base || context_ != 0) return std::nullopt;
    const auto* b = static_cast<const std::byte*>(p);
    const std::byte* lo = seg_->arena(seg_->world_rank);
    if (b < lo || b + bytes > lo + seg_->lay.opt.arena_bytes) return std::nullopt;
    return static_cast<std::uint64_t>(b - lo);
  }
  /// Before posting phase g: offers this rank's input for g, [p, p + bytes), to its peers where it
  /// lies: in this rank's arena (they load from it), or else, with `single_copy` allowed and
  /// working, in this process (they read it with process_vm_readv). False when nothing is offered:
  /// the caller copies the input into its slot. An offered input must stay unchanged until every
  /// peer has posted a later phase.
  bool offer_source(std::uint64_t g, const void* p, std::size_t bytes, bool single_copy) noexcept {
    auto& c = seg_->ctl(seg_->world_rank);
    const auto off = arena_offset(p, bytes);
    const bool remote = !off && single_copy && seg_->single_copy && context_ == 0;
    c.source[g % 2].store(off.value_or(detail::shm_impl::no_source), std::memory_order_relaxed);
    c.address[g % 2].store(remote ? reinterpret_cast<std::uintptr_t>(p) : 0, std::memory_order_relaxed);
    return off || remote;
  }
  /// After rank r posted g: `bytes` at byte `offset` of the input r offered for g: a pointer into
  /// r's arena, or this rank's staging buffer `stage` (0..2) filled by one process_vm_readv;
  /// null when r offered nothing (its input is in its slot).
  const std::byte* read_source(int r, std::uint64_t g, std::size_t offset, std::size_t bytes, int stage) {
    const offered where = offered_by(r, g);
    if (where.mapped) return where.mapped + offset;
    if (!where.address) return nullptr;
    std::byte* buf = staging(stage, bytes);
    read_remote(r, where.address + offset, bytes, buf);
    return buf;
  }
  /// This process's staging buffer `stage` (0..2), at least `bytes` long.
  std::byte* staging(int stage, std::size_t bytes) {
    auto& buf = seg_->staging[stage];
    if (buf.size() < bytes) buf.resize(std::max(bytes, std::size_t{1} << 20));
    return buf.data();
  }
  /// Like `read_source`, into `dst`; false when r offered nothing.
  bool copy_source(int r, std::uint64_t g, std::size_t offset, std::size_t bytes, std::byte* dst) {
    const offered where = offered_by(r, g);
    if (where.mapped) {
      if (bytes) std::memcpy(dst, where.mapped + offset, bytes);
      return true;
    }
    if (!where.address) return false;
    read_remote(r, where.address + offset, bytes, dst);
    return true;
  }

  /// After a failure, a new job of the ranks still alive, renumbered in order, on a fresh segment
  /// (`communicator::shrink`). Every surviving rank calls it. A rank whose process is gone is
  /// left out at once; one that is alive but does not call shrink by `timeout` (stopped, hung) is
  /// left out then. The lowest member decides the set and the others adopt it, so all agree even
  /// when a rank dies meanwhile; a rank that arrives after the decision without being in it raises
  /// `errc::aborted`. `kept`, when given, gets the old ranks of the members in new rank order.
  shm shrink(std::chrono::milliseconds timeout, std::vector<int>* kept = nullptr) const {
    using namespace std::chrono;
    auto& seg = *seg_;
    const int p = seg.lay.p, me = seg.world_rank;
    if (context_ != 0) throw usage_error("shm shrink: call it on the world communicator, not on a group");
    if (p > 64) throw usage_error("shm shrink: supports jobs of up to 64 ranks; this one has " + std::to_string(p));
    auto& mine = seg.ctl(me);
    const std::uint32_t g = mine.shrink_gen.load(std::memory_order_relaxed) + 1;
    mine.shrink_gen.store(g, std::memory_order_release);
    const auto deadline = steady_clock::now() + timeout;
    const auto bit = [](int r) { return std::uint64_t{1} << r; };
    // Who is in: this rank, and every rank alive that has entered shrink; wait for the others.
    std::uint64_t members = 0;
    for (;;) {
      members = bit(me);
      bool pending = false;
      for (int r = 0; r < p; ++r) {
        if (r == me || seg.exited(r)) continue;
        if (seg.ctl(r).shrink_gen.load(std::memory_order_acquire) >= g) members |= bit(r);
        else pending = true;
      }
      if (!pending || steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(milliseconds(1));
    }
    // The lowest member decides; if it dies first, the next one does.
    for (;;) {
      const int leader = std::countr_zero(members);
      if (leader == me) {
        mine.shrink_members.store(members, std::memory_order_relaxed);
        mine.shrink_decided.store(g, std::memory_order_release);
        break;
      }
      auto& l = seg.ctl(leader);
      if (l.shrink_decided.load(std::memory_order_acquire) == g) {
        members = l.shrink_members.load(std::memory_order_relaxed);
        break;
      }
      if (seg.exited(leader)) {
        members &= ~bit(leader);
        continue;
      }
      if (steady_clock::now() > deadline + timeout)
        throw timeout_error("shm shrink: rank " + std::to_string(me) + " timed out waiting for rank " +
                            std::to_string(leader) + " to decide who carries on");
      std::this_thread::sleep_for(milliseconds(1));
    }
    if (!(members & bit(me)))
      throw error(errc::aborted, "shm shrink: rank " + std::to_string(me) +
                                     " was left out of the new job: the others decided without it (it reached "
                                     "shrink after their deadline)");
    if (kept) {
      kept->clear();
      for (int r = 0; r < p; ++r)
        if (members & bit(r)) kept->push_back(r);
    }
    const int new_rank = std::popcount(members & (bit(me) - 1));
    const int new_size = std::popcount(members);
    return create(new_rank, new_size, seg.job_id + ".shrink" + std::to_string(g), seg.lay.opt, timeout);
  }

  /// Marks this rank failed, so its peers raise `peer_lost` with `what` instead of timing out.
  void fail(std::string_view what) noexcept {
    auto& c = seg_->ctl(seg_->world_rank);
    const std::size_t n = std::min(what.size(), sizeof c.failure - 1);
    std::memcpy(c.failure, what.data(), n);
    c.failure[n] = '\0';
    c.state.store(static_cast<std::uint32_t>(detail::shm_impl::rank_state::failed), std::memory_order_release);
    for (int r : members_)
      if (r != seg_->world_rank) seg_->ring_bell(r);
  }

 private:
  /// Where rank r offered its input of phase g: mapped here (its arena), at an address in its
  /// process (single copy), or neither (both empty: it is in r's slot).
  struct offered {
    const std::byte* mapped = nullptr;
    std::uint64_t address = 0;
  };
  offered offered_by(int r, std::uint64_t g) const noexcept {
    const auto& c = seg_->ctl(world(r));
    if (const std::uint64_t off = c.source[g % 2].load(std::memory_order_relaxed); off != detail::shm_impl::no_source)
      return {seg_->arena(world(r)) + off, 0};
    return {nullptr, c.address[g % 2].load(std::memory_order_relaxed)};
  }

  /// `bytes` at `address` in rank r's process into `dst`, with process_vm_readv.
  void read_remote(int r, std::uint64_t address, std::size_t bytes, std::byte* dst) {
    std::size_t done = 0;
    while (done < bytes) {
      iovec local{dst + done, bytes - done}, peer{reinterpret_cast<void*>(address + done), bytes - done};
      const ssize_t n = ::process_vm_readv(seg_->pids[static_cast<std::size_t>(world(r))], &local, 1, &peer, 1, 0);
      if (n <= 0) {
        const int e = n < 0 ? errno : EIO;
        if (std::string why = seg_->gone(world(r)); !why.empty() || e == ESRCH)
          throw peer_lost("shm: rank " + std::to_string(r) + " " + (why.empty() ? "exited" : why) +
                          " while rank " + std::to_string(rank_) + " read its input");
        throw error(errc::aborted, "shm: process_vm_readv of " + std::to_string(bytes) + " bytes from rank " +
                                       std::to_string(r) + " failed: " + detail::errno_text(e));
      }
      done += static_cast<std::size_t>(n);
    }
  }

  /// Start-up: every rank tries to read a word from every peer with process_vm_readv; single
  /// copy is on only if all of them could (a container's seccomp policy, Yama's ptrace_scope or
  /// different users can forbid it). Two barriers through the control blocks.
  static void probe_single_copy(detail::shm_impl::segment& seg, shm_options::mode want, std::chrono::milliseconds timeout) {
    const bool wanted = want != shm_options::mode::never;
    using namespace detail::shm_impl;
    const int p = seg.lay.p, me = seg.world_rank;
    if (p == 1) {
      seg.single_copy_note = "one rank: nothing to copy between processes";
      return;
    }
    static const std::uint64_t word = probe_magic ^ static_cast<std::uint64_t>(::getpid());
    control& c = seg.ctl(me);
    if (wanted) {
      // Under Yama's ptrace_scope 1 only a declared tracer may read us; Open MPI declares the same.
      if (FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r")) {
        int scope = 0;
        if (std::fscanf(f, "%d", &scope) == 1 && scope == 1) ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
        std::fclose(f);
      }
    }
    c.probe_address.store(reinterpret_cast<std::uintptr_t>(&word), std::memory_order_relaxed);
    startup_barrier(seg, 1, timeout);
    // Where ranks outnumber cores the windows are faster (measured: 4 ranks on 2 cores), and every
    // rank must agree: a rank that shares its cores votes no.
    int result = !wanted ? -1 : seg.oversubscribed && want == shm_options::mode::automatic ? -2 : 0, failed_peer = -1;
    for (int r = 0; wanted && r < p && result == 0; ++r) {
      if (r == me) continue;
      std::uint64_t got = 0;
      const auto remote = seg.ctl(r).probe_address.load(std::memory_order_relaxed);
      iovec local_iov{&got, sizeof got}, remote_iov{reinterpret_cast<void*>(remote), sizeof got};
      const ssize_t n = ::process_vm_readv(seg.pids[static_cast<std::size_t>(r)], &local_iov, 1, &remote_iov, 1, 0);
      if (n != static_cast<ssize_t>(sizeof got)) result = n < 0 ? errno : EIO;
      else if (got != (probe_magic ^ static_cast<std::uint64_t>(seg.pids[static_cast<std::size_t>(r)]))) result = EIO;
      if (result) failed_peer = r;
    }
    c.probe_result.store(result, std::memory_order_relaxed);
    c.probe_peer.store(failed_peer, std::memory_order_relaxed);
    startup_barrier(seg, 2, timeout);
    seg.single_copy = true;
    for (int r = 0; r < p && seg.single_copy; ++r) {
      const int res = seg.ctl(r).probe_result.load(std::memory_order_relaxed);
      if (res == 0) continue;
      seg.single_copy = false;
      if (res == -1)
        seg.single_copy_note = "single copy off: TUTTI_SHM_SINGLE_COPY=0 on rank " + std::to_string(r) +
                               "; large messages are copied through the shared segment";
      else if (res == -2)
        seg.single_copy_note = "single copy off: the " + std::to_string(p) + " ranks outnumber the cores rank " +
                               std::to_string(r) + " may run on, where copies through the shared segment are faster "
                               "(TUTTI_SHM_SINGLE_COPY=1 forces it)";
      else
        seg.single_copy_note = "single copy off: process_vm_readv from rank " + std::to_string(r) + " to rank " +
                               std::to_string(seg.ctl(r).probe_peer.load(std::memory_order_relaxed)) + " failed (" + detail::errno_text(res) +
                               "; seccomp, Yama ptrace_scope or a different user forbid it); large messages are "
                               "copied through the shared segment";
    }
    if (seg.single_copy)
      seg.single_copy_note = "single copy on: every rank read every peer with process_vm_readv at start-up";
  }

  /// Start-up barrier `step`: waits (sleeping, with the deadline) until every rank reached it.
  static void startup_barrier(detail::shm_impl::segment& seg, std::uint32_t step, std::chrono::milliseconds timeout) {
    seg.ctl(seg.world_rank).startup_step.store(step, std::memory_order_release);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int r = 0; r < seg.lay.p; ++r) {
      while (seg.ctl(r).startup_step.load(std::memory_order_acquire) < step) {
        if (std::string why = seg.gone(r); !why.empty())
          throw peer_lost("shm start-up: rank " + std::to_string(r) + " " + why);
        if (std::chrono::steady_clock::now() > deadline)
          throw timeout_error("shm start-up: rank " + std::to_string(seg.world_rank) + " timed out after " +
                              detail::seconds_text(timeout) + " waiting for rank " + std::to_string(r) +
                              " to map the segment");
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  struct copier {
    std::byte* dst;
    void operator()(const std::byte* src, std::size_t offset, std::size_t n) const {
      std::memcpy(dst + offset, src, n);
    }
  };
  struct outgoing {
    int peer;
    const header& h;
    const std::byte* data;
    std::size_t done = 0;      // bytes of this message written (header counts 64)
    std::uint64_t seen_tail = 0;
  };
  struct incoming {
    int peer;
    const header& expected;
    byte_consumer consume;
    bool checked = false;
    std::size_t done = 0;  // payload bytes consumed (padded)
    std::uint64_t seen_head = 0;
  };

  static constexpr std::size_t pad(std::size_t n) { return (n + 63) & ~std::size_t{63}; }
  static constexpr std::size_t piece_limit = std::size_t{64} << 10;

  int world(int r) const { return members_[static_cast<std::size_t>(r)]; }

  /// Writes as much of `out` as the ring has room for; true when all of it is written.
  bool progress(outgoing& out) {
    using namespace detail::shm_impl;
    const int me = seg_->world_rank, to = world(out.peer);
    auto& ends = seg_->ends(me, to);
    std::byte* ring = seg_->ring_data(me, to);
    const std::size_t cap = seg_->lay.opt.ring_bytes;
    std::uint64_t& head = seg_->sent[static_cast<std::size_t>(to)];
    const std::size_t total = 64 + pad(out.h.bytes);
    out.seen_tail = ends.tail.load(std::memory_order_acquire);
    bool published = false;
    while (out.done < total) {
      const std::size_t room = cap - static_cast<std::size_t>(head - out.seen_tail);
      if (room < 64) break;
      const std::size_t pos = static_cast<std::size_t>(head % cap);
      std::size_t n;
      if (out.done == 0) {
        struct {
          std::uint64_t fp[fp_words];
          std::uint64_t bytes, magic;
        } hdr{};
        fingerprint fp = out.h.fp;
        fp.context = context_;
        std::memcpy(hdr.fp, &fp, sizeof fp);
        hdr.bytes = out.h.bytes;
        hdr.magic = message_magic;
        static_assert(sizeof hdr == 64);
        std::memcpy(ring + pos, &hdr, 64);
        n = 64;
      } else {
        const std::size_t off = out.done - 64;
        n = std::min({room, total - out.done, cap - pos, piece_limit});
        const std::size_t real = std::min(n, out.h.bytes - std::min(off, out.h.bytes));
        if (real) std::memcpy(ring + pos, out.data + off, real);
      }
      head += n;
      out.done += n;
      ends.head.store(head, std::memory_order_release);
      published = true;
      if (n >= piece_limit) {  // let a sleeping receiver start on this piece
        seg_->ring_bell(to);
        published = false;
      }
    }
    if (published) seg_->ring_bell(to);
    return out.done == total;
  }

  /// Consumes what has arrived of `in`; true when the whole message is consumed.
  bool progress(incoming& in, const wait_context& w) {
    using namespace detail::shm_impl;
    const int me = seg_->world_rank, from = world(in.peer);
    auto& ends = seg_->ends(from, me);
    const std::byte* ring = seg_->ring_data(from, me);
    const std::size_t cap = seg_->lay.opt.ring_bytes;
    std::uint64_t& tail = seg_->received[static_cast<std::size_t>(from)];
    in.seen_head = ends.head.load(std::memory_order_acquire);
    bool consumed = false;
    if (!in.checked) {
      if (in.seen_head - tail < 64) return false;
      struct {
        std::uint64_t fp[fp_words];
        std::uint64_t bytes, magic;
      } hdr;
      std::memcpy(&hdr, ring + tail % cap, 64);
      if (hdr.magic != message_magic)
        throw error(errc::aborted, "shm: corrupt message stream from rank " + std::to_string(in.peer));
      header got;
      std::memcpy(&got.fp, hdr.fp, sizeof got.fp);
      got.bytes = hdr.bytes;
      header want = in.expected;
      want.fp.context = context_;
      detail::check_header(want, rank_, got, in.peer, w.algorithm);
      in.checked = true;
      tail += 64;
      consumed = true;
    }
    const std::size_t bytes = in.expected.bytes, total = pad(bytes);
    while (in.done < total && in.seen_head > tail) {
      const std::size_t pos = static_cast<std::size_t>(tail % cap);
      const std::size_t n = std::min({static_cast<std::size_t>(in.seen_head - tail), total - in.done, cap - pos});
      const std::size_t real = std::min(n, bytes - std::min(in.done, bytes));
      if (real) in.consume(ring + pos, in.done, real);
      tail += n;
      in.done += n;
      consumed = true;
    }
    if (consumed) {
      ends.tail.store(tail, std::memory_order_release);
      seg_->ring_bell(from);
    }
    return in.checked && in.done == total;
  }

  bool room_changed(const outgoing& out) const {
    return seg_->ends(seg_->world_rank, world(out.peer)).tail.load(std::memory_order_acquire) != out.seen_tail;
  }
  bool data_arrived(const incoming& in) const {
    return seg_->ends(world(in.peer), seg_->world_rank).head.load(std::memory_order_acquire) != in.seen_head;
  }

  /// Spin, then yield, then sleep on our doorbell until `ready()`; checks the deadline and the
  /// peers (`peer`, and `peer2` unless -1) whenever it is about to sleep.
  template <class Ready>
  void wait_for(const wait_context& w, const header& h, int peer, int peer2, const char* doing, Ready ready) {
    using clock = std::chrono::steady_clock;
    const bool over = seg_->oversubscribed;
    // About 20 us of spinning (a pause is ~40 ns) when every rank has a core of its own; a
    // moment when ranks outnumber cores, where spinning would starve the rank we wait for.
    for (int i = 0, spins = over ? 16 : 512; i < spins; ++i) {
      if (ready()) return;
      detail::cpu_relax();
    }
    const auto start = clock::now();
    auto deadline = start + w.timeout;
    bool extended = false;
    auto& me = seg_->ctl(seg_->world_rank);
    publish_waiting(h.fp, world(peer));
    struct clear {
      shm* t;
      ~clear() { t->publish_waiting(std::nullopt); }
    } guard{this};
    for (int round = 0;; ++round) {
      if (ready()) return;
      const auto now = clock::now();
      if (now - start < std::chrono::microseconds(over ? 20 : 200)) {
        std::this_thread::yield();
        continue;
      }
      // A peer seen in a later call may have finished ours just now: believe the mismatch only
      // if what we wait for is still missing after we looked.
      detail::check_aborted(w, h, rank_, doing, peer);
      check_peer(peer, h, w, ready);
      if (peer2 >= 0) check_peer(peer2, h, w, ready);
      // A peer that is not stopped may be stuck waiting itself and time out a moment after us: half
      // a second more lets its failure (naming whom it waited for) reach us first.
      if (now > deadline && !extended && !process_stopped(world(peer))) {
        extended = true;
        deadline = now + std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(500), w.timeout);
      }
      if (now > deadline)
        throw timeout_error(detail::where(h, w.algorithm) + ": rank " + std::to_string(rank_) + " timed out after " +
                            detail::seconds_text(w.timeout) + " waiting " + doing +
                            " rank " + std::to_string(peer) + blocked_chain(world(peer)) + " (" +
                            std::to_string(h.bytes) + " bytes, " + detail::fingerprint_summary(h.fp) + ")");
      me.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t bell = me.doorbell.load(std::memory_order_seq_cst);
      if (!ready()) detail::futex_wait(&me.doorbell, bell, std::chrono::milliseconds(round < 100 ? 2 : 20));
      me.sleepers.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  void publish_waiting(std::optional<fingerprint> fp, int world_peer = -1) noexcept {
    auto& me = seg_->ctl(seg_->world_rank);
    const std::uint64_t g = me.wait_gen.load(std::memory_order_relaxed);
    me.wait_gen.store(g + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    fingerprint f = fp.value_or(fingerprint{});
    if (fp) f.context = context_;
    else f.coll = collective::send_recv;  // "not waiting in a collective"
    detail::shm_impl::store_fp(me.wait_fp, f);
    me.wait_peer.store(fp ? world_peer : -1, std::memory_order_relaxed);
    me.wait_gen.store(g + 2, std::memory_order_release);
  }

  /// For a timeout: whether the world rank we waited for is stopped, or itself blocked waiting
  /// for another (and so on), so that the message names the rank that holds everyone up (a rank
  /// stopped by SIGSTOP, a debugger, ...) and not only the first link of the chain. The chain is
  /// read from the peers' published waits (seqlocked; a torn read ends it).
  std::string blocked_chain(int world_r) const {
    std::string s;
    std::vector<bool> seen(seg_->pids.size());
    seen.at(static_cast<std::size_t>(seg_->world_rank)) = true;
    for (int r = world_r; r >= 0 && static_cast<std::size_t>(r) < seen.size();) {
      const bool stopped = process_stopped(r);
      if (stopped) s += r == world_r ? " (its process is stopped)" : ", whose process is stopped";
      if (stopped || seen[static_cast<std::size_t>(r)]) break;
      seen[static_cast<std::size_t>(r)] = true;
      auto& c = seg_->ctl(r);
      const std::uint64_t g1 = c.wait_gen.load(std::memory_order_acquire);
      const int next = c.wait_peer.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (g1 == 0 || (g1 & 1) || c.wait_gen.load(std::memory_order_relaxed) != g1 || next < 0) break;
      s += (r == world_r ? ", which is itself waiting for " : ", which waits for ") + world_name(next);
      r = next;
    }
    return s;
  }

  /// "rank i" in this communicator's numbering, else "world rank w".
  std::string world_name(int world_r) const {
    for (std::size_t i = 0; i < members_.size(); ++i)
      if (members_[i] == world_r) return "rank " + std::to_string(i);
    return "world rank " + std::to_string(world_r);
  }

  /// Whether world rank r's process is stopped (SIGSTOP, SIGTSTP, a tracer), from /proc.
  bool process_stopped(int world_r) const {
    const auto r = static_cast<std::size_t>(world_r);
    if (r >= seg_->pids.size() || seg_->pids[r] <= 0) return false;
    char path[64], buf[512];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(seg_->pids[r]));
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    const char* close_paren = std::strrchr(buf, ')');  // the command name may contain anything
    return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'T' || close_paren[2] == 't');
  }

  template <class Ready>
  void check_peer(int peer, const header& h, const wait_context& w, Ready& ready) const {
    const int wr = world(peer);
    if (std::string why = seg_->gone(wr); !why.empty())
      throw peer_lost(detail::where(h, w.algorithm) + ": rank " + std::to_string(peer) + " " + why + " while rank " +
                      std::to_string(rank_) + " waited for it");
    if (h.fp.coll == collective::send_recv) return;
    auto& c = seg_->ctl(wr);
    const std::uint64_t g1 = c.wait_gen.load(std::memory_order_acquire);
    if (g1 == 0 || (g1 & 1)) return;  // never published, or being written
    const fingerprint theirs = detail::shm_impl::load_fp(c.wait_fp);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (c.wait_gen.load(std::memory_order_relaxed) != g1) return;
    fingerprint mine = h.fp;
    mine.context = context_;
    // A peer blocked in a later call has finished the one we wait for it in without the message
    // or room we need (a finished exchange would have unblocked us): the ranks disagree.
    if (theirs.coll != collective::send_recv && theirs.context == context_ &&
        (theirs.seq > mine.seq || (theirs.seq == mine.seq && theirs != mine)) && !ready())
      throw mismatch_error(detail::where(h, w.algorithm) + ": " + detail::describe_difference(mine, rank_, theirs, peer));
  }

  std::shared_ptr<detail::shm_impl::segment> seg_;
  std::vector<int> members_;
  int rank_ = 0;
  std::uint64_t context_ = 0;
};

static_assert(transport<shm>);
static_assert(zero_copy_recv<shm>);

}  // namespace tutti
