/// \file
/// `tutti::tcp`: ranks on any hosts, over TCP, on standalone Asio (`ASIO_STANDALONE`; CMake
/// target `tutti::tcp`, Debian `libasio-dev`). Not included by `tutti/tutti.hpp`.
///
/// - Start-up (`tcp::from_env`): rank 0 serves the rendezvous store (`store_server`) on
///   `MASTER_ADDR:MASTER_PORT`; every rank listens on an ephemeral port of the address it
///   advertises, publishes "address port" in the store, connects to every higher rank and
///   accepts every lower one: a full mesh, `TUTTI_TCP_STREAMS` connections per pair, each
///   opened with a hello (job token, job id, ranks, world size, stream count) that the acceptor
///   checks and answers. The advertised address is that of `TUTTI_SOCKET_IFNAME` when set,
///   otherwise the local address of this rank's connection to the store (the address on the
///   route to the master); IPv4 and IPv6 both work.
/// - A connection whose hello is not a rank of this job's (wrong magic, version, token or job
///   id, a length past its cap, a hello cut short) is refused, closed and logged on stderr with
///   the peer's address and what was wrong (never the token), and the start-up goes on; a rank
///   of this job that disagrees (world size, streams, a duplicate rank) fails it. The hello, the
///   answer and the frame header are parsed by pure functions (`detail::tcp_impl::
///   parse_mesh_hello`, `store_impl::parse_answer_head`, `parse_frame_head`), which the fuzz
///   target `tests/fuzz/tcp_frame.cpp` calls too; an acceptor buffers at most one hello
///   (`max_hello_bytes`, 548) per connection.
/// - Sockets: `TCP_NODELAY`; `SO_SNDBUF`/`SO_RCVBUF` of `TUTTI_TCP_BUFFER_BYTES` (default 4 MiB,
///   applied only where the kernel's `net.core.[rw]mem_max` allows it, since a clamped buffer
///   is smaller than what autotuning reaches; set the variable to force it, 0 to leave the
///   kernel's autotuning).
/// - A message is a 64-byte header (magic, the fingerprint with the communicator's context, the
///   byte count) and the payload, written with one gather write (`sendmsg` of both buffers)
///   straight from the caller's memory. The receiver reads the header, checks it
///   (`detail::check_header`), then reads the payload straight into the destination. With
///   several streams, payloads of at least `TUTTI_TCP_STRIPE_BYTES` (256 KiB) are cut into one
///   64-byte aligned part per stream, moved at once.
/// - `recv_with` (`zero_copy_recv`) reads in pieces of 256 KiB into a per-connection buffer and
///   hands each piece to the consumer as it completes, so a reduction overlaps the arrival of
///   the rest of the message; `recv` does not use it.
/// - Sockets are non-blocking; a call moves whatever it can on every socket it uses (so
///   `sendrecv` is full duplex, with no helper thread), spins briefly (`TUTTI_TCP_SPIN_US`),
///   then waits in `poll()` no longer than the deadline: `timeout_error` names the peer, the
///   collective, the algorithm and the bytes.
/// - Sub-groups share the world's connections: collectives are blocking and every rank calls
///   them in the same order, so messages between two ranks arrive in the order they are read;
///   the fingerprint (with the group's context) catches any disagreement. For the same reason
///   the communicators of one rank must not be used from several threads at once.
/// - A peer that closes its connection (exit, crash, `fail()`) raises `peer_lost` naming it;
///   `fail()` first sends the reason, when the stream is between messages. A header without the
///   magic raises `error(errc::aborted)` naming the peer.
/// - A rank that times out first tells every peer so (a stall notice with its message, where the
///   stream is between messages), then waits half a second for a notice from the peer it waited
///   for (after a stall notice, up to a second more for the failure notice that follows). If
///   that peer is itself stuck (it waits for a stopped rank, say), the error carries the peer's
///   message, so a chain of waiting ranks names the rank that holds them up, whichever of them
///   timed out first. A reader that finds a stall notice keeps waiting for the final one.
/// - Ranks that disagree about a call may each wait to receive from the other (two ranks that
///   each take the other for the root). A receive without its header after 20 ms writes a
///   64-byte waiting notice (its fingerprint) to every peer, once per call, where the stream is
///   between messages; a peer that meets it where it expects a header from a different call
///   raises `mismatch_error` naming both, and drops it otherwise.
#pragma once

#ifndef ASIO_STANDALONE
#define ASIO_STANDALONE
#endif
#include <asio.hpp>

#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/detail/buffer.hpp"
#include "tutti/detail/futex.hpp"
#include "tutti/transport/transport.hpp"

namespace tutti {

/// Settings of the tcp transport, from the environment (`tcp_options::from_env`).
struct tcp_options {
  int streams = 1;                                     ///< TUTTI_TCP_STREAMS: connections per pair (1-16)
  std::size_t buffer_bytes = std::size_t{4} << 20;     ///< TUTTI_TCP_BUFFER_BYTES; 0: kernel autotuning
  bool buffer_forced = false;                          ///< the variable was set: apply it even if clamped
  std::size_t stripe_bytes = std::size_t{256} << 10;   ///< TUTTI_TCP_STRIPE_BYTES: smallest striped payload
  std::chrono::microseconds spin{20};                  ///< TUTTI_TCP_SPIN_US: busy-poll before blocking
  std::string ifname;                                  ///< TUTTI_SOCKET_IFNAME

  static tcp_options from_env() {
    tcp_options o;
    if (auto v = detail::env_int("TUTTI_TCP_STREAMS", 1, 16)) o.streams = static_cast<int>(*v);
    if (auto v = detail::env_int("TUTTI_TCP_BUFFER_BYTES", 0, 1L << 30)) {
      o.buffer_bytes = static_cast<std::size_t>(*v);
      o.buffer_forced = true;
    }
    if (auto v = detail::env_int("TUTTI_TCP_STRIPE_BYTES", 64, 1L << 30)) o.stripe_bytes = static_cast<std::size_t>(*v);
    if (auto v = detail::env_int("TUTTI_TCP_SPIN_US", 0, 1000000)) o.spin = std::chrono::microseconds(*v);
    if (const char* i = detail::getenv_nonempty("TUTTI_SOCKET_IFNAME")) o.ifname = i;
    return o;
  }
};

namespace detail::tcp_impl {

inline constexpr std::uint64_t message_magic = 0x67736d2d69747475ull;  // "utti-msg"
inline constexpr std::uint64_t failure_magic = 0x6c69616669747475ull;  // "uttifail"
inline constexpr std::uint64_t stall_magic = 0x6c61747369747475ull;    // "uttistal"
inline constexpr std::uint64_t hello_magic = 0x6f6c6c6569747475ull;    // "uttiello"
inline constexpr std::uint64_t waiting_magic = 0x7469617769747475ull;  // "uttiwait"
/// A receive still without its header after this long tells the peer what it waits for.
inline constexpr std::chrono::milliseconds waiting_notice_after{20};
inline constexpr std::uint32_t hello_version = 1;
inline constexpr std::size_t piece_bytes = std::size_t{256} << 10;    // recv_with hands pieces of this size
inline constexpr std::size_t max_failure_text = 1024;

/// The 64 bytes in front of every payload.
struct wire_header {
  std::uint64_t magic;
  std::uint64_t fp[6];
  std::uint64_t bytes;
};
static_assert(sizeof(wire_header) == 64 && sizeof(fingerprint) <= 48);

/// One connection to a peer.
struct link {
  explicit link(asio::io_context& io) : sock(io) {}
  asio::ip::tcp::socket sock;
  bool clean = true;     // sending side between messages: a failure notice may be written
  bool in_clean = true;  // receiving side between messages: what comes next is a header
  std::string stalled;   // the peer's stall notice (it timed out, a failure notice follows)
  scratch_buffer bounce;
  int fd() { return static_cast<int>(sock.native_handle()); }
};

/// What every copy of one rank's transport shares: the connections and the store.
struct mesh {
  asio::io_context io;
  int world_rank = 0, world_size = 1;
  fingerprint told{};  // the call this rank last sent waiting notices for (tcp::tell_waiting)
  tcp_options opt;
  bool oversubscribed = false;
  std::vector<std::vector<std::unique_ptr<link>>> peers;  // [world rank][stream]
  std::unique_ptr<store_server> server;                   // rank 0: the store lives as long as this
  std::string failure;                                    // set by fail(): the transport is unusable
};

inline std::string sockaddr_text(const asio::ip::tcp::endpoint& e) {
  return store_impl::host_port(e.address().to_string(), e.port());
}

/// The address of interface `ifname`, preferring `family`; `config_error` listing the
/// interfaces when it has none.
inline asio::ip::address interface_address(const std::string& ifname, int family) {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) throw config_error("TUTTI_SOCKET_IFNAME: getifaddrs: " + errno_text(errno));
  std::optional<asio::ip::address> best;
  std::string names;
  for (ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    if (names.find(std::string(" ") + i->ifa_name + ",") == std::string::npos) names += std::string(" ") + i->ifa_name + ",";
    if (ifname != i->ifa_name) continue;
    asio::ip::address a;
    if (i->ifa_addr->sa_family == AF_INET) {
      asio::ip::address_v4::bytes_type b;
      std::memcpy(b.data(), &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, 4);
      a = asio::ip::address_v4(b);
    } else {
      const auto* s6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
      asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &s6->sin6_addr, 16);
      a = asio::ip::address_v6(b, s6->sin6_scope_id);
    }
    // Prefer the family of the route to the master, then an address that is not link-local.
    auto score = [&](const asio::ip::address& x) {
      return ((x.is_v4() ? AF_INET : AF_INET6) == family ? 2 : 0) + (x.is_v6() && x.to_v6().is_link_local() ? 0 : 1);
    };
    if (!best || score(a) > score(*best)) best = a;
  }
  ::freeifaddrs(all);
  if (!best) {
    if (!names.empty()) names.pop_back();
    throw config_error("TUTTI_SOCKET_IFNAME='" + ifname + "': no such interface with an IPv4 or IPv6 address "
                       "(interfaces with one:" + names + ")");
  }
  return *best;
}

inline std::size_t sysctl_value(const char* path) {
  std::ifstream f(path);
  std::size_t v = 0;
  f >> v;
  return v;
}

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

inline std::string hello_text(int from, int world, int stream, int streams, const std::string& job, const std::string& token) {
  store_impl::writer w;
  w.num(hello_magic).num(hello_version).num(static_cast<std::int32_t>(from)).num(static_cast<std::int32_t>(world));
  w.num(static_cast<std::int32_t>(stream)).num(static_cast<std::int32_t>(streams)).str(job).str(token);
  return w.out;
}

// ---- the wire's parsers: pure functions of the bytes received, called by the transport and by
// the fuzz target tests/fuzz/tcp_frame.cpp alike. A malformed input raises
// `store_impl::malformed` (`stranger` for a wrong magic); none of them allocates for a length
// it read before checking it against its cap.

/// A rank's hello on a new mesh connection: magic u64, version u32, from, world, stream,
/// streams (i32 each), then the job id and the token (u32 length + bytes each).
struct mesh_hello {
  std::uint32_t version = 0;
  std::int32_t from = 0, world = 0, stream = 0, streams = 0;
  std::string_view job_id, token;  // point into the parsed bytes
  std::size_t size = 0;            // bytes it took
};
inline constexpr std::size_t max_job_id = 256;  // TUTTI_JOB_ID; tuttirun's are far shorter
inline constexpr std::size_t hello_fixed = 8 + 4 + 4 * 4;
/// The longest hello: the acceptor never buffers more than this (plus one read) per connection.
inline constexpr std::size_t max_hello_bytes = hello_fixed + 4 + max_job_id + 4 + store_impl::max_token;

/// Parses the hello at the front of `in`: empty while incomplete; `malformed` for another magic,
/// or a job id or token longer than its cap (as soon as its length has arrived).
inline std::optional<mesh_hello> parse_mesh_hello(std::string_view in) {
  using store_impl::malformed;
  if (in.size() < 8) return std::nullopt;
  store_impl::reader r{in};
  if (r.num<std::uint64_t>() != hello_magic) throw malformed("not a tutti connection (wrong magic)", true);
  if (in.size() < hello_fixed) return std::nullopt;
  mesh_hello h;
  h.version = r.num<std::uint32_t>();
  h.from = r.num<std::int32_t>();
  h.world = r.num<std::int32_t>();
  h.stream = r.num<std::int32_t>();
  h.streams = r.num<std::int32_t>();
  // A length-prefixed field: false while incomplete.
  auto field = [&](std::string_view& out, std::size_t cap, const char* what) {
    if (r.in.size() < 4) return false;
    const auto n = store_impl::reader{r.in}.num<std::uint32_t>();
    if (n > cap) throw malformed(std::string(what) + " of " + std::to_string(n) + " bytes");
    if (r.in.size() < 4 + std::size_t{n}) return false;
    out = r.str(cap);
    return true;
  };
  if (!field(h.job_id, max_job_id, "job id") || !field(h.token, store_impl::max_token, "token")) return std::nullopt;
  h.size = in.size() - r.in.size();
  return h;
}

/// What a 64-byte frame header says: a message (its header: fingerprint and payload bytes), or
/// a failed peer's notice (the length of the reason that follows, cut to `max_failure_text`).
/// A message's byte count is never allocated for: the receiver reads into the buffer of the
/// size it expects, and any other count is a `mismatch_error` before a payload byte moves.
struct frame_head {
  bool failure = false;
  header h;
  std::size_t text_bytes = 0;
};

/// Parses a frame header; `malformed` for another magic or a collective that does not exist
/// (error messages name the collective, so it must be one).
inline frame_head parse_frame_head(const wire_header& w) {
  using store_impl::malformed;
  frame_head f;
  if (w.magic == failure_magic) {
    f.failure = true;
    f.text_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(w.bytes, max_failure_text));
    return f;
  }
  if (w.magic != message_magic)
    throw malformed("not a tutti message: the stream is corrupt or another program wrote to it", true);
  std::memcpy(&f.h.fp, w.fp, sizeof f.h.fp);
  if (static_cast<unsigned>(f.h.fp.coll) > static_cast<unsigned>(collective::group))
    throw malformed("unknown collective " + std::to_string(static_cast<unsigned>(f.h.fp.coll)));
  f.h.bytes = w.bytes;
  return f;
}

/// One line on stderr for a connection the acceptor drops: the peer's address and why, never
/// the token. At most `max_logged` per start-up.
inline void log_refusal(int rank, const std::string& from, const std::string& why, int& logged) {
  static constexpr int max_logged = 100;
  if (logged > max_logged) return;
  if (logged++ == max_logged)
    std::fprintf(stderr, "[tutti rank %d] tcp start-up: more refused connections; no longer logged\n", rank);
  else
    std::fprintf(stderr, "[tutti rank %d] tcp start-up: refused a connection from %s: %s\n", rank, from.c_str(),
                 why.c_str());
}

/// Writes or reads all of `buf` on a non-blocking socket by the deadline (start-up only).
inline void io_by(link& l, void* buf, std::size_t n, bool writing, std::chrono::steady_clock::time_point deadline,
                  const std::string& what) {
  auto* p = static_cast<char*>(buf);
  while (n) {
    asio::error_code ec;
    const std::size_t k = writing ? l.sock.write_some(asio::buffer(p, n), ec) : l.sock.read_some(asio::buffer(p, n), ec);
    p += k;
    n -= k;
    if (ec == asio::error::would_block || ec == asio::error::try_again || ec == asio::error::interrupted) {
      const auto left = store_impl::left(deadline).count();
      if (left <= 0) throw timeout_error("tcp start-up: timed out " + what);
      pollfd pf{l.fd(), static_cast<short>(writing ? POLLOUT : POLLIN), 0};
      ::poll(&pf, 1, static_cast<int>(std::min<long long>(left, 1000)));
    } else if (ec) {
      throw peer_lost("tcp start-up: connection lost " + what + ": " + ec.message());
    }
  }
}

}  // namespace detail::tcp_impl

/// The TCP transport (see the file comment). Value type; copies share the connections.
class tcp {
 public:
  /// Joins the job the environment describes (`job_env::from_env`, `config::from_env`,
  /// `tcp_options::from_env`, `TUTTI_JOB_TOKEN`). Needs `MASTER_PORT` (and `MASTER_ADDR`
  /// unless every rank runs on this host); waits for the other ranks up to `TUTTI_TIMEOUT`.
  static tcp from_env() {
    const job_env job = job_env::from_env();
    const config cfg = config::from_env();
    const char* token = detail::getenv_nonempty("TUTTI_JOB_TOKEN");
    return create(job, cfg, tcp_options::from_env(), token ? token : "");
  }

  static tcp create(const job_env& job, const config& cfg, const tcp_options& opt, const std::string& token) {
    using namespace detail::tcp_impl;
    using clock = std::chrono::steady_clock;
    auto m = std::make_shared<mesh>();
    m->world_rank = job.rank;
    m->world_size = job.world_size;
    m->opt = opt;
    m->peers.resize(static_cast<std::size_t>(job.world_size));
    cpu_set_t cpus;
    const int ncpu = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    m->oversubscribed = job.local_world_size > ncpu;
    if (m->oversubscribed) m->opt.spin = std::chrono::microseconds(0);  // spinning starves the peer
    tcp t;
    t.mesh_ = m;
    t.members_.resize(static_cast<std::size_t>(job.world_size));
    for (int i = 0; i < job.world_size; ++i) t.members_[static_cast<std::size_t>(i)] = i;
    t.rank_ = job.rank;
    if (job.world_size == 1) return t;

    if (job.master_port == 0)
      throw config_error("tutti::tcp needs MASTER_PORT (and MASTER_ADDR) to find the rendezvous store on rank 0; "
                         "tuttirun sets both (environment: " + job.source + ")");
    std::string master = job.master_addr;
    if (master.empty()) {
      if (job.local_world_size != job.world_size)
        throw config_error("tutti::tcp: MASTER_ADDR is not set, and not every rank runs on this host (" +
                           std::to_string(job.local_world_size) + " of " + std::to_string(job.world_size) + ")");
      master = "127.0.0.1";
    }
    if (token.empty())
      detail::log(log_level::info, cfg, job.rank,
                  "tcp: no TUTTI_JOB_TOKEN: the store and the connections accept any process that finds them "
                  "(tuttirun sets a token)");
    const auto deadline = clock::now() + cfg.timeout;
    if (job.rank == 0) m->server = std::make_unique<store_server>(master, job.master_port, job.world_size, token);
    store kv(master, job.master_port, job.rank, job.world_size, token, cfg.timeout);

    // The address peers reach this rank by.
    const sockaddr_storage local = kv.local_address();
    asio::ip::address addr;
    if (!opt.ifname.empty()) addr = interface_address(opt.ifname, local.ss_family);
    else addr = asio::ip::make_address(detail::store_impl::addr_host(local));
    asio::ip::tcp::acceptor acceptor(m->io);
    const asio::ip::tcp::endpoint want(addr, 0);
    try {
      acceptor.open(want.protocol());
      set_buffers(acceptor, m->opt);
      acceptor.bind(want);
      acceptor.listen(4096);
      acceptor.non_blocking(true);
    } catch (const std::system_error& e) {
      throw config_error("tcp start-up: rank " + std::to_string(job.rank) + " cannot listen on " +
                         sockaddr_text(want) + ": " + e.what() +
                         (opt.ifname.empty() ? "" : " (TUTTI_SOCKET_IFNAME=" + opt.ifname + ")"));
    }
    const auto me = acceptor.local_endpoint();
    detail::log(log_level::info, cfg, job.rank,
                "tcp: listening on " + sockaddr_text(me) + ", " + std::to_string(opt.streams) +
                    " stream(s) per peer, store at " + kv.where());
    kv.set("tutti/addr/" + std::to_string(job.rank), me.address().to_string() + " " + std::to_string(me.port()));

    const int S = opt.streams, R = job.rank, P = job.world_size;
    auto left = [&] { return std::max(detail::store_impl::left(deadline), std::chrono::milliseconds(1)); };
    // 1. Connect to every higher rank; the hello goes out at once, the answer is read in step 3.
    for (int j = R + 1; j < P; ++j) {
      const std::string where = kv.get("tutti/addr/" + std::to_string(j), left());
      const auto space = where.find(' ');
      asio::ip::tcp::endpoint ep;
      try {
        ep = asio::ip::tcp::endpoint(asio::ip::make_address(where.substr(0, space)),
                                     static_cast<unsigned short>(std::stoi(where.substr(space + 1))));
      } catch (const std::exception&) {
        throw config_error("tcp start-up: rank " + std::to_string(j) + " published a malformed address '" + where + "'");
      }
      for (int s = 0; s < S; ++s) {
        auto l = std::make_unique<link>(m->io);
        connect(*l, ep, m->opt, deadline, R, j);
        std::string hello = hello_text(R, P, s, S, job.job_id, token);
        io_by(*l, hello.data(), hello.size(), true, deadline,
              "sending the hello to rank " + std::to_string(j) + " at " + sockaddr_text(ep));
        m->peers[static_cast<std::size_t>(j)].push_back(std::move(l));
      }
    }
    // 2. Accept every lower rank's connections.
    accept_all(*m, acceptor, job, token, deadline);
    acceptor.close();
    // 3. Every higher rank's answer.
    for (int j = R + 1; j < P; ++j)
      for (auto& l : m->peers[static_cast<std::size_t>(j)]) {
        char head[detail::store_impl::answer_head_bytes];
        const std::string what = "waiting for rank " + std::to_string(j) + " to accept rank " + std::to_string(R);
        io_by(*l, head, sizeof head, false, deadline, what);
        detail::store_impl::answer_head a;
        try {
          a = detail::store_impl::parse_answer_head(std::string_view(head, sizeof head), hello_magic);
        } catch (const detail::store_impl::malformed& e) {
          throw config_error("tcp start-up: rank " + std::to_string(j) + " answered rank " + std::to_string(R) +
                             " with something that is not tutti's (" + e.reason + ")");
        }
        std::string msg(a.text_bytes, '\0');
        io_by(*l, msg.data(), msg.size(), false, deadline, what);
        if (a.status != 0)
          throw config_error("tcp start-up: rank " + std::to_string(j) + " refused rank " + std::to_string(R) + ": " + msg);
      }
    return t;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }

  tcp sub(std::span<const int> members, std::uint64_t context) const {
    tcp t = *this;
    t.context_ = context;
    std::tie(t.members_, t.rank_) = detail::pick_members(members_, rank_, members);
    return t;
  }

  // ---- point to point -------------------------------------------------------------------

  void send(int peer, const header& h, const std::byte* data, const wait_context& w) {
    outgoing out(*this, peer, h, data);
    run(&out, nullptr, w);
  }
  void recv(int peer, const header& h, std::byte* data, const wait_context& w) {
    incoming in(*this, peer, h, data, nullptr);
    run(nullptr, &in, w);
  }
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& w) {
    outgoing out(*this, to, hs, sdata);
    incoming in(*this, from, hr, rdata, nullptr);
    run(&out, &in, w);
  }
  void recv_with(int peer, const header& h, byte_consumer consume, const wait_context& w) {
    incoming in(*this, peer, h, nullptr, &consume);
    run(nullptr, &in, w);
  }
  void sendrecv_with(int to, const header& hs, const std::byte* sdata, int from, const header& hr,
                     byte_consumer consume, const wait_context& w) {
    outgoing out(*this, to, hs, sdata);
    incoming in(*this, from, hr, nullptr, &consume);
    run(&out, &in, w);
  }

  /// Marks this rank failed: tells every peer why (where its stream is between messages) and
  /// closes every connection, so peers raise `peer_lost` naming this rank instead of waiting.
  void fail(std::string_view what) noexcept {
    using namespace detail::tcp_impl;
    auto& m = *mesh_;
    if (m.failure.empty()) m.failure = what.empty() ? std::string("failed") : std::string(what);
    const std::string text = m.failure.substr(0, max_failure_text);
    for (auto& streams : m.peers)
      for (std::size_t s = 0; s < streams.size(); ++s) {
        link& l = *streams[s];
        if (!l.sock.is_open()) continue;
        if (s == 0 && l.clean) write_notice(l, failure_magic, text);
        asio::error_code ec;
        l.sock.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
        l.sock.close(ec);
      }
  }

  /// Writes a failure or stall notice; best effort: a full socket buffer drops it. The stream
  /// stays between messages only if all of it went.
  static void write_notice(detail::tcp_impl::link& l, std::uint64_t magic, std::string_view text) noexcept {
    detail::tcp_impl::wire_header h{};
    h.magic = magic;
    h.bytes = text.size();
    std::array<asio::const_buffer, 2> bufs{asio::buffer(&h, sizeof h), asio::buffer(text.data(), text.size())};
    asio::error_code ec;
    l.clean = l.sock.write_some(bufs, ec) == sizeof h + text.size();
  }

  /// The options this transport runs with (streams, buffers, ...).
  const tcp_options& options() const noexcept { return mesh_->opt; }

  /// The descriptor of connection `stream` to `peer` (a rank of this group): for diagnostics
  /// and tests. Writing to it corrupts the stream.
  int native_handle(int peer, int stream = 0) const {
    return mesh_->peers[static_cast<std::size_t>(world(peer))][static_cast<std::size_t>(stream)]->fd();
  }

 private:
  using link = detail::tcp_impl::link;

  /// One stretch of bytes to move on one link: the header (stream 0) and a part of the payload.
  struct part {
    link* l = nullptr;
    std::size_t offset = 0, n = 0, done = 0;  // payload range [offset, offset+n), bytes moved
    std::size_t head_done = 0;                // header bytes moved (stream 0 only)
    bool has_head = false;
    std::size_t piece = 0;                    // recv_with: bytes in the bounce buffer
  };

  struct outgoing {
    outgoing(tcp& t, int peer_, const header& h_, const std::byte* data_) : peer(peer_), h(h_), data(data_) {
      wire.magic = detail::tcp_impl::message_magic;
      fingerprint fp = h.fp;
      fp.context = t.context_;
      std::memcpy(wire.fp, &fp, sizeof fp);
      wire.bytes = h.bytes;
      t.plan(peer, h.bytes, parts, count);
    }
    int peer;
    const header& h;
    const std::byte* data;
    detail::tcp_impl::wire_header wire{};
    std::array<part, 16> parts;
    int count = 0;
  };

  struct incoming {
    incoming(tcp& t, int peer_, const header& h_, std::byte* dst_, byte_consumer* consume_)
        : peer(peer_), h(h_), dst(dst_), consume(consume_) {
      t.plan(peer, h.bytes, parts, count);
    }
    int peer;
    const header& h;
    std::byte* dst;
    byte_consumer* consume;
    detail::tcp_impl::wire_header wire{};
    bool checked = false;
    bool told = false;  // the peer has been sent a waiting notice for this message
    std::array<part, 16> parts;
    int count = 0;
  };

  int world(int r) const { return members_[static_cast<std::size_t>(r)]; }
  std::string name(int r) const {
    std::string s = "rank " + std::to_string(r);
    if (context_ != 0) s += " (world rank " + std::to_string(world(r)) + ")";
    return s;
  }

  /// Cuts `bytes` of payload to `peer` into one part per stream (only the first when the
  /// payload is small), each starting at a multiple of 64 bytes.
  void plan(int peer, std::size_t bytes, std::array<part, 16>& parts, int& count) {
    auto& m = *mesh_;
    if (!m.failure.empty()) throw error(errc::aborted, "tcp: this rank failed earlier: " + m.failure);
    if (peer < 0 || peer >= size() || peer == rank_)
      throw usage_error("tcp: rank " + std::to_string(rank_) + " cannot send to or receive from rank " +
                        std::to_string(peer) + " (itself, or outside the group of " + std::to_string(size()) + ")");
    auto& streams = m.peers[static_cast<std::size_t>(world(peer))];
    const std::size_t k = bytes >= m.opt.stripe_bytes ? streams.size() : 1;
    const std::size_t per = ((bytes + k - 1) / k + 63) & ~std::size_t{63};
    count = 0;
    for (std::size_t s = 0; s < k; ++s) {
      const std::size_t off = std::min(bytes, s * per), end = std::min(bytes, off + per);
      if (s > 0 && end == off) break;
      part& p = parts[static_cast<std::size_t>(count++)];
      p.l = streams[s].get();
      p.offset = off;
      p.n = end - off;
      p.has_head = s == 0;
    }
  }

  /// Moves `out` and `in` (either may be null) until both are complete, by the deadline.
  void run(outgoing* out, incoming* in, const wait_context& w) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto deadline = start + w.timeout;
    auto last_progress = start;
    std::array<pollfd, 32> fds;  // at most 16 parts each way
    std::size_t nfds = 0;
    while (true) {
      bool moved = false, done = true;
      if (out)
        for (int i = 0; i < out->count; ++i) {
          part& p = out->parts[static_cast<std::size_t>(i)];
          if (p.done == p.n && (!p.has_head || p.head_done == sizeof out->wire)) continue;
          moved |= write_part(*out, p, w);
          if (p.done < p.n || (p.has_head && p.head_done < sizeof out->wire)) done = false;
        }
      if (in)
        for (int i = 0; i < in->count; ++i) {
          part& p = in->parts[static_cast<std::size_t>(i)];
          if (!p.has_head && !in->checked) {  // the payload waits for the checked header
            done = false;
            continue;
          }
          if (p.done == p.n && (!p.has_head || p.head_done == sizeof in->wire)) continue;
          moved |= read_part(*in, p, w);
          if (p.done < p.n || (p.has_head && p.head_done < sizeof in->wire)) done = false;
        }
      if (done) {
        if (in) in->parts[0].l->in_clean = true;
        return;
      }
      const auto now = clock::now();
      if (moved) {
        last_progress = now;
        continue;
      }
      if (now - last_progress < mesh_->opt.spin) {
        detail::cpu_relax();
        continue;
      }
      if (now >= deadline) timed_out(out, in, w);
      if (w.aborted) detail::check_aborted(w, out ? out->h : in->h, rank_, out ? "to send to" : "to receive from",
                                           out ? out->peer : in->peer);
      if (in && !in->checked && !in->told && now - start >= detail::tcp_impl::waiting_notice_after) tell_waiting(*in);
      nfds = 0;
      if (out)
        for (int i = 0; i < out->count; ++i) {
          part& p = out->parts[static_cast<std::size_t>(i)];
          if (p.done < p.n || (p.has_head && p.head_done < sizeof out->wire)) fds[nfds++] = {p.l->fd(), POLLOUT, 0};
        }
      if (in)
        for (int i = 0; i < in->count; ++i) {
          part& p = in->parts[static_cast<std::size_t>(i)];
          if ((p.has_head || in->checked) && (p.done < p.n || (p.has_head && p.head_done < sizeof in->wire)))
            fds[nfds++] = {p.l->fd(), POLLIN, 0};
        }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
      const long long slice = w.aborted ? detail::abort_poll.count() : 1000;
      ::poll(fds.data(), nfds, static_cast<int>(std::min<long long>(left, slice)));
    }
  }

  /// One gather write of what is left of the header and the part; true if bytes moved.
  bool write_part(outgoing& o, part& p, const wait_context& w) {
    std::array<asio::const_buffer, 2> bufs{
        asio::buffer(reinterpret_cast<const char*>(&o.wire) + p.head_done, p.has_head ? sizeof o.wire - p.head_done : 0),
        asio::buffer(o.data + p.offset + p.done, p.n - p.done)};
    asio::error_code ec;
    std::size_t k = p.l->sock.write_some(bufs, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again || ec == asio::error::interrupted) return false;
    if (ec) lost(o.peer, o.h, w, "sending to", ec);
    p.l->clean = false;
    if (p.has_head) {
      const std::size_t hk = std::min(k, sizeof o.wire - p.head_done);
      p.head_done += hk;
      k -= hk;
    }
    p.done += k;
    if (p.done == p.n && (!p.has_head || p.head_done == sizeof o.wire)) p.l->clean = true;
    return true;
  }

  /// Reads what has arrived for `p`: the header first (checked before any payload moves), then
  /// the payload into the destination or, for a consumer, into the link's bounce buffer.
  bool read_part(incoming& in, part& p, const wait_context& w) {
    using namespace detail::tcp_impl;
    asio::error_code ec;
    bool moved = false;
    if (p.has_head && p.head_done < sizeof in.wire) {
      const std::size_t k = p.l->sock.read_some(
          asio::buffer(reinterpret_cast<char*>(&in.wire) + p.head_done, sizeof in.wire - p.head_done), ec);
      p.head_done += k;
      if (k) p.l->in_clean = false;
      if (ec && ec != asio::error::would_block && ec != asio::error::try_again && ec != asio::error::interrupted)
        lost(in.peer, in.h, w, "receiving from", ec);
      if (p.head_done < sizeof in.wire) return k > 0;
      if (in.wire.magic == waiting_magic) {
        waiting_notice(in, p, w);
        return true;
      }
      if (!check(in, p, w)) {  // a stall notice: the header comes later
        p.head_done = 0;
        p.l->in_clean = true;
        return true;
      }
      moved = true;
      if (p.n == 0) return true;
    }
    if (p.done == p.n) return moved;
    std::byte* to;
    std::size_t room;
    if (in.consume) {
      std::byte* b = p.l->bounce.reserve(piece_bytes);
      to = b + p.piece;
      room = std::min(piece_bytes - p.piece, p.n - p.done);
    } else {
      to = in.dst + p.offset + p.done;
      room = p.n - p.done;
    }
    const std::size_t k = p.l->sock.read_some(asio::buffer(to, room), ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again && ec != asio::error::interrupted)
      lost(in.peer, in.h, w, "receiving from", ec);
    p.done += k;
    if (in.consume) {
      p.piece += k;
      if (p.piece == piece_bytes || p.done == p.n) {
        // Pieces start at 64-byte multiples of the payload: parts do, and pieces are 256 KiB.
        (*in.consume)(p.l->bounce.reserve(piece_bytes), p.offset + p.done - p.piece, p.piece);
        p.piece = 0;
      }
    }
    return moved || k > 0;
  }

  /// False for a stall notice (kept in the link), which the peer's failure notice follows.
  bool check(incoming& in, part& p, const wait_context& w) {
    using namespace detail::tcp_impl;
    if (in.wire.magic == stall_magic) {
      std::string text(std::min<std::size_t>(in.wire.bytes, max_failure_text), '\0');
      try {
        io_by(*p.l, text.data(), text.size(), false, std::chrono::steady_clock::now() + std::chrono::seconds(1), "");
      } catch (const error&) {
        text = "(reason lost)";
      }
      p.l->stalled = text;
      return false;
    }
    frame_head f;
    try {
      f = parse_frame_head(in.wire);
    } catch (const detail::store_impl::malformed& e) {
      throw error(errc::aborted, detail::where(in.h, w.algorithm) + ": rank " + std::to_string(rank_) +
                                     " received a malformed header from " + name(in.peer) + " (" + e.reason + ")");
    }
    if (f.failure) {
      // The peer failed and said why; its text follows (best effort, briefly).
      std::string text(f.text_bytes, '\0');
      try {
        io_by(*p.l, text.data(), text.size(), false, std::chrono::steady_clock::now() + std::chrono::seconds(1), "");
      } catch (const error&) {
        text = "(reason lost)";
      }
      throw peer_lost(detail::where(in.h, w.algorithm) + ": " + name(in.peer) + " failed while rank " +
                      std::to_string(rank_) + " waited for it: " + text);
    }
    header want = in.h;
    want.fp.context = context_;
    detail::check_header(want, rank_, f.h, in.peer, w.algorithm);
    in.checked = true;
    return true;
  }

  /// Ranks that disagree about a call can wait to receive from each other, where nothing will
  /// ever come (two ranks that each take the other for the root; with more ranks, a cycle).
  /// So a receive still without its header after a moment writes a 64-byte notice of what it
  /// waits for to every peer of the group, once per call, where its stream to that peer is
  /// between messages and has room. A rank waiting for this one meets it where it expects a
  /// header (see `waiting_notice`); the others drop it when they next read from this rank.
  void tell_waiting(incoming& in) {
    using namespace detail::tcp_impl;
    in.told = true;
    if (in.h.fp.coll == collective::send_recv) return;
    wire_header h{};
    h.magic = waiting_magic;
    fingerprint fp = in.h.fp;
    fp.context = context_;
    std::memcpy(h.fp, &fp, sizeof fp);
    auto& m = *mesh_;
    if (m.told == fp) return;
    m.told = fp;
    for (int r = 0; r < size(); ++r) {
      if (r == rank_) continue;
      link& l = *m.peers[static_cast<std::size_t>(world(r))][0];
      if (!l.clean || !l.sock.is_open()) continue;  // mid-message (or closed): no room for a notice
      pollfd pf{l.fd(), POLLOUT, 0};
      if (::poll(&pf, 1, 0) != 1 || !(pf.revents & POLLOUT)) continue;
      asio::error_code ec;
      const std::size_t k = l.sock.write_some(asio::buffer(&h, sizeof h), ec);
      if (k > 0 && k < sizeof h) {
        // Writable sockets take 64 bytes whole in practice; if not, finish the notice, briefly.
        try {
          io_by(l, reinterpret_cast<char*>(&h) + k, sizeof h - k, true,
                std::chrono::steady_clock::now() + std::chrono::seconds(1), "writing a waiting notice");
        } catch (const error&) {
          l.clean = false;  // the stream is cut mid-notice: no failure notice may follow
        }
      }
    }
  }

  /// A waiting notice from the peer where this rank expects the header of `in`: the peer waits
  /// for this rank in a later call of this communicator, or in this call with other arguments,
  /// while this rank waits for a message the peer has not sent (it would precede the notice):
  /// `mismatch_error` naming both. Otherwise (an earlier call, the same call, another
  /// communicator, point to point) the notice is stale or harmless: dropped, the header is next.
  void waiting_notice(incoming& in, part& p, const wait_context& w) {
    fingerprint theirs, mine = in.h.fp;
    std::memcpy(&theirs, in.wire.fp, sizeof theirs);
    mine.context = context_;
    if (mine.coll != collective::send_recv && theirs.coll != collective::send_recv && theirs.context == context_ &&
        (theirs.seq > mine.seq || (theirs.seq == mine.seq && theirs != mine)))
      throw mismatch_error(detail::where(in.h, w.algorithm) + ": " + detail::describe_difference(mine, rank_, theirs, in.peer) +
                           " (each waits for the other: " + name(in.peer) + " waits in " +
                           std::string(collective_name(theirs.coll)) + " #" + std::to_string(theirs.seq) + ")");
    p.head_done = 0;
    p.l->in_clean = true;
  }

  [[noreturn]] void lost(int peer, const header& h, const wait_context& w, const char* doing, const asio::error_code& ec) {
    // A peer that failed may have said why before closing, on a stream this rank was not reading
    // (it was sending): the notice is the next thing to read there.
    if (std::string why = failure_notice(peer); !why.empty())
      throw peer_lost(detail::where(h, w.algorithm) + ": " + name(peer) + " failed while rank " + std::to_string(rank_) +
                      " was " + doing + " it: " + why);
    const bool closed = ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
    throw peer_lost(detail::where(h, w.algorithm) + ": rank " + std::to_string(rank_) + " lost " + name(peer) +
                    " while " + doing + " it (" + std::to_string(h.bytes) + " bytes): " +
                    (closed ? "the connection was closed (the peer exited, crashed or failed)" : ec.message()));
  }

  /// The reason a failed peer sent (see `fail`), if it waits unread on stream 0; else empty.
  std::string failure_notice(int peer) {
    using namespace detail::tcp_impl;
    link& l = *mesh_->peers[static_cast<std::size_t>(world(peer))][0];
    if (!l.in_clean || !l.sock.is_open()) return {};
    // Waiting notices (tell_waiting), at most a stall notice, then the failure notice.
    std::string buf(4 * (sizeof(wire_header) + max_failure_text), '\0');
    const ssize_t k = ::recv(l.fd(), buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
    std::string stalled = l.stalled;
    for (std::size_t at = 0; k > 0 && at + sizeof(wire_header) <= static_cast<std::size_t>(k);) {
      wire_header h;
      std::memcpy(&h, buf.data() + at, sizeof h);
      if (h.magic == waiting_magic) {  // no text follows it
        at += sizeof h;
        continue;
      }
      if (h.magic != failure_magic && h.magic != stall_magic) break;
      const std::size_t n = std::min<std::size_t>(h.bytes, max_failure_text);
      const std::size_t got = std::min(n, static_cast<std::size_t>(k) - at - sizeof h);
      std::string text = got ? buf.substr(at + sizeof h, got) : std::string("(reason lost)");
      if (h.magic == failure_magic) return text;
      stalled = text;
      at += sizeof h + n;
    }
    return stalled;
  }

  /// After this rank timed out waiting for `peer`: up to `grace` for a notice from the peer (it
  /// timed out or failed too), read where its stream is between messages. After a stall notice
  /// it waits up to twice `grace` more for the failure notice that follows, whose text may name
  /// a rank further down a chain of waiting ranks. Returns the failure notice's text, else the
  /// stall notice's (also one read earlier, which makes the first wait the longer one), else
  /// empty (none, a message came instead, or the peer closed the connection).
  std::string await_notice(int peer, std::chrono::milliseconds grace) {
    using namespace detail::tcp_impl;
    using clock = std::chrono::steady_clock;
    link& l = *mesh_->peers[static_cast<std::size_t>(world(peer))][0];
    if (!l.in_clean || !l.sock.is_open()) return l.stalled;
    // A stall notice read before we timed out: its failure notice may still be a grace away.
    auto until = clock::now() + (l.stalled.empty() ? grace : 2 * grace);
    while (true) {
      wire_header h{};
      const ssize_t k = ::recv(l.fd(), &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return l.stalled;
      if (k == static_cast<ssize_t>(sizeof h)) {
        if (h.magic == waiting_magic) {  // stale or harmless here: drop it
          if (::recv(l.fd(), &h, sizeof h, MSG_DONTWAIT) != static_cast<ssize_t>(sizeof h)) return l.stalled;
          continue;
        }
        if (h.magic != failure_magic && h.magic != stall_magic) return l.stalled;
        std::string buf(sizeof h + std::min<std::size_t>(h.bytes, max_failure_text), '\0');
        try {
          io_by(l, buf.data(), buf.size(), false, clock::now() + std::chrono::seconds(1), "");
        } catch (const error&) {
          return l.stalled.empty() ? "(reason lost)" : l.stalled;
        }
        if (h.magic == failure_magic) return buf.substr(sizeof h);
        l.stalled = buf.substr(sizeof h);
        until = std::max(until, clock::now() + 2 * grace);
        continue;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now());
      if (left.count() <= 0) return l.stalled;
      pollfd pf{l.fd(), POLLIN, 0};
      // A partial header polls as readable: sleep a moment rather than spin on it.
      if (k > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      else ::poll(&pf, 1, static_cast<int>(left.count()));
    }
  }

  [[noreturn]] void timed_out(outgoing* out, incoming* in, const wait_context& w) {
    // Name what is still missing: the receive when it is unfinished, else the send.
    bool in_missing = false;
    if (in)
      for (int i = 0; i < in->count; ++i) {
        const part& p = in->parts[static_cast<std::size_t>(i)];
        in_missing |= p.done < p.n || (p.has_head && p.head_done < sizeof in->wire);
      }
    const header& h = in_missing ? in->h : out->h;
    const int peer = in_missing ? in->peer : out->peer;
    const std::string what = detail::where(h, w.algorithm) + ": rank " + std::to_string(rank_) + " timed out after " +
                             detail::seconds_text(w.timeout) + " waiting " +
                             (in_missing ? "to receive from " : "to send to ") + name(peer) + " (" +
                             std::to_string(h.bytes) + " bytes, " + detail::fingerprint_summary(h.fp) + ")";
    // Tell the peers first, then give the one we waited for a moment to say whether it is stuck
    // itself: each rank of a chain times out within moments of the others, in any order.
    for (auto& streams : mesh_->peers)
      if (!streams.empty() && streams[0]->sock.is_open() && streams[0]->clean)
        write_notice(*streams[0], detail::tcp_impl::stall_magic, what.substr(0, detail::tcp_impl::max_failure_text));
    // Half a second: the ranks of a chain time out milliseconds apart.
    const std::string why = await_notice(peer, std::min<std::chrono::milliseconds>(
                                                   std::chrono::milliseconds(500),
                                                   std::chrono::duration_cast<std::chrono::milliseconds>(w.timeout)));
    if (!why.empty())
      throw peer_lost(detail::where(h, w.algorithm) + ": " + name(peer) + " failed as well while rank " +
                      std::to_string(rank_) + " waited for it: " + why);
    throw timeout_error(what);
  }

  static void connect(link& l, const asio::ip::tcp::endpoint& ep, const tcp_options& opt,
                      std::chrono::steady_clock::time_point deadline, int me, int peer) {
    using namespace detail::tcp_impl;
    std::string why;
    for (auto pause = std::chrono::milliseconds(2);; pause = std::min(pause * 2, std::chrono::milliseconds(200))) {
      asio::error_code ec;
      l.sock.close(ec);
      l.sock.open(ep.protocol());
      set_buffers(l.sock, opt);
      l.sock.set_option(asio::ip::tcp::no_delay(true));
      l.sock.non_blocking(true);
      // asio's connect would wait without a deadline: connect the descriptor, poll it.
      int rc = ::connect(l.fd(), ep.data(), static_cast<socklen_t>(ep.size()));
      int err = rc == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        pollfd pf{l.fd(), POLLOUT, 0};
        const auto left = std::max<long long>(1, std::min<long long>(detail::store_impl::left(deadline).count(), 5000));
        if (::poll(&pf, 1, static_cast<int>(left)) > 0) {
          socklen_t len = sizeof err;
          ::getsockopt(l.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        } else {
          err = ETIMEDOUT;
        }
      }
      if (err == 0) return;
      why = detail::errno_text(err);
      if (detail::store_impl::left(deadline).count() <= 0)
        throw timeout_error("tcp start-up: rank " + std::to_string(me) + " cannot connect to rank " +
                            std::to_string(peer) + " at " + sockaddr_text(ep) + ": " + why +
                            " (a firewall, or an address not reachable from here: see TUTTI_SOCKET_IFNAME)");
      std::this_thread::sleep_for(pause);
    }
  }

  /// Accepts the S connections of every lower rank; strangers are ignored, bad hellos refused.
  static void accept_all(detail::tcp_impl::mesh& m, asio::ip::tcp::acceptor& acceptor, const job_env& job,
                         const std::string& token, std::chrono::steady_clock::time_point deadline) {
    using namespace detail::tcp_impl;
    const int S = m.opt.streams, R = job.rank;
    struct waiting {
      std::unique_ptr<link> l;
      std::string in;
      std::string from;  // the peer's address, for the log
      std::chrono::steady_clock::time_point accepted;
    };
    using detail::store_impl::hello_within;
    using detail::store_impl::max_silent;
    int logged = 0;
    std::vector<waiting> pending;
    for (int r = 0; r < R; ++r) m.peers[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(S));
    int missing = R * S;
    while (missing > 0) {
      std::vector<pollfd> fds{{acceptor.native_handle(), POLLIN, 0}};
      for (auto& p : pending) fds.push_back({p.l->fd(), POLLIN, 0});
      const auto left = detail::store_impl::left(deadline).count();
      if (left <= 0) {
        std::string who;
        for (int r = 0; r < R; ++r)
          for (int s = 0; s < S; ++s)
            if (!m.peers[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)]) {
              who += (who.empty() ? "" : ", ") + std::to_string(r);
              break;
            }
        throw timeout_error("tcp start-up: rank " + std::to_string(R) + " timed out waiting for rank(s) " + who +
                            " to connect to " + sockaddr_text(acceptor.local_endpoint()));
      }
      ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 1000)));
      if (fds[0].revents & POLLIN) {
        while (true) {
          auto l = std::make_unique<link>(m.io);
          asio::error_code ec;
          acceptor.accept(l->sock, ec);
          if (ec) break;
          l->sock.set_option(asio::ip::tcp::no_delay(true), ec);
          l->sock.non_blocking(true, ec);
          const auto peer = l->sock.remote_endpoint(ec);
          std::string from = ec ? std::string("an unknown address") : sockaddr_text(peer);
          if (pending.size() >= max_silent) {  // the oldest makes room
            log_refusal(R, pending.front().from,
                        "closed for a newer one: " + std::to_string(max_silent) + " connections were waiting to say hello", logged);
            pending.erase(pending.begin());
          }
          pending.push_back({std::move(l), {}, std::move(from), std::chrono::steady_clock::now()});
        }
      }
      for (std::size_t i = 0; i < pending.size();) {
        auto& p = pending[i];
        // A peer sends its hello and waits for the answer: never more than `max_hello_bytes`.
        char buf[1024];
        asio::error_code ec;
        const std::size_t k = p.l->sock.read_some(asio::buffer(buf, std::min(sizeof buf, max_hello_bytes + 1 - p.in.size())), ec);
        p.in.append(buf, k);
        const bool gone = ec && ec != asio::error::would_block && ec != asio::error::try_again &&
                          ec != asio::error::interrupted;
        std::optional<mesh_hello> h;
        std::string dropped;
        try {
          h = parse_mesh_hello(p.in);
        } catch (const detail::store_impl::malformed& e) {
          dropped = e.stranger ? e.reason : "malformed hello (" + e.reason + ")";
        }
        if (!h && dropped.empty() && gone && !p.in.empty())  // a probe that connects and closes says nothing
          dropped = "it closed the connection after " + std::to_string(p.in.size()) + " bytes of an incomplete hello";
        if (!h && dropped.empty() && !gone && std::chrono::steady_clock::now() >= p.accepted + hello_within)
          dropped = "it sent no complete hello within " + std::to_string(hello_within.count()) + " s";
        if (!dropped.empty() || (!h && gone)) {
          if (!dropped.empty()) log_refusal(R, p.from, dropped, logged);
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        if (!h) {
          ++i;
          continue;
        }
        const auto version = h->version;
        const int from = h->from, world = h->world, stream = h->stream, streams = h->streams;
        const std::string_view job_id = h->job_id, their_token = h->token;  // into p.in
        // A stranger (another version, token or job) is refused and the start-up goes on; a rank
        // of this job that disagrees (world size, streams, a duplicate) fails it.
        std::string refusal;
        bool fatal = true;
        if (version != hello_version) {
          refusal = "protocol version " + std::to_string(version) + " differs from " + std::to_string(hello_version);
          fatal = false;
        } else if (!detail::store_impl::same_token(their_token, token) || job_id != job.job_id) {
          refusal = "wrong job token or job id: not a rank of this job";
          fatal = false;
        } else if (world != job.world_size)
          refusal = "rank " + std::to_string(from) + " says the world has " + std::to_string(world) + " ranks, rank " +
                    std::to_string(R) + " says " + std::to_string(job.world_size);
        else if (streams != S)
          refusal = "rank " + std::to_string(from) + " uses TUTTI_TCP_STREAMS=" + std::to_string(streams) + ", rank " +
                    std::to_string(R) + " uses " + std::to_string(S);
        else if (from < 0 || from >= R || stream < 0 || stream >= S)
          refusal = "rank " + std::to_string(from) + " (stream " + std::to_string(stream) + ") should not connect to rank " + std::to_string(R);
        else if (m.peers[static_cast<std::size_t>(from)][static_cast<std::size_t>(stream)])
          refusal = "two processes connect as rank " + std::to_string(from) + " (stream " + std::to_string(stream) + ")";
        detail::store_impl::writer a;
        a.num(hello_magic).num(static_cast<std::uint8_t>(refusal.empty() ? 0 : 1)).str(refusal);
        try {
          io_by(*p.l, a.out.data(), a.out.size(), true, deadline, "answering a connection");
        } catch (const error&) {
          if (refusal.empty()) throw;
        }
        if (!refusal.empty()) {
          if (fatal) throw config_error("tcp start-up: rank " + std::to_string(R) + " refused a connection: " + refusal);
          log_refusal(R, p.from, refusal, logged);
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        m.peers[static_cast<std::size_t>(from)][static_cast<std::size_t>(stream)] = std::move(p.l);
        --missing;
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }

  std::shared_ptr<detail::tcp_impl::mesh> mesh_;
  std::vector<int> members_;
  int rank_ = 0;
  std::uint64_t context_ = 0;
};

static_assert(transport<tcp>);
static_assert(zero_copy_recv<tcp>);

}  // namespace tutti
