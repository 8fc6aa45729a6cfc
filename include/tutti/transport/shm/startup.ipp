/// \file
/// Definitions for tutti/transport/shm/startup.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/bootstrap/local_rendezvous.hpp"
#include "tutti/core/error.hpp"
#include "tutti/transport/shm/startup.hpp"
#include "tutti/transport/toolkit/errors.hpp"
#include "tutti/transport/toolkit/host.hpp"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace tutti::detail::shm_impl {

TUTTI_COLD TUTTI_DECL bool prefault(std::byte* at, std::size_t bytes, bool for_writing) noexcept {
  // Whole pages (madvise refuses an unaligned start; a window need not start on a page).
  const std::size_t skew = reinterpret_cast<std::uintptr_t>(at) & 4095;
  at -= skew;
  bytes = (bytes + skew + 4095) & ~std::size_t{4095};
#if defined(MADV_POPULATE_WRITE)
  if (::madvise(at, bytes, for_writing ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0) return true;
  if (errno != EINVAL) return false;  // EINVAL: a kernel before 5.14, which lacks them
#endif
  // Touch a word of each page: an atomic or of nothing to write (another rank may be writing that
  // word at the same time), a load to read.
  for (std::size_t off = 0; off < bytes; off += 4096) {
    std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(at + off));
    if (for_writing) word.fetch_or(0, std::memory_order_relaxed);
    else (void)word.load(std::memory_order_relaxed);
  }
  return true;
}

TUTTI_COLD TUTTI_DECL void startup_barrier(segment& seg, std::uint32_t step, std::chrono::milliseconds timeout) {
  seg.ctl(seg.world_rank).startup_step.store(step, std::memory_order_release);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int r = 0; r < seg.lay.p; ++r) {
    while (seg.ctl(r).startup_step.load(std::memory_order_acquire) < step) {
      if (std::string why = seg.gone(r); !why.empty())
        throw peer_lost("shm start-up: rank " + std::to_string(r) + " " + why);
      if (std::chrono::steady_clock::now() > deadline)
        throw timeout_error("shm start-up: rank " + std::to_string(seg.world_rank) + " timed out after " +
                            toolkit::seconds_text(timeout) + " waiting for rank " + std::to_string(r) +
                            " to map the segment");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

TUTTI_COLD TUTTI_DECL void probe_single_copy(segment& seg, shm_options::mode want,
                                             std::chrono::milliseconds timeout) {
  const bool wanted = want != shm_options::mode::never;
  const int p = seg.lay.p, me = seg.world_rank;
  if (p == 1) {
    seg.single_copy_note = "one rank: nothing to copy between processes";
    return;
  }
  // The probe: the start of this rank's window, its first word the magic the others check, the
  // whole of it what they time a kernel copy of (touched, as a user's buffer would be). A rank
  // copies into the second half of its own window, so the magic stays while peers read it.
  const bool vote = wanted && want == shm_options::mode::automatic;
  const std::size_t speed_bytes = std::min(probe_bytes, seg.lay.opt.window_bytes / 2);
  const std::uint64_t magic = probe_magic ^ static_cast<std::uint64_t>(::getpid());
  std::memcpy(seg.window(me), &magic, sizeof magic);
  control& c = seg.ctl(me);
  if (wanted) {
    // Under Yama's ptrace_scope 1 only a declared tracer may read us; Open MPI declares the same.
    if (FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r")) {
      int scope = 0;
      if (std::fscanf(f, "%d", &scope) == 1 && scope == 1) ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
      std::fclose(f);
    }
  }
  c.probe_address.store(reinterpret_cast<std::uintptr_t>(seg.window(me)), std::memory_order_relaxed);
  startup_barrier(seg, 1, timeout);
  // Every window has been placed by its owner: map the peers' for reading (best effort: a page
  // left out is faulted when first read).
  for (int r = 0; r < p; ++r)
    if (r != me) (void)prefault(seg.window(r), seg.lay.opt.window_bytes, false);
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
  if (vote && result == 0) {
    // The speed vote (see the declaration): a kernel copy of the next peer's probe against a
    // memcpy of it, best of three each, into the same cache-resident destination. Timed once per
    // peer process and size, and remembered: a process that makes many communicators with the
    // same peers (a test suite, `split`) pays for it once.
    const int peer = (me + 1) % p;
    const int peer_pid = seg.pids[static_cast<std::size_t>(peer)];
    struct timing {
      int pid;
      std::size_t bytes;
      std::uint32_t rate[2];
    };
    static std::mutex timed_mutex;
    static std::vector<timing> timed;
    std::optional<timing> known;
    {
      std::lock_guard lock(timed_mutex);
      for (const timing& t : timed)
        if (t.pid == peer_pid && t.bytes == speed_bytes) known = t;
    }
    if (!known) {
      const auto remote = seg.ctl(peer).probe_address.load(std::memory_order_relaxed);
      std::byte* to = seg.window(me) + seg.lay.opt.window_bytes / 2;
      auto best_seconds = [](auto&& copy) {
        double best = 1e9;
        for (int rep = 0; rep < 3; ++rep) {
          const auto t0 = std::chrono::steady_clock::now();
          copy();
          best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return std::max(best, 1e-9);
      };
      bool read_all = true;
      const double kernel = best_seconds([&] {
        iovec local_iov{to, speed_bytes}, remote_iov{reinterpret_cast<void*>(remote), speed_bytes};
        if (::process_vm_readv(peer_pid, &local_iov, 1, &remote_iov, 1, 0) != static_cast<ssize_t>(speed_bytes))
          read_all = false;
      });
      const double user = best_seconds([&] { std::memcpy(to, seg.window(peer), speed_bytes); });
      const auto mb_per_s = [&](double seconds) {
        return static_cast<std::uint32_t>(std::min(static_cast<double>(speed_bytes) / seconds / 1e6, 4e9));
      };
      if (read_all) {
        known = timing{peer_pid, speed_bytes, {std::max<std::uint32_t>(mb_per_s(kernel), 1), mb_per_s(user)}};
        std::lock_guard lock(timed_mutex);
        timed.push_back(*known);
      } else {
        result = EIO;
        failed_peer = peer;
      }
    }
    if (known) {
      c.probe_rate[0].store(known->rate[0], std::memory_order_relaxed);
      c.probe_rate[1].store(known->rate[1], std::memory_order_relaxed);
    }
  }
  c.probe_result.store(result, std::memory_order_relaxed);
  c.probe_peer.store(failed_peer, std::memory_order_relaxed);
  startup_barrier(seg, 2, timeout);
  seg.single_copy = true;
  seg.fast_kernel_copy = true;
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
                             std::to_string(seg.ctl(r).probe_peer.load(std::memory_order_relaxed)) + " failed (" +
                             errno_text(res) +
                             "; seccomp, Yama ptrace_scope or a different user forbid it); large messages are "
                             "copied through the shared segment";
  }
  if (!seg.single_copy) return;
  seg.single_copy_note = "single copy on: every rank read every peer with process_vm_readv at start-up";
  // The speed vote: a rank that timed the kernel copy under half as fast as a memcpy out of a
  // window keeps all_reduce on the windows (every rank reads the same rates: all agree).
  for (int r = 0; r < p && seg.fast_kernel_copy; ++r) {
    const auto kernel = seg.ctl(r).probe_rate[0].load(std::memory_order_relaxed);  // 0: r did not vote
    const auto user = seg.ctl(r).probe_rate[1].load(std::memory_order_relaxed);
    if (kernel == 0 || 2ull * kernel >= user) continue;
    seg.fast_kernel_copy = false;
    seg.single_copy_note += "; all_reduce copies through the shared segment: rank " + std::to_string(r) +
                            "'s process_vm_readv moved " + std::to_string(kernel) +
                            " MB/s where a memcpy out of a window moved " + std::to_string(user) +
                            " MB/s, under half (TUTTI_SHM_SINGLE_COPY=1 forces it)";
  }
}

TUTTI_DECL std::shared_ptr<segment> map_segment(int rank, int world_size, const std::string& job_id, shm_options opt,
                                                std::chrono::milliseconds timeout) {
  auto seg = std::make_shared<segment>(world_size, opt);
  const std::string name = "tutti." + std::to_string(::getuid()) + "." + job_id;
  rendezvous_result rv = rank == 0 ? serve_segment(name, world_size, seg->lay.total, timeout)
                                   : join_segment(name, rank, world_size, seg->lay.total, timeout);
  // Pre-faulted for writing: the control blocks and the collectives' rings (written by every
  // rank) and this rank's window (written by it; its first touch places it near its owner). A
  // page mapped by a read fault (what MAP_POPULATE does on a shared mapping) still takes one
  // fault per page at its first write: 10 ms for a 4 MiB window on the VM this was measured on,
  // against 0.3 ms for MADV_POPULATE_WRITE. The peers' windows are mapped for reading once their
  // owners have placed them (`probe_single_copy`); the point-to-point rings are faulted by the
  // pairs that use them (128 KiB each way per pair: 504 MiB at 64 ranks if every pair talked),
  // the arenas only reserve address space.
  void* p = ::mmap(nullptr, seg->lay.arenas, PROT_READ | PROT_WRITE, MAP_SHARED, rv.segment.get(), 0);
  if (p == MAP_FAILED)
    throw error(errc::config, "shm: cannot map " + std::to_string(seg->lay.arenas) + " bytes: " + errno_text(errno));
  seg->base = static_cast<std::byte*>(p);
  for (const auto& [at, bytes] : {std::pair{std::size_t{0}, seg->lay.p2p_rings},
                                  std::pair{seg->lay.windows + static_cast<std::size_t>(rank) * opt.window_bytes, opt.window_bytes}})
    if (!prefault(seg->base + at, bytes, true))  // (the segment unmaps `p`)
      throw error(errc::config, "shm: cannot map " + std::to_string(bytes) + " bytes: " + errno_text(errno));
  if (seg->lay.total > seg->lay.arenas) {
    void* a = ::mmap(nullptr, seg->lay.total - seg->lay.arenas, PROT_READ | PROT_WRITE, MAP_SHARED, rv.segment.get(),
                     static_cast<off_t>(seg->lay.arenas));
    if (a == MAP_FAILED) throw error(errc::config, "shm: cannot map the arenas: " + errno_text(errno));
    seg->arena_base = static_cast<std::byte*>(a);
    seg->arena_free.emplace(0, opt.arena_bytes);
  }
  rv.segment.reset();  // the mapping keeps the memory; no descriptor or name remains
  seg->world_rank = rank;
  seg->job_id = job_id;
  seg->timeout = timeout;
  seg->pids = rv.pids;
  for (int pid : seg->pids) {
    const long fd = pid > 0 && pid != ::getpid() ? ::syscall(SYS_pidfd_open, pid, 0) : -1;
    seg->pidfds.emplace_back(static_cast<int>(fd));
  }
  seg->sent.assign(static_cast<std::size_t>(world_size), 0);
  seg->received.assign(static_cast<std::size_t>(world_size), 0);
  seg->oversubscribed = toolkit::oversubscribed(world_size);
  control& me = seg->ctl(rank);
  me.pid.store(::getpid(), std::memory_order_relaxed);
  me.state.store(0, std::memory_order_release);
  probe_single_copy(*seg, opt.single_copy, timeout);
  return seg;
}

}  // namespace tutti::detail::shm_impl
