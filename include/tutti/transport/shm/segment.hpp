/// \file
/// `detail::shm_impl::segment`: one process's mapping of the job's shared segment and what every
/// transport of that process shares about it: its place, the peers' processes (pids and pidfds),
/// the local ends of the rings, the phase counter, single copy, the arena's bookkeeping. Also the
/// liveness rules of shm: how a rank wakes another (its doorbell), tells that a peer is gone
/// (its process exited, or it marked itself failed, and why) and leaves or reads last words.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/bootstrap/local_rendezvous.hpp"
#include "tutti/transport/shm/layout.hpp"

namespace tutti::detail::shm_impl {

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
  bool fast_kernel_copy = false;              // and all_reduce too (the start-up speed vote)
  std::string single_copy_note;               // why (not), for TUTTI_DEBUG=info
  std::vector<std::byte> staging[3];          // where single-copy reads land
  std::string job_id;                         // this job's rendezvous name (shrink and groups derive new ones)
  std::string base_job_id;                    // the job id the world started with: joiners find it by it (grow.hpp)
  std::string token;                          // TUTTI_JOB_TOKEN: a joiner must present it
  std::uint32_t grows = 0;                    // grows this world has made
  std::chrono::milliseconds timeout{0};       // start-up's deadline (a group's segment waits as long)

  std::byte* arena_base = nullptr;  // the arenas' mapping (not pre-faulted)
  std::mutex arena_mu;
  std::map<std::size_t, std::size_t> arena_free;  // offset -> bytes, in this rank's arena
  std::map<std::size_t, std::size_t> arena_used;

  segment(int world, shm_options o) : lay(world, o) {}
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;
  ~segment();
  std::byte* arena(int world_r) const { return arena_base + static_cast<std::size_t>(world_r) * lay.opt.arena_bytes; }
  control& ctl(int world_r) const { return reinterpret_cast<control*>(base + lay.controls)[world_r]; }
  notices& notes(int world_r) const { return reinterpret_cast<notices*>(base + lay.notices_at)[world_r]; }
  ring_ends& ends(int src, int dst) const { return *reinterpret_cast<ring_ends*>(base + lay.ring(src, dst)); }
  std::byte* ring_data(int src, int dst) const { return base + lay.ring(src, dst) + sizeof(ring_ends); }
  ring_ends& p2p_ends(int src, int dst) const { return *reinterpret_cast<ring_ends*>(base + lay.p2p_ring(src, dst)); }
  std::byte* p2p_data(int src, int dst) const { return base + lay.p2p_ring(src, dst) + sizeof(ring_ends); }
  std::byte* window(int world_r) const {
    return base + lay.windows + static_cast<std::size_t>(world_r) * lay.opt.window_bytes;
  }

  /// Wakes `world_r` if it may be asleep. Call after publishing what it waits for.
  void ring_bell(int world_r) const noexcept;

  /// Whether world rank r's process is gone (it may have failed and still be alive otherwise).
  bool exited(int world_r) const;

  /// Empty when world rank r is alive; otherwise why it is not: "failed: <its reason>", or
  /// "exited or was killed (pid N)" and its last words, if it left any.
  std::string gone(int world_r) const;
  /// World rank r's failure notice (its transport's `fail`), or nothing while it has not failed.
  std::optional<std::string> failure_notice(int world_r) const;

  /// Marks this rank failed with `what` (already cut to fit: toolkit::notice_text).
  void write_failure(std::string_view what) noexcept;

  /// This rank's last words (empty: none), read by peers under the note's seqlock.
  void write_note(std::string_view what) noexcept;
  std::string note_of(int world_r) const;
};

}  // namespace tutti::detail::shm_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/segment.ipp"
#endif
