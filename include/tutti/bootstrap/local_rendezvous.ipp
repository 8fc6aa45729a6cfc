/// \file
/// Definitions for tutti/bootstrap/local_rendezvous.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <thread>

#include "tutti/bootstrap/local_rendezvous.hpp"
#include "tutti/bootstrap/progress.hpp"

namespace tutti::detail {

TUTTI_DECL unique_fd& unique_fd::operator=(unique_fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

TUTTI_DECL welcome_message::welcome_message() {
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
}

TUTTI_DECL void welcome_message::attach(int fd) {
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
}

TUTTI_DECL int welcome_message::attached() {
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm), sizeof fd);
      return fd;
    }
  return -1;
}

TUTTI_DECL sockaddr_un abstract_address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  a.sun_path[0] = '\0';
  const std::size_t n = std::min(name.size(), sizeof(a.sun_path) - 2);
  std::memcpy(a.sun_path + 1, name.data(), n);
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

TUTTI_DECL bool io_all(int fd, void* buf, std::size_t n, bool writing, std::chrono::steady_clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  while (n) {
    pollfd pf{fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    const int pr = ::poll(&pf, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    const ssize_t k = writing ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

TUTTI_COLD TUTTI_DECL void check_peer_uid(int fd, const std::string& who) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::getuid())
    throw config_error("shm start-up: " + who + " runs as another user (uid " + std::to_string(cred.uid) +
                       "); refusing to share memory with it");
}

TUTTI_COLD TUTTI_DECL rendezvous_result serve_segment(const std::string& name, int world_size, std::uint64_t segment_bytes,
                                                      std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  rendezvous_result out;
  out.pids.assign(static_cast<std::size_t>(world_size), 0);
  out.pids[0] = ::getpid();
  out.segment = unique_fd(::memfd_create(("tutti:" + name).c_str(), MFD_CLOEXEC));
  if (!out.segment) throw error(errc::config, "shm start-up: memfd_create failed: " + errno_text(errno));
  if (::ftruncate(out.segment.get(), static_cast<off_t>(segment_bytes)) != 0)
    throw error(errc::config, "shm start-up: cannot size the segment to " + std::to_string(segment_bytes) +
                                  " bytes: " + errno_text(errno));
  if (world_size == 1) return out;

  unique_fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  socklen_t alen;
  sockaddr_un addr = abstract_address(name, alen);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), alen) != 0) {
    if (errno == EADDRINUSE)
      throw config_error("shm start-up: another job with the same id is running for this user on this host "
                         "(abstract socket '" + name + "' is taken): give each job its own TUTTI_JOB_ID or MASTER_PORT");
    throw config_error("shm start-up: cannot bind '" + name + "': " + errno_text(errno));
  }
  if (::listen(listener.get(), world_size) != 0) throw config_error("shm start-up: listen: " + errno_text(errno));

  std::vector<unique_fd> conns(static_cast<std::size_t>(world_size));
  int joined = 1;
  std::string problem;
  // Rank 0 knows who has joined: it says so for all, early, then at growing intervals.
  startup_progress progress(timeout);
  auto who = [&](bool in) {
    std::vector<int> out;
    for (int r = 0; r < world_size; ++r)
      if ((r == 0 || conns[static_cast<std::size_t>(r)]) == in) out.push_back(r);
    return out;
  };
  while (joined < world_size) {
    pollfd pf{listener.get(), POLLIN, 0};
    const auto now = std::chrono::steady_clock::now();
    const auto left = until(now, deadline);
    if (left.count() <= 0)
      throw timeout_error("shm start-up: " + rank_list(who(false)) + " never joined job '" + name +
                          "' on this host within " + std::to_string(timeout.count()) +
                          " ms (not started, or started with another TUTTI_JOB_ID or MASTER_PORT?)");
    if (progress.due(now)) {
      const std::string line = "[tutti rank 0] shm start-up: after " + seconds_said(until(progress.start(), now)) + ", " +
                               std::to_string(joined) + " of " + std::to_string(world_size) + " ranks joined job '" +
                               name + "' on this host (" + rank_list(who(true), false) + "); waiting for " +
                               rank_list(who(false)) + " (not started yet, or started with another TUTTI_JOB_ID or "
                               "MASTER_PORT?); giving up in " + seconds_said(left) + "\n";
      std::fputs(line.c_str(), stderr);
    }
    const auto wait = std::min<long long>({left.count(), 1000, until(now, progress.next()).count() + 1});
    if (::poll(&pf, 1, static_cast<int>(wait)) <= 0) continue;
    unique_fd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) continue;
    check_peer_uid(c.get(), "a process joining the job");
    rendezvous_hello h{};
    if (!io_all(c.get(), &h, sizeof h, false, deadline) || h.magic != rendezvous_magic) continue;  // a stranger
    auto refuse = [&](const std::string& why) {
      rendezvous_welcome w{};
      w.magic = rendezvous_magic;
      w.status = 1;
      std::snprintf(w.message, sizeof w.message, "%s", why.c_str());
      io_all(c.get(), &w, sizeof w, true, deadline);
      if (problem.empty()) problem = why;
    };
    if (h.version != rendezvous_version) {
      refuse("protocol version " + std::to_string(h.version) + " differs from rank 0's " + std::to_string(rendezvous_version));
    } else if (h.world_size != world_size) {
      refuse("rank " + std::to_string(h.rank) + " says the world has " + std::to_string(h.world_size) +
             " ranks, rank 0 says " + std::to_string(world_size));
    } else if (h.rank <= 0 || h.rank >= world_size) {
      refuse("a process claims rank " + std::to_string(h.rank) + " in a world of " + std::to_string(world_size));
    } else if (conns[static_cast<std::size_t>(h.rank)]) {
      refuse("two processes claim rank " + std::to_string(h.rank));
    } else if (h.segment_bytes != segment_bytes) {
      refuse("rank " + std::to_string(h.rank) + " computed a different segment size (different TUTTI_SHM_* settings?)");
    } else {
      out.pids[static_cast<std::size_t>(h.rank)] = h.pid;
      conns[static_cast<std::size_t>(h.rank)] = std::move(c);
      ++joined;
    }
    if (!problem.empty()) throw config_error("shm start-up: " + problem);
  }
  listener.reset();  // the name disappears: nobody else can join
  for (int r = 1; r < world_size; ++r) {
    // The segment travels as SCM_RIGHTS with the welcome; the pids follow it.
    welcome_message w;
    w.body.magic = rendezvous_magic;
    w.body.world_size = world_size;
    w.attach(out.segment.get());
    const int s = conns[static_cast<std::size_t>(r)].get();
    if (::sendmsg(s, &w.msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof w.body) ||
        !io_all(s, out.pids.data(), out.pids.size() * sizeof(int), true, deadline))
      throw peer_lost("shm start-up: rank " + std::to_string(r) + " went away during start-up");
  }
  return out;
}

TUTTI_COLD TUTTI_DECL rendezvous_result join_segment(const std::string& name, int rank, int world_size, std::uint64_t segment_bytes,
                                                     std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Rank 0 cannot know of a rank that cannot reach it: such a rank says so itself, early, then at
  // growing intervals. Once in, it waits quietly: rank 0 speaks for all.
  startup_progress progress(timeout);
  unique_fd c;
  for (auto pause = std::chrono::microseconds(200);; pause = std::min(pause * 2, std::chrono::microseconds(20000))) {
    c = unique_fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    socklen_t alen;
    sockaddr_un addr = abstract_address(name, alen);
    if (::connect(c.get(), reinterpret_cast<sockaddr*>(&addr), alen) == 0) break;
    const int err = errno;
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline)
      throw timeout_error("shm start-up: rank " + std::to_string(rank) + " timed out after " +
                          std::to_string(timeout.count()) + " ms waiting for rank 0 of job '" + name +
                          "' (is rank 0 running, with the same TUTTI_JOB_ID / MASTER_PORT?)");
    if (progress.due(now)) {
      const std::string line = "[tutti rank " + std::to_string(rank) + "] shm start-up: cannot reach rank 0 of job '" +
                               name + "' on this host for " + seconds_said(until(progress.start(), now)) + " (" +
                               errno_text(err) + "); still trying, for " + seconds_said(until(now, deadline)) +
                               " more (is rank 0 running, with the same TUTTI_JOB_ID or MASTER_PORT?)\n";
      std::fputs(line.c_str(), stderr);
    }
    std::this_thread::sleep_for(pause);
  }
  check_peer_uid(c.get(), "rank 0");
  rendezvous_hello h{rendezvous_magic, rendezvous_version, rank, world_size, static_cast<std::int32_t>(::getpid()),
                     segment_bytes};
  if (!io_all(c.get(), &h, sizeof h, true, deadline))
    throw peer_lost("shm start-up: rank 0 closed the connection before rank " + std::to_string(rank) + " joined");
  welcome_message w;
  pollfd pf{c.get(), POLLIN, 0};
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw timeout_error("shm start-up: rank " + std::to_string(rank) + " timed out waiting for the other ranks to join");
    if (::poll(&pf, 1, static_cast<int>(std::min<long long>(left.count(), 1000))) > 0) break;
  }
  const ssize_t k = ::recvmsg(c.get(), &w.msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  rendezvous_result out;
  out.segment = unique_fd(k > 0 ? w.attached() : -1);  // owned at once, whatever follows
  if (k != static_cast<ssize_t>(sizeof w.body) || w.body.magic != rendezvous_magic)
    throw peer_lost("shm start-up: rank 0 went away during start-up");
  if (w.body.status != 0)
    throw config_error("shm start-up: rank 0 refused rank " + std::to_string(rank) + ": " + w.body.message);
  if (!out.segment) throw config_error("shm start-up: rank 0 sent no segment");
  out.pids.assign(static_cast<std::size_t>(world_size), 0);
  if (!io_all(c.get(), out.pids.data(), out.pids.size() * sizeof(int), false, deadline))
    throw peer_lost("shm start-up: rank 0 went away during start-up");
  return out;
}

}  // namespace tutti::detail
