/// \file
/// What a transport asks of the host it runs on: how many cores this process may use (ranks
/// that outnumber them must not spin), and whether a local process is stopped (SIGSTOP, a
/// debugger) rather than slow, so a timeout can name the rank that holds everyone up.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "tutti/detail/attributes.hpp"

namespace tutti::toolkit {

/// The cores this process may run on (its affinity mask), at least 1.
inline int cores_available() noexcept {
  cpu_set_t cpus;
  const int n = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  return n > 0 ? n : 1;
}

/// Whether `local_ranks` ranks on this host outnumber its cores: then a waiting rank must not
/// spin, or it starves the rank it waits for.
inline bool oversubscribed(int local_ranks) noexcept { return local_ranks > cores_available(); }

/// Whether process `pid` (of this host) is stopped (SIGSTOP, SIGTSTP, a tracer), from /proc.
TUTTI_COLD inline bool process_stopped(int pid) noexcept {
  if (pid <= 0) return false;
  char path[64], buf[512];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');  // the command name may contain anything
  return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'T' || close_paren[2] == 't');
}

}  // namespace tutti::toolkit
