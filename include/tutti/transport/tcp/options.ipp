/// \file
/// Definitions for tutti/transport/tcp/options.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"
#include "tutti/transport/tcp/options.hpp"

namespace tutti {

TUTTI_COLD TUTTI_DECL tcp_options tcp_options::from_env() {
  tcp_options o;
  if (auto v = detail::env_int("TUTTI_TCP_STREAMS", 1, 16)) o.streams = static_cast<int>(*v);
  if (auto v = detail::env_int("TUTTI_TCP_BUFFER_BYTES", 0, 1L << 30)) {
    o.buffer_bytes = static_cast<std::size_t>(*v);
    o.buffer_forced = true;
  }
  if (auto v = detail::env_int("TUTTI_TCP_STRIPE_BYTES", 64, 1L << 30)) o.stripe_bytes = static_cast<std::size_t>(*v);
  if (auto v = detail::env_int("TUTTI_TCP_SPIN_US", 0, 1000000)) o.spin = std::chrono::microseconds(*v);
  if (const char* i = detail::getenv_nonempty("TUTTI_SOCKET_IFNAME")) o.ifname = i;
  return o;
}

}  // namespace tutti
