/// \file
/// Definitions for tutti/transport/shm/layout.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include "tutti/transport/shm/layout.hpp"

namespace tutti::detail::shm_impl {

TUTTI_DECL layout::layout(int world, shm_options o) : opt(o), p(world) {
  const auto P = static_cast<std::size_t>(world);
  controls = 4096;
  notices_at = controls + P * sizeof(control);
  rings = notices_at + P * sizeof(notices);
  ring_stride = sizeof(ring_ends) + o.ring_bytes;
  const std::size_t pairs = P * (P > 1 ? P - 1 : 0);
  p2p_rings = rings + pairs * ring_stride;
  windows = (p2p_rings + pairs * (sizeof(ring_ends) + p2p_ring_bytes) + 4095) & ~std::size_t{4095};
  arenas = (windows + P * o.window_bytes + 4095) & ~std::size_t{4095};  // mapped apart: a page offset
  total = arenas + P * o.arena_bytes;
}

}  // namespace tutti::detail::shm_impl
