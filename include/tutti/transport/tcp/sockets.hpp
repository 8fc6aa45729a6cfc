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

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
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
inline void close_gracefully(std::vector<link*> links, std::chrono::milliseconds linger, bool sent_is_enough = false) noexcept {
  const auto deadline = std::chrono::steady_clock::now() + linger;
  std::array<char, 4096> sink;
  for (link* l : links) ::shutdown(l->fd(), SHUT_WR);
  std::vector<pollfd> fds;
  for (;;) {
    for (std::size_t i = 0; i < links.size();) {
      link& l = *links[i];
      bool over = false;  // the peer has all of it, or is gone
      for (;;) {
        const ssize_t k = ::recv(l.fd(), sink.data(), sink.size(), MSG_DONTWAIT);
        if (k > 0) continue;
        if (k < 0 && errno == EINTR) continue;
        over = k < 0 && errno != EAGAIN && errno != EWOULDBLOCK;  // reset: nothing left to deliver
        break;
      }
      // A connection already reset or closed keeps its count of unacknowledged bytes: done.
      tcp_info info{};
      socklen_t len = sizeof info;
      if (!over && (::getsockopt(l.fd(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0 || info.tcpi_state == TCP_CLOSE))
        over = true;
      int unacknowledged = 0;
      if (!over && ::ioctl(l.fd(), sent_is_enough ? SIOCOUTQNSD : SIOCOUTQ, &unacknowledged) != 0) over = true;
      if (over || unacknowledged == 0) {
        links[i] = links.back();
        links.pop_back();
      } else {
        ++i;
      }
    }
    if (links.empty() || std::chrono::steady_clock::now() >= deadline) return;
    // Acknowledgements raise no event: wake for arriving bytes, or after a millisecond.
    fds.clear();
    for (link* l : links) fds.push_back({l->fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 1);
  }
}

/// What every copy of one rank's transport shares: its connections and the store.
struct connections {
  connections() = default;
  connections(const connections&) = delete;
  connections& operator=(const connections&) = delete;
  /// Closes the connections still open (`fail` closes them at once) gracefully: a rank that
  /// returns right after its last send must not cut off a peer still reading it.
  ~connections() {
    std::vector<link*> open;
    for (auto& streams : peers)
      for (auto& l : streams)
        if (l && l->sock.is_open()) open.push_back(l.get());
    if (!open.empty()) close_gracefully(std::move(open), linger);
  }

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
TUTTI_COLD inline asio::ip::address interface_address(const std::string& ifname, int family) {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) throw config_error("TUTTI_SOCKET_IFNAME: getifaddrs: " + errno_text(errno));
  std::optional<asio::ip::address> best;
  std::string names;
  for (ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    if (names.find(std::string(" ") + i->ifa_name + ",") == std::string::npos) names += std::string(" ") + i->ifa_name + ",";
    if (ifname != i->ifa_name) continue;
    asio::ip::address a;
    if (i->ifa_addr->sa_family == AF_INET) {
      asio::ip::address_v4::bytes_type b;
      std::memcpy(b.data(), &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, 4);
      a = asio::ip::address_v4(b);
    } else {
      const auto* s6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
      asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &s6->sin6_addr, 16);
      a = asio::ip::address_v6(b, s6->sin6_scope_id);
    }
    // Prefer the family of the route to the master, then an address that is not link-local.
    auto score = [&](const asio::ip::address& x) {
      return ((x.is_v4() ? AF_INET : AF_INET6) == family ? 2 : 0) + (x.is_v6() && x.to_v6().is_link_local() ? 0 : 1);
    };
    if (!best || score(a) > score(*best)) best = a;
  }
  ::freeifaddrs(all);
  if (!best) {
    if (!names.empty()) names.pop_back();
    throw config_error("TUTTI_SOCKET_IFNAME='" + ifname + "': no such interface with an IPv4 or IPv6 address "
                       "(interfaces with one:" + names + ")");
  }
  return *best;
}

inline std::size_t sysctl_value(const char* path) {
  std::ifstream f(path);
  std::size_t v = 0;
  f >> v;
  return v;
}

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
inline void io_by(link& l, void* buf, std::size_t n, bool writing, std::chrono::steady_clock::time_point deadline,
                  const std::string& what) {
  auto* p = static_cast<char*>(buf);
  while (n) {
    asio::error_code ec;
    const std::size_t k = writing ? l.sock.write_some(asio::buffer(p, n), ec) : l.sock.read_some(asio::buffer(p, n), ec);
    p += k;
    n -= k;
    if (ec == asio::error::would_block || ec == asio::error::try_again || ec == asio::error::interrupted) {
      const auto left = net::left(deadline).count();
      if (left <= 0) throw timeout_error("tcp start-up: timed out " + what);
      pollfd pf{l.fd(), static_cast<short>(writing ? POLLOUT : POLLIN), 0};
      ::poll(&pf, 1, static_cast<int>(std::min<long long>(left, 1000)));
    } else if (ec) {
      throw peer_lost("tcp start-up: connection lost " + what + ": " + ec.message());
    }
  }
}

/// One attempt to connect `l` to `ep`, waiting at most 5 s of what is left until `deadline`:
/// 0, or the errno that says why not (ECONNREFUSED: nothing listens there).
TUTTI_COLD inline int connect_once(link& l, const asio::ip::tcp::endpoint& ep, const tcp_options& opt,
                                   std::chrono::steady_clock::time_point deadline) {
  asio::error_code ec;
  l.sock.close(ec);
  l.sock.open(ep.protocol());
  set_buffers(l.sock, opt);
  l.sock.set_option(asio::ip::tcp::no_delay(true));
  l.sock.non_blocking(true);
  // asio's connect would wait without a deadline: connect the descriptor, poll it.
  int err = ::connect(l.fd(), ep.data(), static_cast<socklen_t>(ep.size())) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    pollfd pf{l.fd(), POLLOUT, 0};
    const auto left = std::max<long long>(1, std::min<long long>(net::left(deadline).count(), 5000));
    if (::poll(&pf, 1, static_cast<int>(left)) > 0) {
      socklen_t len = sizeof err;
      ::getsockopt(l.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    } else {
      err = ETIMEDOUT;
    }
  }
  return err;
}

/// Connects `l` to `ep` by the deadline, retrying while the peer is not listening yet.
TUTTI_COLD inline void connect(link& l, const asio::ip::tcp::endpoint& ep, const tcp_options& opt,
                    std::chrono::steady_clock::time_point deadline, int me, int peer) {
  std::string why;
  for (auto pause = std::chrono::milliseconds(2);; pause = std::min(pause * 2, std::chrono::milliseconds(200))) {
    const int err = connect_once(l, ep, opt, deadline);
    if (err == 0) return;
    why = errno_text(err);
    if (net::left(deadline).count() <= 0)
      throw timeout_error("tcp start-up: rank " + std::to_string(me) + " cannot connect to rank " + std::to_string(peer) +
                          " at " + sockaddr_text(ep) + ": " + why +
                          " (a firewall, or an address not reachable from here: see TUTTI_SOCKET_IFNAME)");
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace tutti::detail::tcp_impl
