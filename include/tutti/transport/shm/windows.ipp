/// \file
/// Definitions for tutti/transport/shm/windows.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include "tutti/detail/futex.hpp"
#include "tutti/transport/shm/windows.hpp"

namespace tutti::detail::shm_impl {

TUTTI_DECL void post_phase(segment& seg, const std::vector<int>& members, std::uint64_t g,
                           const fingerprint& fp) noexcept {
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

TUTTI_DECL std::optional<fingerprint> posted_fp(const control& c, std::uint64_t g) noexcept {
  if (g == 0 || c.phase_gen.load(std::memory_order_acquire) != 2 * g) return std::nullopt;
  const fingerprint fp = load_fp(c.phase_fp);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (c.phase_gen.load(std::memory_order_relaxed) != 2 * g) return std::nullopt;
  return fp;
}

}  // namespace tutti::detail::shm_impl
