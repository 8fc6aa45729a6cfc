// tuttirun: the job's identity (port, id, token), per attempt, and the environment of each rank.
#pragma once

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "common.hpp"
#include "options.hpp"

namespace tuttirun {

inline int pick_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &res); rc != 0)
    throw launcher_error("cannot resolve --master-addr " + addr + ": " + ::gai_strerror(rc));
  std::string why = "no address";
  int port = 0;
  for (addrinfo* ai = res; ai && port == 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) { why = errno_text("socket"); continue; }
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) why = errno_text("bind");
    else if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) why = errno_text("getsockname");
    else if (sa.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
    else if (sa.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (port == 0) throw launcher_error("cannot pick a free port on " + addr + ": " + why);
  return port;
}

inline std::string to_hex(const unsigned char* p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

inline std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw launcher_error(errno_text("/dev/urandom"));
  ssize_t n = ::read(fd, buf.data(), bytes);
  ::close(fd);
  if (n != static_cast<ssize_t>(bytes)) throw launcher_error("short read from /dev/urandom");
  return to_hex(buf.data(), bytes);
}

// FNV-1a: the same input gives the same id on every node, which is all that is needed.
inline std::string derived_hex(std::string_view salt, std::string_view key) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : std::string(salt) + '\0' + std::string(key)) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(h >> (56 - 8 * i));
  return to_hex(b, 8);
}

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

struct job_identity {
  int port;
  std::string id, token;
};

inline job_identity make_identity(const options& o) {
  job_identity j;
  j.port = o.master_port ? *o.master_port : pick_free_port(o.master_addr);
  std::string key = o.master_addr + ":" + std::to_string(j.port);
  bool multi = o.nnodes > 1;
  j.id = env_or("TUTTI_JOB_ID", multi ? derived_hex("id", key) : random_hex(8));
  j.token = env_or("TUTTI_JOB_TOKEN", multi ? derived_hex("token-a", key) + derived_hex("token-b", key)
                                            : random_hex(16));
  if (const char* t = std::getenv("TUTTI_JOB_TOKEN"); multi && (!t || !*t))
    say("warning: no TUTTI_JOB_TOKEN with --nnodes > 1: the token is derived from " + key +
        ", so anyone who knows the address can join; export one random token on every node, e.g. "
        "TUTTI_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \\n')");
  return j;
}

// The longest TUTTI_JOB_ID tutti accepts.
inline constexpr std::size_t max_job_id = 64;

// A free port other than `previous`: the kernel may hand out the same one twice in a row, and a
// restart's rendezvous must not meet what is left of the attempt before (connections in
// TIME_WAIT, a straggler still dialling it).
inline int pick_other_free_port(const std::string& addr, int previous) {
  int port = pick_free_port(addr);
  for (int tries = 0; port == previous && tries < 20; ++tries) port = pick_free_port(addr);
  return port;
}

// What the ranks of attempt `attempt` see. Attempt 0: the job's identity. Later ones: the job id
// with "-r<attempt>" appended and a token derived from the job's and the attempt, the same on
// every node, so that a rank or connection left from an earlier attempt is refused by the new
// one's store and ranks; with one node and no --master-port, also a new free port.
inline job_identity attempt_identity(const options& o, const job_identity& job, long long attempt, int previous_port) {
  if (attempt == 0) return job;
  job_identity j = job;
  if (!o.master_port) j.port = pick_other_free_port(o.master_addr, previous_port);
  const std::string suffix = "-r" + std::to_string(attempt);
  j.id = (job.id.size() + suffix.size() <= max_job_id ? job.id : derived_hex("id", job.id)) + suffix;
  j.token = derived_hex("token-a" + suffix, job.token) + derived_hex("token-b" + suffix, job.token);
  return j;
}

// Rank variables of other launchers' conventions. tutti reads those too, and rejects an
// environment where they contradict RANK/WORLD_SIZE (tuttirun inside an srun or mpirun task).
inline constexpr std::string_view foreign_rank_vars[] = {
    "TUTTI_RANK", "TUTTI_WORLD_SIZE", "TUTTI_LOCAL_RANK", "TUTTI_LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
};

// The environment of one rank: tuttirun's own, with the launcher variables replaced and the
// other conventions' rank variables removed.
inline std::vector<std::string> rank_environment(const options& o, const job_identity& j, long long local_rank,
                                          long long attempt) {
  std::vector<std::string> vars = {
      "RANK=" + std::to_string(o.node_rank * o.nproc_per_node + local_rank),
      "WORLD_SIZE=" + std::to_string(o.nnodes * o.nproc_per_node),
      "LOCAL_RANK=" + std::to_string(local_rank),
      "LOCAL_WORLD_SIZE=" + std::to_string(o.nproc_per_node),
      "GROUP_RANK=" + std::to_string(o.node_rank),
      "NODE_RANK=" + std::to_string(o.node_rank),
      "MASTER_ADDR=" + o.master_addr,
      "MASTER_PORT=" + std::to_string(j.port),
      "TUTTI_JOB_ID=" + j.id,
      "TUTTI_JOB_TOKEN=" + j.token,
      "TUTTI_LAUNCHER=tuttirun",
      "TUTTI_RESTART_COUNT=" + std::to_string(attempt),
      "TORCHELASTIC_RESTART_COUNT=" + std::to_string(attempt),
      "TORCHELASTIC_MAX_RESTARTS=" + std::to_string(o.max_restarts),
  };
  auto overridden = [&](std::string_view entry) {
    auto name_eq = entry.substr(0, entry.find('=') + 1);
    auto name = name_eq.substr(0, name_eq.size() - 1);
    return std::any_of(vars.begin(), vars.end(), [&](const std::string& v) { return v.starts_with(name_eq); }) ||
           std::find(std::begin(foreign_rank_vars), std::end(foreign_rank_vars), name) != std::end(foreign_rank_vars);
  };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!overridden(*e)) env.emplace_back(*e);
  env.insert(env.end(), vars.begin(), vars.end());
  return env;
}

}  // namespace tuttirun
