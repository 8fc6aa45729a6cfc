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

#include "tutti/detail/attributes.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/shm/segment.hpp"

namespace tutti::detail::shm_impl {

/// Publishes this rank's phase `g` with the fingerprint of the call, and wakes its sleeping peers.
TUTTI_DECL void post_phase(segment& seg, const std::vector<int>& members, std::uint64_t g,
                           const fingerprint& fp) noexcept;

/// Whether the rank of control block `c` has posted phase `g` (or a later one).
inline bool has_posted(const control& c, std::uint64_t g) noexcept {
  return c.phase_gen.load(std::memory_order_acquire) >= 2 * g;
}

/// The fingerprint the rank of `c` posted with phase `g`, if it is at exactly `g` now (a peer
/// already past g compared ours itself, in its wait for g or in its check at its next step).
TUTTI_DECL std::optional<fingerprint> posted_fp(const control& c, std::uint64_t g) noexcept;

}  // namespace tutti::detail::shm_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/windows.ipp"
#endif
