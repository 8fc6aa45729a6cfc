/// \file
/// The tcp transport's sockets (on standalone Asio): one connection to a peer (`link`), the set
/// of a rank's connections that every copy of its transport shares (`connections`), and the
/// start-up helpers around them: the advertised address, socket buffers, connecting and moving a
/// few bytes by a deadline.
#pragma once

#ifndef ASIO_STANDALONE
#define ASIO_STANDALONE
#endif
#include <asio.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/net/sockets.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/detail/buffer.hpp"
#include "tutti/transport/tcp/options.hpp"

namespace tutti::detail::tcp_impl {

/// One connection to a peer.
struct link {
  explicit link(asio::io_context& io) : sock(io) {}
  asio::ip::tcp::socket sock;
  bool clean = true;     // sending side between messages: a notice may be written
  bool in_clean = true;  // receiving side between messages: what comes next is a frame
  std::string stalled;   // the peer's stall notice (it timed out, a failure notice follows)
  std::string note;      // the peer's last words (a usage error), if it left any
  scratch_buffer bounce;
  int fd() { return static_cast<int>(sock.native_handle()); }
};

/// Closes `links` without losing what this rank sent last (see `connections::~connections`):
/// shuts down the sending side of each (a FIN after the data), then, until every peer has
/// acknowledged all of it or `linger` has passed, reads and drops whatever arrives (a peer's
/// waiting notice for a call this rank has left, its FIN). A socket closed with unread bytes
/// sends a reset, and a reset throws away what the kernel had not yet delivered: the peer
/// would lose this rank mid-message.
///
/// `sent_is_enough`: stop waiting once everything has left this host (nothing unsent), without
/// waiting for the acknowledgements (which a peer's delayed ACK may hold back 40 ms): what a
/// reset throws away is what was never sent (`tcp::fail`, which must return promptly).
TUTTI_DECL void close_gracefully(std::vector<link*> links, std::chrono::milliseconds linger,
                                 bool sent_is_enough = false) noexcept;

/// What every copy of one rank's transport shares: its connections and the store.
struct connections {
  connections() = default;
  connections(const connections&) = delete;
  connections& operator=(const connections&) = delete;
  /// Closes the connections still open (`fail` closes them at once) gracefully: a rank that
  /// returns right after its last send must not cut off a peer still reading it.
  ~connections();

  asio::io_context io;
  std::chrono::milliseconds linger{10000};  // the longest close_gracefully waits for the peers
  std::chrono::milliseconds timeout{300000};  // start-up's deadline; a group's connections wait as long
  /// A group's connections: the world's, whose acceptor and addresses make them (null for the world).
  std::shared_ptr<connections> world;
  int world_rank = 0, world_size = 1;
  fingerprint told{};  // the call this rank last sent waiting notices for (tcp::tell_waiting)
  tcp_options opt;
  bool oversubscribed = false;
  std::vector<std::vector<std::unique_ptr<link>>> peers;  // [world rank][stream]
  std::shared_ptr<store_server> server;                   // rank 0: the store lives as long as this (and successors)
  std::string failure;                                    // set by fail(): the transport is unusable

  // The world's, for the groups' own connections (tcp::sub): every rank keeps listening, knows
  // every rank's address, and keeps the connections of groups still being made by other threads.
  struct arrival {
    std::uint64_t context;
    int from, stream;
    std::unique_ptr<link> l;
  };
  std::mutex joining;  // guards the acceptor and `arrived`
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor;
  std::vector<asio::ip::tcp::endpoint> addresses;  // [world rank]
  std::vector<arrival> arrived;
  std::string job_id, token;
  int refusals_logged = 0;
  job_env job;            // as the world started (a shrink starts its new job from it)
  config cfg;
  std::uint32_t shrinks = 0;  // agreements this world has started (tcp/shrink.hpp)
  std::uint32_t grows = 0;    // grows this world has started (tcp/grow.hpp)
  long long joiners_taken = 0;  // rank 0: joiners' tickets its store has handed to grows
};

inline std::string sockaddr_text(const asio::ip::tcp::endpoint& e) {
  return net::host_port(e.address().to_string(), e.port());
}

/// The address of interface `ifname`, preferring `family`; `config_error` listing the
/// interfaces when it has none.
asio::ip::address interface_address(const std::string& ifname, int family);

TUTTI_DECL std::size_t sysctl_value(const char* path);

/// The buffer sizes, set before connect/listen (the window scale is fixed then).
template <class Socket>
void set_buffers(Socket& s, const tcp_options& o) {
  if (o.buffer_bytes == 0) return;
  const bool snd = o.buffer_forced || sysctl_value("/proc/sys/net/core/wmem_max") >= o.buffer_bytes;
  const bool rcv = o.buffer_forced || sysctl_value("/proc/sys/net/core/rmem_max") >= o.buffer_bytes;
  asio::error_code ec;
  if (snd) s.set_option(asio::socket_base::send_buffer_size(static_cast<int>(o.buffer_bytes)), ec);
  if (rcv) s.set_option(asio::socket_base::receive_buffer_size(static_cast<int>(o.buffer_bytes)), ec);
}

/// Writes or reads all of `buf` on a non-blocking socket by the deadline (start-up, notices).
TUTTI_DECL void io_by(link& l, void* buf, std::size_t n, bool writing, std::chrono::steady_clock::time_point deadline,
                      const std::string& what);

/// One attempt to connect `l` to `ep`, waiting at most 5 s of what is left until `deadline`:
/// 0, or the errno that says why not (ECONNREFUSED: nothing listens there).
int connect_once(link& l, const asio::ip::tcp::endpoint& ep, const tcp_options& opt,
                 std::chrono::steady_clock::time_point deadline);

/// Connects `l` to `ep` by the deadline, retrying while the peer is not listening yet.
void connect(link& l, const asio::ip::tcp::endpoint& ep, const tcp_options& opt,
             std::chrono::steady_clock::time_point deadline, int me, int peer);

}  // namespace tutti::detail::tcp_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/tcp/sockets.ipp"
#endif
