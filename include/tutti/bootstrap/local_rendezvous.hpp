/// \file
/// Start-up of the processes of one host: rank 0 creates the job's shared segment (an anonymous
/// memfd, so no file exists anywhere) and hands it to every other rank over an abstract Unix
/// socket named after the user id and the job id (abstract names vanish with their socket, so
/// nothing is left behind even after SIGKILL). Peers must run as the same user (SO_PEERCRED).
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/error.hpp"

namespace tutti::detail {

/// An owned file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept;
  ~unique_fd() { reset(); }
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

inline std::string errno_text(int e) { return std::string(std::strerror(e)); }

struct rendezvous_hello {
  std::uint64_t magic;
  std::uint32_t version;
  std::int32_t rank;
  std::int32_t world_size;
  std::int32_t pid;
  std::uint64_t segment_bytes;
};
struct rendezvous_welcome {
  std::uint64_t magic;
  std::int32_t status;  // 0 ok, else the segment is withheld and `message` says why
  std::int32_t world_size;
  char message[240];
};
inline constexpr std::uint64_t rendezvous_magic = 0x74757474692d7276ull;  // "tutti-rv"
/// 1, plus 1000 times the collective table's wire version (core/collective.hpp): builds whose
/// collectives travel under other values refuse each other here.
inline constexpr std::uint32_t rendezvous_version = 1 + 1000 * collective_wire_version;

/// What start-up yields: the segment's descriptor and every rank's pid.
struct rendezvous_result {
  unique_fd segment;
  std::vector<int> pids;
};

/// One welcome with room for one descriptor (SCM_RIGHTS), ready for sendmsg/recvmsg. Built in
/// place: the message points into the object itself.
struct welcome_message {
  rendezvous_welcome body{};
  iovec iov{&body, sizeof body};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};

  welcome_message();
  welcome_message(const welcome_message&) = delete;
  welcome_message& operator=(const welcome_message&) = delete;

  void attach(int fd);
  /// The descriptor that came with a received message, or -1.
  int attached();
};

TUTTI_DECL sockaddr_un abstract_address(const std::string& name, socklen_t& len);

TUTTI_DECL bool io_all(int fd, void* buf, std::size_t n, bool writing, std::chrono::steady_clock::time_point deadline);

TUTTI_COLD TUTTI_DECL void check_peer_uid(int fd, const std::string& who);

/// Rank 0: creates the segment and serves it to ranks 1..world_size-1.
TUTTI_COLD TUTTI_DECL rendezvous_result serve_segment(const std::string& name, int world_size, std::uint64_t segment_bytes,
                                                      std::chrono::milliseconds timeout);

/// Ranks 1..: connects to rank 0 (retrying until it is up) and receives the segment.
TUTTI_COLD TUTTI_DECL rendezvous_result join_segment(const std::string& name, int rank, int world_size, std::uint64_t segment_bytes,
                                                     std::chrono::milliseconds timeout);

}  // namespace tutti::detail

#if defined(TUTTI_DEFINITIONS)
#include "tutti/bootstrap/local_rendezvous.ipp"
#endif
