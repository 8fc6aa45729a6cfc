/// \file
/// Which host a process runs on, as ranks compare it: a key built from the hostname (whole, not
/// cut at the first dot), the kernel's boot id, and the ids of the IPC and network namespaces,
/// or `TUTTI_NODE_ID` where set. Two processes with equal keys share a kernel, its shared memory
/// and its loopback; containers that share a hostname (or a boot id) but not a namespace, and
/// network namespaces standing in for hosts, get different keys. A mesh uses it to check that an
/// axis given a one-host transport (`tutti::shm`) lies within hosts.
#pragma once

#include <cstdint>
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
  TUTTI_COLD static node_identity of_this_process();

 private:
  static std::string link_of(const char* path);
};

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/bootstrap/locality.ipp"
#endif
