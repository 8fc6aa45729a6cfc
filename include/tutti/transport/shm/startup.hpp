/// \file
/// Start-up of `tutti::shm`: rank 0 creates an anonymous memfd segment and passes it to the
/// other ranks over an abstract Unix socket named after the uid and the job id
/// (bootstrap/local_rendezvous.hpp); every rank maps and pre-faults it and closes the
/// descriptor, so nothing has a name in any file system and nothing outlives the job, even after
/// SIGKILL. Then every rank probes whether it can read every peer's memory with
/// `process_vm_readv` (single copy), through two barriers in the control blocks.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "tutti/detail/attributes.hpp"
#include "tutti/transport/shm/segment.hpp"

namespace tutti::detail::shm_impl {

/// Maps the pages that hold `bytes` at `at` (in a shared mapping) now, writable if `for_writing`, so
/// that no fault is taken there later; false with errno set if the kernel refused.
TUTTI_COLD TUTTI_DECL bool prefault(std::byte* at, std::size_t bytes, bool for_writing) noexcept;

/// Start-up barrier `step`: waits (sleeping, with the deadline) until every rank reached it.
TUTTI_COLD TUTTI_DECL void startup_barrier(segment& seg, std::uint32_t step, std::chrono::milliseconds timeout);

/// Every rank tries to read a word from every peer with process_vm_readv; single copy is on
/// only if all of them could (a container's seccomp policy, Yama's ptrace_scope or different
/// users can forbid it), none turned it off, and ranks do not outnumber cores (unless forced).
/// Unless forced, each rank also times a kernel copy of `probe_bytes` (at most half a window) out
/// of its next peer's window against a memcpy of as many; where any rank's kernel copy is
/// under half as fast, all_reduce keeps to the windows (`fast_kernel_copy` false) while the
/// block collectives still read by single copy. Measured on a VM whose page-table walks are
/// costly (process_vm_readv at a quarter of memcpy's rate): single-copy all_reduce took 1.7x
/// the windows' time at 4 and 64 MiB, where all_gather and scatter by single copy still won.
TUTTI_COLD TUTTI_DECL void probe_single_copy(segment& seg, shm_options::mode want,
                                             std::chrono::milliseconds timeout);

/// Rank `rank` of `world_size` joins the job `job_id`'s segment: rendezvous, map, pre-fault,
/// probe single copy. Waits for the others up to `timeout`.
TUTTI_DECL std::shared_ptr<segment> map_segment(int rank, int world_size, const std::string& job_id, shm_options opt,
                                                std::chrono::milliseconds timeout);

}  // namespace tutti::detail::shm_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/startup.ipp"
#endif
