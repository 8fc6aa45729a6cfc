/// \file
/// Definitions for tutti/transport/shm/startup.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

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
                             std::to_string(seg.ctl(r).probe_peer.load(std::memory_order_relaxed)) + " failed (" +
                             errno_text(res) +
                             "; seccomp, Yama ptrace_scope or a different user forbid it); large messages are "
                             "copied through the shared segment";
  }
  if (seg.single_copy) seg.single_copy_note = "single copy on: every rank read every peer with process_vm_readv at start-up";
}

TUTTI_DECL std::shared_ptr<segment> map_segment(int rank, int world_size, const std::string& job_id, shm_options opt,
                                                std::chrono::milliseconds timeout) {
  auto seg = std::make_shared<segment>(world_size, opt);
  const std::string name = "tutti." + std::to_string(::getuid()) + "." + job_id;
  rendezvous_result rv = rank == 0 ? serve_segment(name, world_size, seg->lay.total, timeout)
                                   : join_segment(name, rank, world_size, seg->lay.total, timeout);
  // Control blocks, rings and windows are pre-faulted; the arenas only reserve address space.
  void* p = ::mmap(nullptr, seg->lay.arenas, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, rv.segment.get(), 0);
  if (p == MAP_FAILED)
    throw error(errc::config, "shm: cannot map " + std::to_string(seg->lay.arenas) + " bytes: " + errno_text(errno));
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
