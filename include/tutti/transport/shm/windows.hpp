/// \file
/// The windows of `tutti::shm` (the `shared_window` capability): every rank of the world
/// communicator owns a window every rank can load from, and a monotonically increasing phase
/// counter that it alone writes, with the fingerprint of the phase on the same cache line
/// (`control::phase_gen`: 2g−1 while the fingerprint of phase g is written, 2g once g is posted,
/// so the counter is the fingerprint's seqlock too; phase 0 is posted from the start). `algo::shared_memory` runs on these.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/shm/segment.hpp"

namespace tutti::detail::shm_impl {

/// Publishes this rank's phase `g` with the fingerprint of the call, and wakes its sleeping peers.
inline void post_phase(segment& seg, const std::vector<int>& members, std::uint64_t g, const fingerprint& fp) noexcept {
  auto& c = seg.ctl(seg.world_rank);
  c.phase_gen.store(2 * g - 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  store_fp(c.phase_fp, fp);
  c.phase_gen.store(2 * g, std::memory_order_release);
  seg.my_phase = g;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int r : members)
    if (r != seg.world_rank) {
      auto& o = seg.ctl(r);
      if (o.sleepers.load(std::memory_order_relaxed) > 0) {
        o.doorbell.fetch_add(1, std::memory_order_seq_cst);
        futex_wake_all(&o.doorbell);
      }
    }
}

/// Whether the rank of control block `c` has posted phase `g` (or a later one).
inline bool has_posted(const control& c, std::uint64_t g) noexcept {
  return c.phase_gen.load(std::memory_order_acquire) >= 2 * g;
}

/// The fingerprint the rank of `c` posted with phase `g`, if it is at exactly `g` now (a peer
/// already past g compared ours itself, in its wait for g or in its check at its next step).
inline std::optional<fingerprint> posted_fp(const control& c, std::uint64_t g) noexcept {
  if (g == 0 || c.phase_gen.load(std::memory_order_acquire) != 2 * g) return std::nullopt;
  const fingerprint fp = load_fp(c.phase_fp);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (c.phase_gen.load(std::memory_order_relaxed) != 2 * g) return std::nullopt;
  return fp;
}

}  // namespace tutti::detail::shm_impl
