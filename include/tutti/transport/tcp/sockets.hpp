/// \file
/// The tcp transport's sockets (on standalone Asio): one connection to a peer (`link`), the
/// connections waiting on a rank's acceptor to say their hello (`hello_queue`), the set of a
/// rank's connections that every copy of its transport shares (`connections`), and the start-up
/// helpers around them: the advertised address, socket buffers, connecting and moving a few
/// bytes by a deadline.
#pragma once

#ifndef ASIO_STANDALONE
#define ASIO_STANDALONE
#endif
#include <asio.hpp>

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/net/sockets.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/detail/buffer.hpp"
#include "tutti/transport/tcp/options.hpp"
#include "tutti/transport/tcp/wire.hpp"

namespace tutti::detail::tcp_impl {

struct p2p_engine;  // tcp/matching.ipp

/// One connection to a peer.
struct link {
  explicit link(asio::io_context& io) : sock(io) {}
  asio::ip::tcp::socket sock;
  bool clean = true;     // sending side between messages: a notice may be written
  bool in_clean = true;  // receiving side between messages: what comes next is a frame
  std::string stalled;   // the peer's stall notice (it timed out, a failure notice follows)
  std::string note;      // the peer's last words (a usage error), if it left any
  scratch_buffer bounce;
  int fd() { return static_cast<int>(sock.native_handle()); }
};

/// How long a connection to a rank's acceptor has to say its whole hello: a quarter of the
/// job's timeout, at least 1 s (a rank sends its hello as soon as it has connected, but a loaded
/// host may hold it back a moment) and at most `net::hello_within`; never more than the timeout.
inline std::chrono::milliseconds hello_time(std::chrono::milliseconds timeout) {
  const std::chrono::milliseconds quarter = timeout / 4, floor = std::chrono::seconds(1), cap = net::hello_within;
  return std::min(timeout, std::clamp(quarter, floor, cap));
}

/// The connections accepted on a rank's acceptor that have not yet said their whole hello.
/// Every accept path (start-up's, a group's, a shrink's) serves them through this, the same way:
/// side by side, each hello read as its bytes arrive, so a connection that says nothing delays
/// no other. A connection that breaks the protocol, closes, or says nothing whole within the
/// hello time (`hello_time`) is closed and logged. At most `net::max_silent` wait at once, at
/// most `net::max_silent_per_address` from one address: a new one closes the oldest of its
/// address, else the oldest. Guarded by what guards the acceptor (`connections::joining` once
/// the start-up is over).
class hello_queue {
 public:
  using clock = std::chrono::steady_clock;
  struct waiting {
    std::unique_ptr<link> l;
    std::string in;    // the hello's bytes so far: never more than the hello's own
    std::string from;  // "host:port" of the peer, for the log
    std::string host;  // the peer's address, for the cap per address
    clock::time_point accepted;
  };
  /// Called with each hello that arrived whole (`mesh` or `group`, its views into `w.in`): it
  /// takes `w.l` to keep the connection; a connection left in `w` is closed.
  using handler = std::function<void(waiting& w, const mesh_hello* mesh, const group_hello* group)>;

  /// Accepts every connection waiting on `acceptor` (reading its hello at once: a rank's has
  /// usually arrived with it), then reads what has arrived on every connection still waiting,
  /// without blocking. Refusals are logged as rank `rank`'s (`log_refusal`, counted in `logged`).
  void serve(asio::ip::tcp::acceptor& acceptor, asio::io_context& io, std::chrono::milliseconds within, int rank,
             int& logged, const handler& on_hello);

  /// Appends what to poll for: the acceptor and every waiting connection.
  void add_fds(asio::ip::tcp::acceptor& acceptor, std::vector<pollfd>& fds) const;

  std::size_t size() const noexcept { return waiting_.size(); }

 private:
  /// Reads what has arrived on `w`: true once it is done with (handed over, refused, gone, or
  /// silent past `within`).
  static bool read(waiting& w, std::chrono::milliseconds within, int rank, int& logged, const handler& on_hello);

  /// Closes the oldest connection waiting from `host` when it has its share, else the oldest
  /// when the queue is full: room for one more.
  void make_room(const std::string& host, int rank, int& logged);

  std::vector<waiting> waiting_;
};

/// The bytes a hello (a mesh's or a group's, alike past their fixed part) needs in all, as far
/// as `in` tells: the fixed part and the job id's length, then the job id and the token's
/// length, then the token. A reader asks for no more, so it never takes the bytes that follow.
TUTTI_DECL std::size_t hello_bytes_wanted(std::string_view in);

/// Closes `links` without losing what this rank sent last (see `connections::~connections`):
/// shuts down the sending side of each (a FIN after the data), then, until every peer has
/// acknowledged all of it or `linger` has passed, reads and drops whatever arrives (a peer's
/// waiting notice for a call this rank has left, its FIN). A socket closed with unread bytes
/// sends a reset, and a reset throws away what the kernel had not yet delivered: the peer
/// would lose this rank mid-message.
///
/// `sent_is_enough`: stop waiting once everything has left this host (nothing unsent), without
/// waiting for the acknowledgements (which a peer's delayed ACK may hold back 40 ms): what a
/// reset throws away is what was never sent (`tcp::fail`, which must return promptly).
TUTTI_DECL void close_gracefully(std::vector<link*> links, std::chrono::milliseconds linger,
                                 bool sent_is_enough = false) noexcept;

/// What every copy of one rank's transport shares: its connections and the store.
struct connections {
  connections() = default;
  connections(const connections&) = delete;
  connections& operator=(const connections&) = delete;
  /// Closes the connections still open (`fail` closes them at once) gracefully: a rank that
  /// returns right after its last send must not cut off a peer still reading it.
  ~connections();

  asio::io_context io;
  std::chrono::milliseconds linger{10000};  // the longest close_gracefully waits for the peers
  std::chrono::milliseconds timeout{300000};  // start-up's deadline; a group's connections wait as long
  /// A group's connections: the world's, whose acceptor and addresses make them (null for the world).
  std::shared_ptr<connections> world;
  int world_rank = 0, world_size = 1;
  fingerprint told{};  // the call this rank last sent waiting notices for (tcp::tell_waiting)
  tcp_options opt;
  bool oversubscribed = false;
  /// [world rank][stream]: the `opt.streams` links of the collectives, then point-to-point's
  /// own (`links_per_peer`).
  std::vector<std::vector<std::unique_ptr<link>>> peers;
  std::shared_ptr<p2p_engine> p2p;  // point-to-point's matching (tcp/matching.hpp)
  std::shared_ptr<store_server> server;                   // rank 0: the store lives as long as this (and successors)
  std::string failure;                                    // set by fail(): the transport is unusable

  // The world's, for the groups' own connections (tcp::sub): every rank keeps listening, knows
  // every rank's address, and keeps the connections of groups still being made by other threads.
  struct arrival {
    std::uint64_t context;
    int from, stream;
    std::unique_ptr<link> l;
  };
  std::mutex joining;  // guards the acceptor, `waiting` and `arrived`
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor;
  hello_queue waiting;  // connections on the acceptor whose hello has not arrived whole
  std::vector<asio::ip::tcp::endpoint> addresses;  // [world rank]
  std::vector<arrival> arrived;
  std::string job_id, token;
  int refusals_logged = 0;
  job_env job;            // as the world started (a shrink starts its new job from it)
  config cfg;
  std::uint32_t shrinks = 0;  // agreements this world has started (tcp/shrink.hpp)
  std::uint32_t grows = 0;    // grows this world has started (tcp/grow.hpp)
  long long joiners_taken = 0;  // rank 0: joiners' tickets its store has handed to grows
};

/// The links a rank keeps to each peer: the collectives' streams and point-to-point's own (the
/// last, numbered `o.streams`).
inline int links_per_peer(const tcp_options& o) { return o.streams + 1; }

inline std::string sockaddr_text(const asio::ip::tcp::endpoint& e) {
  return net::host_port(e.address().to_string(), e.port());
}

/// The address of interface `ifname`, preferring `family`; `config_error` listing the
/// interfaces when it has none.
asio::ip::address interface_address(const std::string& ifname, int family);

TUTTI_DECL std::size_t sysctl_value(const char* path);

/// The buffer sizes, set before connect/listen (the window scale is fixed then).
template <class Socket>
void set_buffers(Socket& s, const tcp_options& o) {
  if (o.buffer_bytes == 0) return;
  const bool snd = o.buffer_forced || sysctl_value("/proc/sys/net/core/wmem_max") >= o.buffer_bytes;
  const bool rcv = o.buffer_forced || sysctl_value("/proc/sys/net/core/rmem_max") >= o.buffer_bytes;
  asio::error_code ec;
  if (snd) s.set_option(asio::socket_base::send_buffer_size(static_cast<int>(o.buffer_bytes)), ec);
  if (rcv) s.set_option(asio::socket_base::receive_buffer_size(static_cast<int>(o.buffer_bytes)), ec);
}

/// Writes or reads all of `buf` on a non-blocking socket by the deadline (start-up, notices).
TUTTI_DECL void io_by(link& l, void* buf, std::size_t n, bool writing, std::chrono::steady_clock::time_point deadline,
                      const std::string& what);

/// One attempt to connect `l` to `ep`, waiting at most 5 s of what is left until `deadline`:
/// 0, or the errno that says why not (ECONNREFUSED: nothing listens there).
int connect_once(link& l, const asio::ip::tcp::endpoint& ep, const tcp_options& opt,
                 std::chrono::steady_clock::time_point deadline);

/// Connects `l` to `ep` by the deadline, retrying while the peer is not listening yet.
void connect(link& l, const asio::ip::tcp::endpoint& ep, const tcp_options& opt,
             std::chrono::steady_clock::time_point deadline, int me, int peer);

}  // namespace tutti::detail::tcp_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/tcp/sockets.ipp"
#endif
