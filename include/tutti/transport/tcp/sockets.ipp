/// \file
/// Definitions for tutti/transport/tcp/sockets.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include "tutti/transport/tcp/sockets.hpp"

namespace tutti::detail::tcp_impl {

TUTTI_DECL void close_gracefully(std::vector<link*> links, std::chrono::milliseconds linger,
                                 bool sent_is_enough) noexcept {
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

TUTTI_DECL std::size_t hello_bytes_wanted(std::string_view in) {
  static_assert(hello_fixed == group_hello_fixed, "the hellos differ only in their fixed part");
  auto length_at = [&](std::size_t at) { return std::size_t{net::reader{in.substr(at)}.num<std::uint32_t>()}; };
  const std::size_t job_at = hello_fixed;
  if (in.size() < job_at + 4) return job_at + 4;
  const std::size_t token_at = job_at + 4 + length_at(job_at);
  if (in.size() < token_at + 4) return token_at + 4;
  return token_at + 4 + length_at(token_at);
}

TUTTI_COLD TUTTI_DECL void hello_queue::serve(asio::ip::tcp::acceptor& acceptor, asio::io_context& io,
                                              std::chrono::milliseconds within, int rank, int& logged,
                                              const handler& on_hello) {
  while (true) {
    auto l = std::make_unique<link>(io);
    asio::error_code ec;
    acceptor.accept(l->sock, ec);
    if (ec) break;
    l->sock.set_option(asio::ip::tcp::no_delay(true), ec);
    l->sock.non_blocking(true, ec);
    const auto peer = l->sock.remote_endpoint(ec);
    waiting w{std::move(l), {}, ec ? std::string("an unknown address") : sockaddr_text(peer),
              ec ? std::string() : peer.address().to_string(), clock::now()};
    if (read(w, within, rank, logged, on_hello)) continue;
    make_room(w.host, rank, logged);
    waiting_.push_back(std::move(w));
  }
  for (std::size_t i = 0; i < waiting_.size();) {
    if (read(waiting_[i], within, rank, logged, on_hello)) waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    else ++i;
  }
}

TUTTI_DECL void hello_queue::add_fds(asio::ip::tcp::acceptor& acceptor, std::vector<pollfd>& fds) const {
  fds.push_back({acceptor.native_handle(), POLLIN, 0});
  for (const auto& w : waiting_) fds.push_back({w.l->fd(), POLLIN, 0});
}

TUTTI_COLD TUTTI_DECL bool hello_queue::read(waiting& w, std::chrono::milliseconds within, int rank, int& logged,
                                             const handler& on_hello) {
  std::string dropped;
  try {
    for (;;) {
      if (w.in.size() >= 8) {
        const auto magic = net::reader{w.in}.num<std::uint64_t>();
        if (magic == hello_magic) {
          if (const auto h = parse_mesh_hello(w.in)) {
            on_hello(w, &*h, nullptr);
            return true;
          }
        } else if (magic == group_hello_magic) {
          if (const auto h = parse_group_hello(w.in)) {
            on_hello(w, nullptr, &*h);
            return true;
          }
        } else {
          throw net::malformed("not a tutti connection (wrong magic)", true);
        }
      }
      // The parsers have checked every length that has arrived against its cap.
      const std::size_t want = std::min(hello_bytes_wanted(w.in), std::max(max_hello_bytes, max_group_hello_bytes));
      if (want <= w.in.size()) throw net::malformed("hello longer than its parts");
      char buf[1024];
      asio::error_code ec;
      const std::size_t k = w.l->sock.read_some(asio::buffer(buf, std::min(sizeof buf, want - w.in.size())), ec);
      w.in.append(buf, k);
      if (!ec || ec == asio::error::interrupted) continue;
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (w.in.empty()) return true;  // a probe that connects and closes says nothing
      dropped = "it closed the connection after " + std::to_string(w.in.size()) + " bytes of an incomplete hello";
      break;
    }
  } catch (const net::malformed& e) {
    dropped = e.stranger ? e.reason : "malformed hello (" + e.reason + ")";
    // What else has arrived is dropped too (up to 64 KiB), so that the close is a FIN rather
    // than a reset, which the peer's side would report as an error of its own.
    char sink[4096];
    for (int i = 0; i < 16; ++i) {
      asio::error_code ec;
      if (w.l->sock.read_some(asio::buffer(sink), ec) == 0 || ec) break;
    }
  }
  if (dropped.empty() && clock::now() >= w.accepted + within) {
    const auto ms = within.count();
    dropped = "it sent no complete hello within " + (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms");
  }
  if (dropped.empty()) return false;
  log_refusal(rank, w.from, dropped, logged);
  return true;
}

TUTTI_COLD TUTTI_DECL void hello_queue::make_room(const std::string& host, int rank, int& logged) {
  using net::max_silent;
  using net::max_silent_per_address;
  const auto same = [&](const waiting& w) { return w.host == host; };
  auto oldest = waiting_.end();
  std::string why;
  if (static_cast<std::size_t>(std::count_if(waiting_.begin(), waiting_.end(), same)) >= max_silent_per_address) {
    oldest = std::find_if(waiting_.begin(), waiting_.end(), same);
    why = "closed for a newer one: " + std::to_string(max_silent_per_address) + " connections from " +
          (host.empty() ? std::string("an unknown address") : host) + " were waiting to say hello";
  } else if (waiting_.size() >= max_silent) {
    oldest = waiting_.begin();
    why = "closed for a newer one: " + std::to_string(max_silent) + " connections were waiting to say hello";
  }
  if (oldest == waiting_.end()) return;
  log_refusal(rank, oldest->from, why, logged);
  waiting_.erase(oldest);
}

TUTTI_DECL connections::~connections() {
  std::vector<link*> open;
  for (auto& streams : peers)
    for (auto& l : streams)
      if (l && l->sock.is_open()) open.push_back(l.get());
  if (!open.empty()) close_gracefully(std::move(open), linger);
}

TUTTI_COLD TUTTI_DECL asio::ip::address interface_address(const std::string& ifname, int family) {
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

TUTTI_DECL std::size_t sysctl_value(const char* path) {
  std::ifstream f(path);
  std::size_t v = 0;
  f >> v;
  return v;
}

TUTTI_DECL void io_by(link& l, void* buf, std::size_t n, bool writing, std::chrono::steady_clock::time_point deadline,
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

TUTTI_COLD TUTTI_DECL int connect_once(link& l, const asio::ip::tcp::endpoint& ep, const tcp_options& opt,
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

TUTTI_COLD TUTTI_DECL void connect(link& l, const asio::ip::tcp::endpoint& ep, const tcp_options& opt,
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
