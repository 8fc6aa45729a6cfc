/// \file
/// The rendezvous store's server (see tutti/bootstrap/store.hpp): a thread of rank 0's process.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/local_rendezvous.hpp"
#include "tutti/core/error.hpp"

#include "tutti/bootstrap/net/sockets.hpp"
#include "tutti/bootstrap/store/wire.hpp"

namespace tutti {

/// Rank 0's side of the store: a thread serving clients until the object is destroyed.
class store_server {
 public:
  /// Listens on `host:port` (port 0: any free port, see `port()`); `host` empty: every address.
  /// `world_size` 0 accepts any client; otherwise a client's world size must match. `token`
  /// empty accepts any token. Throws `config_error` when the port is taken, naming the holder.
  TUTTI_COLD store_server(const std::string& host, int port, int world_size, std::string token)
      : world_size_(world_size), token_(std::move(token)) {
    using namespace detail::store_impl;
    std::string why;
    auto addrs = resolve(host, port, true, why);
    if (addrs.empty()) throw config_error("store: cannot resolve MASTER_ADDR '" + host + "': " + why);
    int last_errno = 0;
    for (const auto& a : addrs) {
      detail::unique_fd fd(::socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!fd) continue;
      const int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_storage b = a;
      int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&b), addr_len(b));
      if (rc != 0 && errno == EADDRNOTAVAIL) {
        // MASTER_ADDR is not an address of this host (a NAT or a name for it): any address.
        sockaddr_storage any{};
        any.ss_family = b.ss_family;
        if (b.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(any).sin6_port = htons(static_cast<std::uint16_t>(port));
        else reinterpret_cast<sockaddr_in&>(any).sin_port = htons(static_cast<std::uint16_t>(port));
        b = any;
        rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&b), addr_len(b));
        if (rc == 0)
          std::fprintf(stderr, "[tutti store] MASTER_ADDR '%s' is not an address of this host: the store listens "
                       "on every address (port %d)\n", host.c_str(), port);
      }
      if (rc != 0) {
        last_errno = errno;
        if (errno == EADDRINUSE) {
          const std::string who = who_listens(port);
          throw config_error("store: MASTER_PORT " + std::to_string(port) + " on " + host_port(host, port) +
                             " is already in use" + (who.empty() ? "" : " by " + who) +
                             ": another job or service holds it; pick another MASTER_PORT (tuttirun "
                             "picks a free one when --master-port is not given)");
        }
        continue;
      }
      if (::listen(fd.get(), 4096) != 0) {
        last_errno = errno;
        continue;
      }
      sockaddr_storage got{};
      socklen_t len = sizeof got;
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&got), &len);
      port_ = addr_port(got);
      address_ = addr_host(got);
      where_ = host_port(address_, port_);
      listener_ = std::move(fd);
      break;
    }
    if (!listener_)
      throw config_error("store: cannot listen on " + host_port(host, port) + ": " +
                         detail::errno_text(last_errno ? last_errno : EINVAL));
    wake_ = detail::unique_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_) throw config_error("store: eventfd: " + detail::errno_text(errno));
    thread_ = std::thread([this] { serve(); });
  }
  store_server(const store_server&) = delete;
  store_server& operator=(const store_server&) = delete;
  ~store_server() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto k = ::write(wake_.get(), &one, sizeof one);
    if (thread_.joinable()) thread_.join();
  }

  /// The port it listens on (the real one when constructed with port 0).
  int port() const noexcept { return port_; }
  /// The address it listens on: "127.0.0.1" for a loopback MASTER_ADDR, "0.0.0.0" or "::" for
  /// every address.
  const std::string& address() const noexcept { return address_; }

 private:
  using clock = std::chrono::steady_clock;
  struct conn {
    detail::unique_fd fd;
    std::string in, out;
    bool hello = false, closing = false;
    std::uint64_t id = 0;
    std::string peer;  // "host:port" of the client, for the log
    clock::time_point accepted;
  };
  struct pending {
    std::uint64_t conn;
    std::vector<std::string> keys;
    bool get;  // reply with the value of keys[0]
    clock::time_point deadline;
  };

  void serve() {
    using namespace detail::store_impl;
    std::map<std::uint64_t, conn> conns;
    std::uint64_t next_id = 1;
    while (true) {
      std::vector<pollfd> fds{{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
      std::vector<std::uint64_t> ids;
      for (auto& [id, c] : conns) {
        fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
        ids.push_back(id);
      }
      int timeout_ms = -1;
      auto until = [&](clock::time_point deadline) {
        const auto l = std::max<long long>(0, left(deadline).count() + 1);
        timeout_ms = timeout_ms < 0 ? static_cast<int>(std::min<long long>(l, 60000))
                                    : std::min(timeout_ms, static_cast<int>(std::min<long long>(l, 60000)));
      };
      for (auto& p : pending_) until(p.deadline);
      std::size_t silent = 0;
      for (auto& [id, c] : conns)
        if (!c.hello && !c.closing) until(c.accepted + hello_within), ++silent;
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        for (std::size_t k = 0; k < max_silent; ++k) {  // the rest at the next round
          sockaddr_storage from{};
          socklen_t from_len = sizeof from;
          detail::unique_fd c(::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&from), &from_len,
                                        SOCK_CLOEXEC | SOCK_NONBLOCK));
          if (!c) break;
          const int one = 1;
          ::setsockopt(c.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          conn n;
          n.fd = std::move(c);
          n.id = next_id++;
          n.peer = host_port(addr_host(from), addr_port(from));
          n.accepted = clock::now();
          if (silent >= max_silent) {
            for (auto& [id, o] : conns)
              if (!o.hello && !o.closing) {
                refused(o, "closed for a newer one: " + std::to_string(max_silent) + " connections were waiting to say hello");
                o.closing = true;
                o.out.clear();
                break;
              }
          } else {
            ++silent;
          }
          conns.emplace(n.id, std::move(n));
        }
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        conn& c = conns[ids[i - 2]];
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          char buf[65536];
          while (!c.closing) {
            const ssize_t k = ::recv(c.fd.get(), buf, sizeof buf, 0);
            if (k > 0) {
              c.in.append(buf, static_cast<std::size_t>(k));
              if (!handle(c)) break;
              continue;
            }
            if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
            if (!c.hello && !c.in.empty())  // a probe that connects and closes says nothing
              refused(c, "it closed the connection after " + std::to_string(c.in.size()) +
                             " bytes of an incomplete hello");
            c.closing = true;  // EOF or error: the client went away
            c.out.clear();
          }
        }
      }
      for (auto& [id, c] : conns)
        if (!c.hello && !c.closing && clock::now() >= c.accepted + hello_within) {
          refused(c, "it sent no complete hello within " + std::to_string(hello_within.count()) + " s");
          c.closing = true;
          c.out.clear();
        }
      expire_and_answer(conns);
      for (auto it = conns.begin(); it != conns.end();) {
        conn& c = it->second;
        while (!c.out.empty()) {
          const ssize_t k = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
          if (k > 0) c.out.erase(0, static_cast<std::size_t>(k));
          else if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
          else {
            c.closing = true;
            c.out.clear();
          }
        }
        if (c.closing && c.out.empty()) {
          std::erase_if(pending_, [&](const pending& p) { return p.conn == c.id; });
          it = conns.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  void reply(conn& c, detail::store_impl::status s, std::string_view payload) {
    detail::store_impl::writer w;
    w.num(static_cast<std::uint8_t>(s)).str(payload);  // a reply: status, length, payload
    c.out += w.out;
  }
  /// Logs a connection the server refuses or drops, naming the client's address and why (never
  /// the token). At most `max_logged` lines, so a port scanner cannot flood rank 0's stderr.
  void refused(const conn& c, const std::string& why) {
    static constexpr int max_logged = 100;
    if (logged_ > max_logged) return;
    if (logged_++ == max_logged)
      std::fprintf(stderr, "[tutti store %s] more refused connections; no longer logged\n", where_.c_str());
    else
      std::fprintf(stderr, "[tutti store %s] refused a connection from %s: %s\n", where_.c_str(), c.peer.c_str(),
                   why.c_str());
  }

  /// Consumes the complete messages in `c.in` (parsed by `parse_hello` and `parse_request`);
  /// false once the connection is to be closed. A malformed message gets an error reply (none
  /// for a stranger: it may not even speak TCP to us on purpose) and the connection is dropped.
  bool handle(conn& c) {
    using namespace detail::store_impl;
    try {
      while (!c.closing) {
        if (!c.hello) {
          const auto h = parse_hello(c.in);
          if (!h) return true;
          std::string refusal;
          bool poison = false;
          if (h->version != version) {
            refusal = "protocol version " + std::to_string(h->version) + " differs from the store's " +
                      std::to_string(version);
          } else if (!token_.empty() && !same_token(h->token, token_)) {
            refusal = "wrong job token: this process's TUTTI_JOB_TOKEN differs from rank 0's (another job's "
                      "process, or a rank started with a different environment)";
          } else if (h->rank >= 0 && world_size_ > 0 && h->world != world_size_) {
            refusal = "rank " + std::to_string(h->rank) + " says the world has " + std::to_string(h->world) +
                      " ranks, rank 0 says " + std::to_string(world_size_) + " (WORLD_SIZE differs between ranks)";
            poison = true;
          } else if (h->rank >= 0 && world_size_ > 0 && h->rank >= world_size_) {
            refusal = "a process claims rank " + std::to_string(h->rank) + " in a world of " +
                      std::to_string(world_size_);
            poison = true;
          } else if (h->rank >= 0 && !ranks_.insert(h->rank).second) {
            refusal = "two processes claim rank " + std::to_string(h->rank) + " (duplicate RANK)";
            poison = true;
          }
          c.in.erase(0, h->size);  // h->token points into c.in: not used past here
          if (poison && problem_.empty()) problem_ = refusal;
          writer w;
          w.num(magic).num(static_cast<std::uint8_t>(refusal.empty() ? status::ok : status::refused)).str(refusal);
          c.out += w.out;
          if (!refusal.empty()) {
            refused(c, refusal);
            c.closing = true;
            return false;
          }
          c.hello = true;
          continue;
        }
        const auto q = parse_request(c.in);
        if (!q) return true;
        switch (q->op) {
          case opcode::set:
            data_[std::string(q->key)] = std::string(q->value);
            reply(c, status::ok, {});
            break;
          case opcode::add: {
            auto& slot = data_[std::string(q->key)];
            slot = add_to(slot, q->delta);
            reply(c, status::ok, slot);
            break;
          }
          case opcode::get:
          case opcode::wait:
            pending_.push_back({c.id, std::vector<std::string>(q->keys.begin(), q->keys.end()),
                                q->op == opcode::get, clock::now() + std::chrono::milliseconds(q->timeout_ms)});
            break;
        }
        c.in.erase(0, q->size);
      }
    } catch (const malformed& e) {
      if (!e.stranger) reply(c, status::failed, "store: malformed message (" + e.reason + "); closing the connection");
      refused(c, e.stranger ? e.reason : "malformed message (" + e.reason + ")");
      c.in.clear();
      c.closing = true;
    }
    return false;
  }

  /// Answers the waits whose keys exist, whose deadline passed, or that a start-up problem ends.
  void expire_and_answer(std::map<std::uint64_t, conn>& conns) {
    using namespace detail::store_impl;
    const auto now = clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      auto cit = conns.find(it->conn);
      if (cit == conns.end()) {
        it = pending_.erase(it);
        continue;
      }
      std::string missing;
      for (const auto& k : it->keys)
        if (!data_.count(k)) missing += (missing.empty() ? "" : ", ") + k;
      if (!problem_.empty()) reply(cit->second, status::failed, problem_);
      else if (missing.empty()) reply(cit->second, status::ok, it->get ? std::string_view(data_[it->keys[0]]) : "");
      else if (now >= it->deadline) reply(cit->second, status::timeout, missing);
      else {
        ++it;
        continue;
      }
      it = pending_.erase(it);
    }
  }

  int world_size_;
  std::string token_;
  int port_ = 0;
  std::string address_, where_;  // the listening address, and with its port for the log
  int logged_ = 0;               // refusals logged (server thread only)
  detail::unique_fd listener_, wake_;
  std::thread thread_;
  // Touched by the server thread only.
  std::map<std::string, std::string> data_;
  std::vector<pending> pending_;
  std::set<int> ranks_;
  std::string problem_;
};

}  // namespace tutti
