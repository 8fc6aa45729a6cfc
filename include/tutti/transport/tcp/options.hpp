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

  static tcp_options from_env();
};

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/tcp/options.ipp"
#endif
