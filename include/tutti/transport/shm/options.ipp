/// \file
/// Definitions for tutti/transport/shm/options.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include "tutti/bootstrap/env.hpp"
#include "tutti/transport/shm/options.hpp"

namespace tutti {

TUTTI_COLD TUTTI_DECL shm_options shm_options::from_env(int world_size) {
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

}  // namespace tutti
