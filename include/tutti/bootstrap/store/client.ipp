/// \file
/// Definitions for tutti/bootstrap/store/client.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "tutti/bootstrap/progress.hpp"
#include "tutti/bootstrap/store/client.hpp"

namespace tutti {

TUTTI_COLD TUTTI_DECL store::store(const std::string& host, int port, int rank, int world_size, const std::string& token,
                                    std::chrono::milliseconds timeout, const std::string& job_id)
    : where_(detail::store_impl::host_port(host, port)) {
  using namespace detail::store_impl;
  if (token.size() > max_token) throw config_error("TUTTI_JOB_TOKEN is longer than " + std::to_string(max_token) + " bytes");
  if (job_id.size() > max_job_id) throw config_error("the job id is longer than " + std::to_string(max_job_id) + " bytes");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // A rank that cannot reach the store says so itself while it retries (the store, rank 0's,
  // cannot know of it): early, then at growing intervals (bootstrap/progress.hpp).
  detail::startup_progress progress(timeout);
  std::string why = "no address";
  for (auto pause = std::chrono::milliseconds(5);; pause = std::min(pause * 2, std::chrono::milliseconds(100))) {
    std::string rwhy;
    // An attempt that hangs (a host that drops the SYN) gives way to the next word, after 1 s.
    const auto by =
        std::min(deadline, std::max(std::chrono::steady_clock::now() + std::chrono::seconds(1), progress.next()));
    for (const auto& a : resolve(host, port, false, rwhy)) {
      detail::unique_fd fd(::socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!fd) continue;
      if (connect_by(fd.get(), a, by, why)) {
        fd_ = std::move(fd);
        break;
      }
    }
    if (!rwhy.empty()) why = "cannot resolve: " + rwhy;
    if (fd_) break;
    if (left(deadline).count() <= 0)
      throw timeout_error("store: cannot reach the store at MASTER_ADDR:MASTER_PORT = " + where_ + " after " +
                          std::to_string(timeout.count()) + " ms (" + why +
                          "); is rank 0 running, and do all ranks use the same MASTER_ADDR and MASTER_PORT?");
    if (const auto now = std::chrono::steady_clock::now(); progress.due(now)) {
      const std::string line = (rank >= 0 ? "[tutti rank " + std::to_string(rank) + "]" : std::string("[tutti]")) +
                               " start-up: cannot reach the store at MASTER_ADDR:MASTER_PORT = " + where_ + " for " +
                               detail::seconds_said(detail::until(progress.start(), now)) + " (" + why +
                               "); still trying, for " + detail::seconds_said(left(deadline)) +
                               " more (is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?)\n";
      std::fputs(line.c_str(), stderr);
    }
    std::this_thread::sleep_for(std::min(pause, std::max(left(deadline), std::chrono::milliseconds(1))));
  }
  const int one = 1;
  ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  writer w;
  w.num(magic).num(version).num(static_cast<std::int32_t>(rank)).num(static_cast<std::int32_t>(world_size)).str(token).str(job_id);
  // Something accepted the connection, but node 0's tutti may not be what did: another program
  // holding MASTER_PORT accepts too, and then says nothing or something else. Bounded by
  // `welcome_within`, not by `timeout` (300 s in a job), so that is an error at once.
  const auto welcome_by = std::chrono::steady_clock::now() + welcome_within;
  auto not_a_store = [&](const std::string& what) {
    fd_.reset();
    return config_error("store: what listens at MASTER_ADDR:MASTER_PORT = " + where_ + " is not a tutti store: " +
                        what + ". Another program probably holds MASTER_PORT there (which one cannot be known "
                        "from here; on that host, `ss -ltnp` names it), so rank 0's store could not take it; "
                        "pick another MASTER_PORT for the job");
  };
  char head[answer_head_bytes];
  answer_head a;
  try {
    io(w.out.data(), w.out.size(), true, welcome_by);
    io(head, sizeof head, false, welcome_by);
    a = parse_answer_head(std::string_view(head, sizeof head), magic);
  } catch (const timeout_error&) {
    throw not_a_store("it accepted the connection but sent no welcome within " +
                      std::to_string(welcome_within.count()) + " s (a tutti store answers at once)");
  } catch (const malformed& e) {
    throw not_a_store(e.stranger ? "it answered with bytes that are not tutti's welcome (wrong magic)"
                                 : "it sent a malformed welcome (" + e.reason + ")");
  }
  std::string msg(a.text_bytes, '\0');
  io(msg.data(), msg.size(), false, welcome_by);
  if (a.status != static_cast<std::uint8_t>(status::ok))
    throw config_error("store at " + where_ + " refused this process: " + msg);
}

TUTTI_DECL void store::set(std::string_view key, std::string_view value) {
  using namespace detail::store_impl;
  check_key(key);
  if (value.size() > max_value) throw usage_error("store::set: value larger than 64 MiB");
  writer w;
  w.num(static_cast<std::uint8_t>(opcode::set)).str(key).str(value);
  call(w.out, std::chrono::seconds(60), key);
}

TUTTI_DECL std::string store::get(std::string_view key, std::chrono::milliseconds timeout) {
  using namespace detail::store_impl;
  check_key(key);
  writer w;
  w.num(static_cast<std::uint8_t>(opcode::get)).num(static_cast<std::uint64_t>(timeout.count())).str(key);
  return call(w.out, timeout, key);
}

TUTTI_DECL void store::wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  using namespace detail::store_impl;
  if (keys.size() > max_keys) throw usage_error("store::wait: more than 4096 keys");
  writer w;
  w.num(static_cast<std::uint8_t>(opcode::wait)).num(static_cast<std::uint64_t>(timeout.count()));
  w.num(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) {
    check_key(k);
    w.str(k);
  }
  call(w.out, timeout, keys.empty() ? std::string_view{} : std::string_view(keys[0]));
}

TUTTI_DECL long long store::add(std::string_view key, long long delta) {
  using namespace detail::store_impl;
  check_key(key);
  writer w;
  w.num(static_cast<std::uint8_t>(opcode::add)).str(key).num(static_cast<std::int64_t>(delta));
  return std::strtoll(call(w.out, std::chrono::seconds(60), key).c_str(), nullptr, 10);
}

TUTTI_DECL sockaddr_storage store::local_address() const {
  sockaddr_storage s{};
  socklen_t len = sizeof s;
  ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&s), &len);
  return s;
}

TUTTI_DECL bool store::connect_by(int fd, const sockaddr_storage& a, std::chrono::steady_clock::time_point deadline,
                                  std::string& why) {
  using namespace detail::store_impl;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), addr_len(a)) == 0) return true;
  if (errno != EINPROGRESS) {
    why = detail::errno_text(errno);
    return false;
  }
  pollfd pf{fd, POLLOUT, 0};
  const auto l = std::max<long long>(1, std::min<long long>(left(deadline).count(), 5000));
  if (::poll(&pf, 1, static_cast<int>(l)) <= 0) {
    why = "connection timed out";
    return false;
  }
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err) why = detail::errno_text(err);
  return err == 0;
}

TUTTI_DECL void store::io(void* buf, std::size_t n, bool writing, std::chrono::steady_clock::time_point deadline) {
  if (!fd_) throw error(errc::aborted, "store: the connection to " + where_ + " was closed after an earlier error");
  auto* p = static_cast<char*>(buf);
  while (n) {
    const ssize_t k = writing ? ::send(fd_.get(), p, n, MSG_NOSIGNAL) : ::recv(fd_.get(), p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
      continue;
    }
    if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
      const std::string why = k == 0 ? "closed the connection" : detail::errno_text(errno);
      fd_.reset();
      throw peer_lost("store: the store at " + where_ + " (rank 0) " + why +
                      " (rank 0 exited, failed or refused this process)");
    }
    pollfd pf{fd_.get(), static_cast<short>(writing ? POLLOUT : POLLIN), 0};
    const auto l = detail::store_impl::left(deadline).count();
    if (l <= 0) {
      fd_.reset();  // a reply may still come: the stream is out of step
      throw timeout_error("store: the store at " + where_ + " did not answer in time");
    }
    ::poll(&pf, 1, static_cast<int>(std::min<long long>(l, 1000)));
  }
}

TUTTI_DECL std::string store::call(const std::string& body, std::chrono::milliseconds timeout, std::string_view key) {
  using namespace detail::store_impl;
  // The server answers a wait when it times out; the client waits a little longer for that.
  const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(5);
  const std::string f = frame(body);
  io(const_cast<char*>(f.data()), f.size(), true, deadline);
  char head[reply_head_bytes];
  io(head, sizeof head, false, deadline);
  reply_head h;
  try {
    h = parse_reply_head(std::string_view(head, sizeof head));
  } catch (const malformed& e) {
    fd_.reset();
    throw error(errc::aborted, "store: malformed reply from " + where_ + " (" + e.reason +
                                   ") to a request about '" + std::string(key) + "'");
  }
  std::string payload(h.payload_bytes, '\0');
  io(payload.data(), payload.size(), false, deadline);
  switch (h.st) {
    case status::ok: return payload;
    case status::timeout: {
      // During a watched start-up the store adds the ranks that never signed in, after a newline.
      const auto nl = payload.rfind('\n');
      if (nl != std::string::npos && nl + 1 < payload.size() &&
          payload.find_first_not_of("0123456789, -", nl + 1) == std::string::npos) {
        const std::string ranks = payload.substr(nl + 1);
        throw timeout_error("store: " + std::string(ranks.find_first_of(",-") == std::string::npos ? "rank " : "ranks ") +
                            ranks + " never signed in to the store at " + where_ +
                            " (not started, or started with another MASTER_ADDR or MASTER_PORT?); timed out after " +
                            std::to_string(timeout.count()) + " ms waiting for key(s) " + payload.substr(0, nl));
      }
      throw timeout_error("store: timed out after " + std::to_string(timeout.count()) + " ms waiting for key(s) " +
                          payload + " at " + where_ + " (a rank did not start, or died during start-up)");
    }
    case status::failed: throw config_error("store at " + where_ + ": " + payload);
    default: break;
  }
  fd_.reset();  // status::refused answers only a hello
  throw error(errc::aborted, "store: malformed reply from " + where_ + " (status refused) to a request about '" +
                                 std::string(key) + "'");
}

}  // namespace tutti
