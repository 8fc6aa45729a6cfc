/// \file
/// The rendezvous store's client (see tutti/bootstrap/store.hpp): one per rank.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/local_rendezvous.hpp"
#include "tutti/core/error.hpp"

#include "tutti/bootstrap/net/sockets.hpp"
#include "tutti/bootstrap/store/wire.hpp"

namespace tutti {

/// A client of the store. Blocking calls; each waits at most its timeout (plus a few seconds for
/// a slow server) and raises `timeout_error`, `peer_lost` (the server went away) or
/// `config_error` (refused: token, job id, world size, duplicate rank; or what listens on the
/// port is not a tutti store).
class store {
 public:
  /// Connects to `host:port`, retrying while the port refuses connections (the server may not be
  /// up yet) until `timeout` passes. Once connected, the welcome must come within
  /// `welcome_within` (5 s) and be tutti's: otherwise `config_error` at once, naming the address
  /// (another program holds the port). `rank` -1 and `world_size` 0: an anonymous client (tools,
  /// tests). `job_id`: the job this client belongs to (a store of another job refuses it);
  /// empty where it does not know it (a joiner, a tool).
  TUTTI_COLD store(const std::string& host, int port, int rank, int world_size, const std::string& token,
        std::chrono::milliseconds timeout, const std::string& job_id = {});

  void set(std::string_view key, std::string_view value);

  /// The value of `key`, waiting up to `timeout` for some rank to set it.
  std::string get(std::string_view key, std::chrono::milliseconds timeout);

  /// Returns once every key exists; `timeout_error` naming the missing ones otherwise.
  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout);

  /// Adds `delta` to the counter `key` (0 when absent) and returns the new value, atomically.
  long long add(std::string_view key, long long delta);

  /// This end of the connection: the address other hosts reach this one by, on the route to
  /// the master.
  sockaddr_storage local_address() const;
  const std::string& where() const noexcept { return where_; }

  /// Sends raw bytes as one frame (for tests of the server's checks).
  std::string raw_call(const std::string& body, std::chrono::milliseconds timeout) { return call(body, timeout, "raw"); }

 private:
  static void check_key(std::string_view key) {
    if (key.size() > detail::store_impl::max_key) throw usage_error("store: key longer than 4096 bytes");
  }

  static bool connect_by(int fd, const sockaddr_storage& a, std::chrono::steady_clock::time_point deadline,
                         std::string& why);

  void io(void* buf, std::size_t n, bool writing, std::chrono::steady_clock::time_point deadline);

  std::string call(const std::string& body, std::chrono::milliseconds timeout, std::string_view key);

  std::string where_;
  detail::unique_fd fd_;
};

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/bootstrap/store/client.ipp"
#endif
