/// \file
/// Definitions for tutti/bootstrap/store/server.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "tutti/bootstrap/store/server.hpp"

namespace tutti {

TUTTI_COLD TUTTI_DECL store_server::store_server(const std::string& host, int port, int world_size, std::string token,
                                                 std::string job_id, std::chrono::milliseconds startup_timeout)
    : world_size_(world_size), token_(std::move(token)), job_id_(std::move(job_id)) {
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
  master_ = host_port(host, port_);
  if (world_size_ > 0 && startup_timeout.count() > 0) progress_.emplace(startup_timeout);
  wake_ = detail::unique_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) throw config_error("store: eventfd: " + detail::errno_text(errno));
  thread_ = std::thread([this] { serve(); });
}

TUTTI_DECL store_server::~store_server() {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto k = ::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

TUTTI_DECL void store_server::serve() {
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
    if (progress_ && progress_->next() != clock::time_point::max()) until(progress_->next());
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
    startup_word();
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

TUTTI_DECL void store_server::refused(const conn& c, const std::string& why) {
  static constexpr int max_logged = 100;
  if (logged_ > max_logged) return;
  if (logged_++ == max_logged)
    std::fprintf(stderr, "[tutti store %s] more refused connections; no longer logged\n", where_.c_str());
  else
    std::fprintf(stderr, "[tutti store %s] refused a connection from %s: %s\n", where_.c_str(), c.peer.c_str(),
                 why.c_str());
}

TUTTI_DECL bool store_server::handle(conn& c) {
  using namespace detail::store_impl;
  try {
    while (!c.closing) {
      if (!c.hello) {
        const auto h = parse_hello(c.in);
        if (!h) return true;
        // A client of this job that disagrees about the world during start-up fails it (the
        // store tells every rank waiting, rather than leaving them to their deadlines). Once
        // every rank has signed in, such a client is no rank of the job: it alone is refused,
        // and the job goes on. So is a stranger at any time (version, token, job id).
        const bool started = world_size_ > 0 && ranks_.size() == static_cast<std::size_t>(world_size_);
        const std::string after_start =
            started ? ": the job's " + std::to_string(world_size_) + " ranks all signed in already, so this process is "
                      "none of them (one left over from an earlier job with this MASTER_PORT and token?); the job goes on"
                    : "";
        std::string refusal;
        bool poison = false;
        if (h->version != version) {
          refusal = "protocol version " + std::to_string(h->version) + " differs from the store's " +
                    std::to_string(version);
        } else if (!token_.empty() && !same_token(h->token, token_)) {
          refusal = "wrong job token: this process's TUTTI_JOB_TOKEN differs from rank 0's (another job's "
                    "process, or a rank started with a different environment)";
        } else if (!job_id_.empty() && !h->job_id.empty() && h->job_id != job_id_) {
          refusal = "another job: this process's job id is '" + std::string(h->job_id) + "', the store's is '" +
                    job_id_ + "' (a process left over from an earlier job with this MASTER_PORT and token, or a "
                    "rank started with a different TUTTI_JOB_ID)";
        } else if (h->rank >= 0 && world_size_ > 0 && h->world != world_size_) {
          refusal = "rank " + std::to_string(h->rank) + " says the world has " + std::to_string(h->world) +
                    " ranks, rank 0 says " + std::to_string(world_size_) + " (WORLD_SIZE differs between ranks)" +
                    after_start;
          poison = !started;
        } else if (h->rank >= 0 && world_size_ > 0 && h->rank >= world_size_) {
          refusal = "a process claims rank " + std::to_string(h->rank) + " in a world of " +
                    std::to_string(world_size_) + after_start;
          poison = !started;
        } else if (h->rank >= 0 && !ranks_.insert(h->rank).second) {
          refusal = "two processes claim rank " + std::to_string(h->rank) + " (duplicate RANK)" + after_start;
          poison = !started;
        }
        c.in.erase(0, h->size);  // h->token and h->job_id point into c.in: not used past here
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

TUTTI_DECL void store_server::expire_and_answer(std::map<std::uint64_t, conn>& conns) {
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
    else if (now >= it->deadline) {
      // During a watched start-up, the ranks that never signed in follow the keys, after a
      // newline: the client names them (store::call).
      const auto absent = not_signed_in();
      reply(cit->second, status::timeout, absent.empty() ? missing : missing + "\n" + detail::rank_list(absent, false));
    }
    else {
      ++it;
      continue;
    }
    it = pending_.erase(it);
  }
}

TUTTI_DECL std::vector<int> store_server::not_signed_in() const {
  std::vector<int> out;
  if (!progress_ || !problem_.empty()) return out;
  for (int r = 0; r < world_size_; ++r)
    if (!ranks_.count(r)) out.push_back(r);
  return out;
}

TUTTI_COLD TUTTI_DECL void store_server::startup_word() {
  if (!progress_) return;
  const auto absent = not_signed_in();
  if (absent.empty()) {  // every rank is in (or a problem fails the start-up): the watch is over
    progress_.reset();
    return;
  }
  const auto now = clock::now();
  if (!progress_->due(now)) return;
  const std::vector<int> in(ranks_.begin(), ranks_.end());
  const std::string line =
      "[tutti store " + where_ + "] start-up: after " + detail::seconds_said(detail::until(progress_->start(), now)) +
      ", " + std::to_string(in.size()) + " of " + std::to_string(world_size_) + " ranks signed in (" +
      (in.empty() ? "none" : detail::rank_list(in, false)) + "); waiting for " + detail::rank_list(absent) +
      " to sign in to the store at MASTER_ADDR:MASTER_PORT = " + master_ +
      " (not started yet, or started with another MASTER_ADDR or MASTER_PORT?); giving up in " +
      detail::seconds_said(detail::until(now, progress_->deadline())) + "\n";
  std::fputs(line.c_str(), stderr);
}

}  // namespace tutti
