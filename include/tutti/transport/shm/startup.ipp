/// \file
/// Definitions for tutti/transport/shm/startup.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
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
  // The probe buffer: its first word is the magic the others check, the whole of it what they
  // time a kernel copy of (touched, as a user's buffer would be).
  const bool vote = wanted && want == shm_options::mode::automatic;
  const std::size_t speed_bytes = std::min(probe_bytes, seg.lay.opt.window_bytes);
  // (Whole on every rank: a peer that votes reads it whatever this rank wants.)
  std::vector<std::uint64_t> probe(std::max<std::size_t>(speed_bytes / sizeof(std::uint64_t), 1), 0x5a5a5a5a5a5a5a5aull);
  probe[0] = probe_magic ^ static_cast<std::uint64_t>(::getpid());
  control& c = seg.ctl(me);
  if (wanted) {
    // Under Yama's ptrace_scope 1 only a declared tracer may read us; Open MPI declares the same.
    if (FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r")) {
      int scope = 0;
      if (std::fscanf(f, "%d", &scope) == 1 && scope == 1) ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
      std::fclose(f);
    }
  }
  c.probe_address.store(reinterpret_cast<std::uintptr_t>(probe.data()), std::memory_order_relaxed);
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
  if (vote && result == 0) {
    // The speed vote (see the declaration): one kernel copy of the next peer's probe buffer
    // against a memcpy out of its window, best of three each, into the same cache-resident
    // destination.
    const int peer = (me + 1) % p;
    const auto remote = seg.ctl(peer).probe_address.load(std::memory_order_relaxed);
    std::vector<std::byte> to(speed_bytes);
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
      iovec local_iov{to.data(), speed_bytes}, remote_iov{reinterpret_cast<void*>(remote), speed_bytes};
      if (::process_vm_readv(seg.pids[static_cast<std::size_t>(peer)], &local_iov, 1, &remote_iov, 1, 0) !=
          static_cast<ssize_t>(speed_bytes))
        read_all = false;
    });
    const double user = best_seconds([&] { std::memcpy(to.data(), seg.window(peer), speed_bytes); });
    const auto mb_per_s = [&](double seconds) {
      return static_cast<std::uint32_t>(std::min(static_cast<double>(speed_bytes) / seconds / 1e6, 4e9));
    };
    c.probe_rate[0].store(std::max<std::uint32_t>(mb_per_s(kernel), 1), std::memory_order_relaxed);
    c.probe_rate[1].store(mb_per_s(user), std::memory_order_relaxed);
    if (!read_all) {
      result = EIO;
      failed_peer = peer;
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
  // Control blocks, the collectives' rings and the windows are pre-faulted (mapped again in place
  // with MAP_POPULATE); the point-to-point rings are faulted by the pairs that use them (128 KiB
  // each way per pair: 504 MiB at 64 ranks if every pair talked), the arenas only reserve address
  // space.
  void* p = ::mmap(nullptr, seg->lay.arenas, PROT_READ | PROT_WRITE, MAP_SHARED, rv.segment.get(), 0);
  if (p == MAP_FAILED)
    throw error(errc::config, "shm: cannot map " + std::to_string(seg->lay.arenas) + " bytes: " + errno_text(errno));
  for (const auto& [from, to] : {std::pair{std::size_t{0}, seg->lay.p2p_rings}, std::pair{seg->lay.windows, seg->lay.arenas}}) {
    const std::size_t at = from & ~std::size_t{4095}, end = std::min(seg->lay.arenas, (to + 4095) & ~std::size_t{4095});
    if (end > at && ::mmap(static_cast<std::byte*>(p) + at, end - at, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_FIXED | MAP_POPULATE, rv.segment.get(), static_cast<off_t>(at)) == MAP_FAILED) {
      const int e = errno;
      ::munmap(p, seg->lay.arenas);
      throw error(errc::config, "shm: cannot map " + std::to_string(end - at) + " bytes: " + errno_text(e));
    }
  }
  if (seg->lay.total > seg->lay.arenas) {
    void* a = ::mmap(nullptr, seg->lay.total - seg->lay.arenas, PROT_READ | PROT_WRITE, MAP_SHARED, rv.segment.get(),
                     static_cast<off_t>(seg->lay.arenas));
    if (a == MAP_FAILED) {
      ::munmap(p, seg->lay.arenas);
      throw error(errc::config, "shm: cannot map the arenas: " + errno_text(errno));
    }
    seg->arena_base = static_cast<std::byte*>(a);
    seg->arena_free.emplace(0, opt.arena_bytes);
  }
  rv.segment.reset();  // the mapping keeps the memory; no descriptor or name remains
  seg->base = static_cast<std::byte*>(p);
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
  // Pre-fault what this rank writes most: its window (first touch by its owner).
  std::memset(seg->window(rank), 0, opt.window_bytes);
  control& me = seg->ctl(rank);
  me.pid.store(::getpid(), std::memory_order_relaxed);
  me.state.store(0, std::memory_order_release);
  probe_single_copy(*seg, opt.single_copy, timeout);
  return seg;
}

}  // namespace tutti::detail::shm_impl
