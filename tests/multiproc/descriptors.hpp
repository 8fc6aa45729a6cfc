// Which of this process's descriptors belong to tutti's transports, identified exactly, for the
// fault tests' check that a survivor holds none of them after a failure (fault_kill.cpp,
// fault_random.cpp; the check itself: descriptors_check.cpp).
//
// Not "every link target in /proc/self/fd that contains 'tutti'": ctest hands each test its own
// log file (.../build/Testing/Temporary/LastTest.log.tmp, inherited as descriptor 3), so under a
// build path containing "tutti" (the folder `git clone` makes) every survivor counted one. What
// is counted instead:
// - the shm segment: a memfd made as `memfd_create("tutti:" + name)` (bootstrap/
//   local_rendezvous.hpp), whose link target reads "/memfd:tutti:<name> (deleted)";
// - the tcp mesh's sockets: "socket:[inode]" for the inodes recorded (`socket_inode` of
//   `tcp::native_handle(peer, stream)`) while the transport was up.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace tutti::test {

/// The link target of every open descriptor of this process ("socket:[123]", "/dev/null", ...).
inline std::vector<std::string> descriptor_targets() {
  std::vector<std::string> out;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(fd.path(), ec);
    if (!ec) out.push_back(target.string());
  }
  return out;
}

/// The link target of tutti's shm segment (its memfd's name is "tutti:" + the segment name).
inline bool is_segment(std::string_view target) { return target.starts_with("/memfd:tutti:"); }

/// The inode of socket descriptor `fd` (its link target is "socket:[inode]"); 0 if not a socket.
inline std::uint64_t socket_inode(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return static_cast<std::uint64_t>(st.st_ino);
}

/// The descriptors of this process that are a tutti shm segment or one of `sockets` (inodes
/// from `socket_inode`).
inline int transport_descriptors(const std::set<std::uint64_t>& sockets = {}) {
  std::set<std::string> socket_targets;
  for (const auto ino : sockets) socket_targets.insert("socket:[" + std::to_string(ino) + "]");
  int n = 0;
  for (const auto& t : descriptor_targets())
    if (is_segment(t) || socket_targets.count(t)) ++n;
  return n;
}

/// The inodes of a tcp transport's mesh sockets (every stream to every other rank), for
/// `transport_descriptors` after the failure.
template <class Tcp>
std::set<std::uint64_t> mesh_sockets(const Tcp& t) {
  std::set<std::uint64_t> out;
  for (int peer = 0; peer < t.size(); ++peer)
    for (int s = 0; peer != t.rank() && s < t.options().streams; ++s)
      if (const auto ino = socket_inode(t.native_handle(peer, s))) out.insert(ino);
  return out;
}

}  // namespace tutti::test
