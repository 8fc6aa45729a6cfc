/// \file
/// Definitions for tutti/bootstrap/locality.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <fstream>

#include "tutti/bootstrap/locality.hpp"

namespace tutti {

TUTTI_COLD TUTTI_DECL node_identity node_identity::of_this_process() {
  node_identity n;
  if (const char* id = std::getenv("TUTTI_NODE_ID"); id && *id) n.given = id;
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) == 0) n.hostname = host.data();
  if (n.hostname.empty()) n.hostname = "?";
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  if (!std::getline(boot, n.boot_id) || n.boot_id.empty()) n.boot_id = "?";
  n.ipc_namespace = link_of("/proc/self/ns/ipc");
  n.net_namespace = link_of("/proc/self/ns/net");
  return n;
}

TUTTI_DECL std::string node_identity::link_of(const char* path) {
  std::array<char, 128> buf{};
  const ssize_t got = readlink(path, buf.data(), buf.size() - 1);
  return got > 0 ? std::string(buf.data(), static_cast<std::size_t>(got)) : std::string("?");
}

}  // namespace tutti
