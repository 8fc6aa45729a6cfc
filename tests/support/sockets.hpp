// Test helpers for what the kernel says about sockets, and for what a process writes to stderr.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tutti::test {

/// A port on 127.0.0.1 that was free a moment ago (the kernel's pick for an unbound socket).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("free_port: socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("free_port: bind() or getsockname() failed");
  return ntohs(a.sin_port);
}

/// The addresses ("127.0.0.1", "::1", "0.0.0.0", "::") of the sockets that listen on TCP `port`
/// in this network namespace, from /proc/net/tcp and /proc/net/tcp6.
inline std::vector<std::string> listening_addresses(int port) {
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);  // the column titles
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      std::string sl, local, remote, st;
      ls >> sl >> local >> remote >> st;
      const auto colon = local.rfind(':');
      if (st != "0A" || colon == std::string::npos) continue;  // 0A: LISTEN
      if (std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
      // Each 32-bit word of the address is printed as the host reads it from network order.
      const std::string hex = local.substr(0, colon);
      unsigned char bytes[16] = {};
      for (std::size_t w = 0; w < hex.size() / 8 && w < 4; ++w) {
        const auto v = static_cast<std::uint32_t>(std::stoul(hex.substr(8 * w, 8), nullptr, 16));
        std::memcpy(bytes + 4 * w, &v, 4);
      }
      char buf[INET6_ADDRSTRLEN] = {};
      ::inet_ntop(hex.size() == 8 ? AF_INET : AF_INET6, bytes, buf, sizeof buf);
      out.emplace_back(buf);
    }
  }
  return out;
}

/// Sends what this process writes to stderr (fd 2, every thread) to a temporary file while it
/// lives; `text()` reads what has been written so far.
class stderr_capture {
 public:
  stderr_capture() : file_(std::tmpfile()) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    ::dup2(::fileno(file_), 2);
  }
  stderr_capture(const stderr_capture&) = delete;
  stderr_capture& operator=(const stderr_capture&) = delete;
  ~stderr_capture() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    std::fclose(file_);
  }
  std::string text() const {
    std::fflush(stderr);
    std::string all;
    char buf[4096];
    for (off_t at = 0;;) {
      const ssize_t k = ::pread(::fileno(file_), buf, sizeof buf, at);
      if (k <= 0) break;
      all.append(buf, static_cast<std::size_t>(k));
      at += k;
    }
    return all;
  }

 private:
  std::FILE* file_;
  int saved_ = -1;
};

}  // namespace tutti::test
