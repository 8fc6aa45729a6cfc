/// \file
/// Socket helpers that the rendezvous store and the tcp mesh share: addresses ("host:port",
/// resolution, the parts of a sockaddr), who listens on a port (from /proc), deadlines, and the
/// limits on connections that have not said their hello yet.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "tutti/detail/attributes.hpp"

namespace tutti::detail::net {

/// Connections that have not yet said a complete hello: at most this many wait at once (a new
/// one closes the oldest: a rank sends its hello as soon as it connects, so the newest is the
/// likeliest to be one), each at most `hello_within`; so silent connections cannot use up the
/// descriptors of the store or of the tcp mesh. The tcp mesh also holds at most
/// `max_silent_per_address` from one address (a new one closes the oldest of its address), so
/// one host's connections cannot crowd out another's.
inline constexpr std::size_t max_silent = 64;
inline constexpr std::size_t max_silent_per_address = max_silent / 2;
inline constexpr std::chrono::seconds hello_within{10};
/// "host:port", with brackets for IPv6.
inline std::string host_port(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

/// Best effort: "pid 123 (python3)" for the process listening on TCP `port`, from /proc.
TUTTI_COLD TUTTI_DECL std::string who_listens(int port);

/// The addresses `host` resolves to for a TCP socket (numeric or a name).
TUTTI_COLD TUTTI_DECL std::vector<sockaddr_storage> resolve(const std::string& host, int port, bool passive, std::string& why);

inline socklen_t addr_len(const sockaddr_storage& s) {
  return s.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}
inline int addr_port(const sockaddr_storage& s) {
  return s.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6&>(s).sin6_port)
                                 : ntohs(reinterpret_cast<const sockaddr_in&>(s).sin_port);
}
TUTTI_DECL std::string addr_host(const sockaddr_storage& s);

inline std::chrono::milliseconds left(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
}

}  // namespace tutti::detail::net

#if defined(TUTTI_DEFINITIONS)
#include "tutti/bootstrap/net/sockets.ipp"
#endif
