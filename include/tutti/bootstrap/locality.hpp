/// \file
/// Which host a process runs on, as ranks compare it: a key built from the hostname (whole, not
/// cut at the first dot), the kernel's boot id, and the ids of the IPC and network namespaces,
/// or `TUTTI_NODE_ID` where set. Two processes with equal keys share a kernel, its shared memory
/// and its loopback; containers that share a hostname (or a boot id) but not a namespace, and
/// network namespaces standing in for hosts, get different keys. A mesh uses it to check that an
/// axis given a one-host transport (`tutti::shm`) lies within hosts.
#pragma once

#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "tutti/core/dtype.hpp"
#include "tutti/detail/attributes.hpp"

namespace tutti {

/// This process's host, as its parts (for messages) and as the key ranks compare.
struct node_identity {
  std::string hostname;       ///< gethostname(), whole
  std::string boot_id;        ///< /proc/sys/kernel/random/boot_id
  std::string ipc_namespace;  ///< /proc/self/ns/ipc, e.g. "ipc:[4026531839]"
  std::string net_namespace;  ///< /proc/self/ns/net
  std::string given;          ///< TUTTI_NODE_ID, which replaces the rest when set

  /// Equal keys: the same host.
  std::string key() const {
    if (!given.empty()) return "TUTTI_NODE_ID=" + given;
    return hostname + " boot " + boot_id + " " + ipc_namespace + " " + net_namespace;
  }
  std::uint64_t hash() const { return detail::fnv1a(key()); }

  /// This process's, read now (TUTTI_NODE_ID may change between calls, as tests do).
  TUTTI_COLD static node_identity of_this_process() {
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

 private:
  static std::string link_of(const char* path) {
    std::array<char, 128> buf{};
    const ssize_t got = readlink(path, buf.data(), buf.size() - 1);
    return got > 0 ? std::string(buf.data(), static_cast<std::size_t>(got)) : std::string("?");
  }
};

}  // namespace tutti
