/// \file
/// Definitions for tutti/bootstrap/net/sockets.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "tutti/bootstrap/net/sockets.hpp"

namespace tutti::detail::net {

TUTTI_COLD TUTTI_DECL std::string who_listens(int port) {
  std::set<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      ls >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      const auto colon = local.rfind(':');
      if (st != "0A" || colon == std::string::npos) continue;  // 0A: LISTEN
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) inodes.insert("socket:[" + inode + "]");
    }
  }
  if (inodes.empty()) return {};
  DIR* proc = ::opendir("/proc");
  if (!proc) return {};
  std::string found;
  while (dirent* d = ::readdir(proc)) {
    if (!found.empty()) break;
    if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
    const std::string base = std::string("/proc/") + d->d_name;
    DIR* fds = ::opendir((base + "/fd").c_str());
    if (!fds) continue;
    while (dirent* e = ::readdir(fds)) {
      char target[128];
      const ssize_t n = ::readlink((base + "/fd/" + e->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (inodes.count(target)) {
        std::ifstream comm(base + "/comm");
        std::string name;
        std::getline(comm, name);
        found = "pid " + std::string(d->d_name) + " (" + name + ")";
        break;
      }
    }
    ::closedir(fds);
  }
  ::closedir(proc);
  return found;
}

TUTTI_COLD TUTTI_DECL std::vector<sockaddr_storage> resolve(const std::string& host, int port, bool passive, std::string& why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  std::vector<sockaddr_storage> out;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    why = ::gai_strerror(rc);
    return out;
  }
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    sockaddr_storage s{};
    std::memcpy(&s, ai->ai_addr, ai->ai_addrlen);
    out.push_back(s);
  }
  ::freeaddrinfo(res);
  return out;
}

TUTTI_DECL std::string addr_host(const sockaddr_storage& s) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (s.ss_family == AF_INET6) ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(s).sin6_addr, buf, sizeof buf);
  else ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(s).sin_addr, buf, sizeof buf);
  return buf;
}

}  // namespace tutti::detail::net
