/// \file
/// Definitions for tutti/transport/shm/grow.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "tutti/bootstrap/local_rendezvous.hpp"
#include "tutti/bootstrap/net/codec.hpp"
#include "tutti/core/error.hpp"
#include "tutti/transport/shm/grow.hpp"

namespace tutti::detail::shm_impl {

TUTTI_DECL std::string join_name(const std::string& base_job_id) {
  return "tutti." + std::to_string(::getuid()) + "." + base_job_id + ".join";
}

TUTTI_COLD TUTTI_DECL void take_joiners(const std::string& base, const std::string& token, int old_world,
                                        int joiners, const std::string& new_job, const shm_options& opt,
                                        std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string name = join_name(base);
  unique_fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  socklen_t alen;
  sockaddr_un addr = abstract_address(name, alen);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), alen) != 0)
    throw config_error("shm grow: cannot listen for joiners on '" + name + "': " + errno_text(errno) +
                       " (another grow of a job with the same id?)");
  if (::listen(listener.get(), 64) != 0) throw config_error("shm grow: listen: " + errno_text(errno));
  std::vector<unique_fd> taken;
  int refused = 0;
  while (static_cast<int>(taken.size()) < joiners) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw timeout_error("shm grow: rank 0 waited " + std::to_string(timeout.count()) + " ms for " + std::to_string(joiners) +
                          " joiner(s), " + std::to_string(taken.size()) + " came" +
                          (refused ? " (and " + std::to_string(refused) + " refused)" : std::string()) +
                          " (start them with TUTTI_JOIN=1 and this job's TUTTI_JOB_ID or MASTER_PORT, and token)");
    pollfd pf{listener.get(), POLLIN, 0};
    if (::poll(&pf, 1, static_cast<int>(std::min<long long>(left.count(), 100))) <= 0) continue;
    unique_fd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) continue;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(c.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::getuid()) continue;
    join_hello h;
    const auto within = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    if (!io_all(c.get(), &h, sizeof h, false, within) || h.magic != join_magic) continue;  // a stranger
    const std::string theirs(h.token, std::min<std::size_t>(h.token_bytes, sizeof h.token));
    if (!net::same_token(theirs, token)) {
      join_answer a;
      a.status = 1;
      std::snprintf(a.message, sizeof a.message, "%s",
                    "wrong job token: this process's TUTTI_JOB_TOKEN differs from the job's");
      io_all(c.get(), &a, sizeof a, true, within);
      ++refused;
      continue;
    }
    taken.push_back(std::move(c));
  }
  listener.reset();  // the name disappears: later joiners wait for the next grow
  for (std::size_t i = 0; i < taken.size(); ++i) {
    join_answer a;
    a.rank = old_world + static_cast<int>(i);
    a.world = old_world + joiners;
    a.ring_bytes = opt.ring_bytes;
    a.window_bytes = opt.window_bytes;
    a.arena_bytes = opt.arena_bytes;
    a.single_copy = static_cast<std::int32_t>(opt.single_copy);
    std::snprintf(a.job_id, sizeof a.job_id, "%s", new_job.c_str());
    if (!io_all(taken[i].get(), &a, sizeof a, true, deadline))
      throw peer_lost("shm grow: joiner " + std::to_string(i) + " went away before it was given rank " + std::to_string(a.rank));
  }
}

TUTTI_COLD TUTTI_DECL joined ask_to_join(const std::string& base, const std::string& token,
                                         std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string name = join_name(base);
  if (token.size() > sizeof(join_hello{}.token)) throw config_error("TUTTI_JOB_TOKEN is longer than 256 bytes");
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    unique_fd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    socklen_t alen;
    sockaddr_un addr = abstract_address(name, alen);
    if (::connect(c.get(), reinterpret_cast<sockaddr*>(&addr), alen) == 0) {
      join_hello h;
      h.pid = static_cast<std::int32_t>(::getpid());
      h.token_bytes = static_cast<std::uint32_t>(token.size());
      std::memcpy(h.token, token.data(), token.size());
      join_answer a;
      if (io_all(c.get(), &h, sizeof h, true, deadline) && io_all(c.get(), &a, sizeof a, false, deadline) &&
          a.magic == join_magic) {
        if (a.status != 0)
          throw config_error("shm join: rank 0 of job '" + base + "' refused this process: " +
                             std::string(a.message, strnlen(a.message, sizeof a.message)));
        joined j;
        j.rank = a.rank;
        j.world = a.world;
        j.job_id.assign(a.job_id, strnlen(a.job_id, sizeof a.job_id));
        j.opt.ring_bytes = a.ring_bytes;
        j.opt.window_bytes = a.window_bytes;
        j.opt.arena_bytes = a.arena_bytes;
        j.opt.single_copy = static_cast<shm_options::mode>(a.single_copy);
        if (j.rank < 1 || j.rank >= j.world || j.job_id.empty())
          throw config_error("shm join: rank 0 sent a malformed answer");
        return j;
      }
      // Rank 0 stopped listening (it had its joiners) before answering: wait for the next grow.
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw timeout_error("shm join: no grow() of job '" + base + "' took this process within " +
                          std::to_string(timeout.count()) + " ms (is the job running, with this TUTTI_JOB_ID / "
                          "MASTER_PORT, and do its ranks call grow()?)");
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace tutti::detail::shm_impl
