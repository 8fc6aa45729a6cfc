/// \file
/// The rendezvous store's server (see tutti/bootstrap/store.hpp): a thread of rank 0's process.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/local_rendezvous.hpp"
#include "tutti/bootstrap/progress.hpp"
#include "tutti/core/error.hpp"

#include "tutti/bootstrap/net/sockets.hpp"
#include "tutti/bootstrap/store/wire.hpp"

namespace tutti {

/// Rank 0's side of the store: a thread serving clients until the object is destroyed.
class store_server {
 public:
  /// Listens on `host:port` (port 0: any free port, see `port()`); `host` empty: every address.
  /// `world_size` 0 accepts any client; otherwise a client's world size must match. `token`
  /// empty accepts any token. `job_id`: the job it serves; a client that names another is
  /// refused (empty, on either side: not checked). `startup_timeout`: the start-up's deadline,
  /// for a job whose ranks sign in with their ranks (tutti::tcp's first job): until all have,
  /// the server says on stderr which have and which have not, at growing intervals
  /// (bootstrap/progress.hpp), and a wait that times out meanwhile names the missing ranks to
  /// its client. 0: neither (the ranks of a successor sign in anonymously; tools, tests).
  /// Throws `config_error` when the port is taken, naming the holder.
  TUTTI_COLD store_server(const std::string& host, int port, int world_size, std::string token, std::string job_id = {},
                          std::chrono::milliseconds startup_timeout = {});
  store_server(const store_server&) = delete;
  store_server& operator=(const store_server&) = delete;
  ~store_server();

  /// The port it listens on (the real one when constructed with port 0).
  int port() const noexcept { return port_; }
  /// The address it listens on: "127.0.0.1" for a loopback MASTER_ADDR, "0.0.0.0" or "::" for
  /// every address.
  const std::string& address() const noexcept { return address_; }

 private:
  using clock = std::chrono::steady_clock;
  struct conn {
    detail::unique_fd fd;
    std::string in, out;
    bool hello = false, closing = false;
    std::uint64_t id = 0;
    std::string peer;  // "host:port" of the client, for the log
    clock::time_point accepted;
  };
  struct pending {
    std::uint64_t conn;
    std::vector<std::string> keys;
    bool get;  // reply with the value of keys[0]
    clock::time_point deadline;
  };

  void serve();

  void reply(conn& c, detail::store_impl::status s, std::string_view payload) {
    detail::store_impl::writer w;
    w.num(static_cast<std::uint8_t>(s)).str(payload);  // a reply: status, length, payload
    c.out += w.out;
  }
  /// Logs a connection the server refuses or drops, naming the client's address and why (never
  /// the token). At most `max_logged` lines, so a port scanner cannot flood rank 0's stderr.
  void refused(const conn& c, const std::string& why);

  /// Consumes the complete messages in `c.in` (parsed by `parse_hello` and `parse_request`);
  /// false once the connection is to be closed. A malformed message gets an error reply (none
  /// for a stranger: it may not even speak TCP to us on purpose) and the connection is dropped.
  bool handle(conn& c);

  /// Answers the waits whose keys exist, whose deadline passed, or that a start-up problem ends.
  void expire_and_answer(std::map<std::uint64_t, conn>& conns);

  /// The ranks that have not signed in yet, while the start-up is watched and not over (no
  /// problem, not every rank in); empty otherwise.
  std::vector<int> not_signed_in() const;
  /// While the start-up is watched: a line on stderr when one is due, naming who has signed in
  /// and who has not; the watch ends once every rank has.
  void startup_word();

  int world_size_;
  std::string token_, job_id_;
  int port_ = 0;
  std::string address_, where_;  // the listening address, and with its port for the log
  std::string master_;           // MASTER_ADDR:MASTER_PORT as the ranks are told it
  int logged_ = 0;               // refusals logged (server thread only)
  detail::unique_fd listener_, wake_;
  std::thread thread_;
  // Touched by the server thread only.
  std::map<std::string, std::string> data_;
  std::vector<pending> pending_;
  std::set<int> ranks_;   // the ranks that signed in; all of them: the job has started
  std::string problem_;   // a start-up problem, answered to every wait from then on
  std::optional<detail::startup_progress> progress_;  // the start-up watched, until every rank signed in
};

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/bootstrap/store/server.ipp"
#endif
