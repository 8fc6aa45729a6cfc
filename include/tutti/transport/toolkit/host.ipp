/// \file
/// Definitions for tutti/transport/toolkit/host.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "tutti/transport/toolkit/host.hpp"

namespace tutti::toolkit {

TUTTI_DECL int cores_available() noexcept {
  cpu_set_t cpus;
  const int n = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  return n > 0 ? n : 1;
}

TUTTI_COLD TUTTI_DECL bool process_stopped(int pid) noexcept {
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
