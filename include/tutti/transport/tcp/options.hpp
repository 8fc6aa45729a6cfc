/// \file
/// `tutti::tcp_options`: the settings of the tcp transport, from the environment
/// (`TUTTI_TCP_STREAMS`, `TUTTI_TCP_BUFFER_BYTES`, `TUTTI_TCP_STRIPE_BYTES`, `TUTTI_TCP_SPIN_US`,
/// `TUTTI_SOCKET_IFNAME`).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"

namespace tutti {

struct tcp_options {
  int streams = 1;                                     ///< TUTTI_TCP_STREAMS: connections per pair (1-16)
  std::size_t buffer_bytes = std::size_t{4} << 20;     ///< TUTTI_TCP_BUFFER_BYTES; 0: kernel autotuning
  bool buffer_forced = false;                          ///< the variable was set: apply it even if clamped
  std::size_t stripe_bytes = std::size_t{256} << 10;   ///< TUTTI_TCP_STRIPE_BYTES: smallest striped payload
  std::chrono::microseconds spin{20};                  ///< TUTTI_TCP_SPIN_US: busy-poll before blocking
  std::string ifname;                                  ///< TUTTI_SOCKET_IFNAME

  TUTTI_COLD static tcp_options from_env() {
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
};

}  // namespace tutti
