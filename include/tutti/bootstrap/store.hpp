/// \file
/// The rendezvous store: a small key-value store over TCP, as torch's TCPStore. Rank 0 serves it
/// on `MASTER_ADDR:MASTER_PORT` (`store_server`, a thread of rank 0's process); every rank,
/// rank 0 included, talks to it through a `store` client. Ranks publish their listening
/// addresses there, then build their connections (`tutti::tcp`).
///
/// - Operations: `set`, `get` (waits until the key exists), `wait(keys, timeout)`, `add` (an
///   atomic counter, its value kept as decimal text as torch does).
/// - Lifetime: the server lives as long as the object that owns it (for `tutti::tcp`: rank 0's
///   transport and its copies), so the port stays taken for the whole job, as with torch.
/// - Protocol: little-endian, length-prefixed frames. A client opens with a hello (magic,
///   version, rank, world size, job token); the server answers with a welcome (ok or refused,
///   and why). The parsers are pure functions of the bytes received (`detail::store_impl::
///   parse_hello`, `parse_request`, `parse_reply_head`, `parse_answer_head`), which the server,
///   the client and the fuzz target `tests/fuzz/store_message.cpp` call alike. Every length is
///   checked against its cap before anything is allocated or buffered for it (`max_token` 256 B
///   before the hello is buffered, so a stranger costs at most one 64 KiB read; `max_key` 4 KiB;
///   `max_value` 64 MiB, the largest value a client may set, hence `max_frame`; `max_keys` 4096
///   per wait; welcome texts 4 KiB). A malformed frame gets an error reply and its connection is
///   closed; bytes that are not this protocol (wrong magic) are closed without a word: never a
///   crash, never a huge allocation.
/// - Job token (`TUTTI_JOB_TOKEN`; tuttirun makes one): a client with another token is refused
///   and raises `config_error` saying so. The token keeps other jobs and strangers out; it
///   travels in clear and is no defence against someone who can read the network.
/// - Every refused or dropped connection (wrong token, version, world size or rank, malformed
///   or foreign bytes, a hello cut short) is logged on stderr, naming the client's address and
///   what was wrong, never the token: "[tutti store 127.0.0.1:29500] refused a connection from
///   127.0.0.1:40112: wrong job token: ...". At most 100 such lines per server.
/// - Where it listens: on `MASTER_ADDR` only. Its default (tuttirun's, and `tutti::tcp`'s when
///   the variable is unset and every rank is on this host) is 127.0.0.1, so a one-host job's
///   store is reachable from this host only; a job across hosts names an address of node 0
///   that the others reach (`--master-addr`). Only when `MASTER_ADDR` is not an address of this
///   host (behind a NAT, or a name that resolves elsewhere) does it listen on every address,
///   and it says so on stderr. `store_server::address()` tells which.
/// - Start-up checks: a client claiming a rank some other client already claimed, or a world
///   size different from rank 0's, is refused; the server then fails every wait of the job with
///   the same message (naming both ranks and both values), so no rank hangs until its deadline.
/// - Port 0 asks the kernel for a free port; `store_server::port()` tells which. (Ranks need a
///   known `MASTER_PORT` to find the store, so in a job port 0 is what the ranks' own data
///   listeners use: they publish their real ports here.)
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/bootstrap/local_rendezvous.hpp"
#include "tutti/core/error.hpp"

namespace tutti {

namespace detail::store_impl {

inline constexpr std::uint64_t magic = 0x3154532d69747475ull;  // "utti-ST1" little-endian
inline constexpr std::uint32_t version = 1;
inline constexpr std::size_t max_key = 4096;
inline constexpr std::size_t max_value = std::size_t{64} << 20;
inline constexpr std::size_t max_token = 256;
inline constexpr std::size_t max_keys = 4096;  // per wait
inline constexpr std::size_t max_frame = max_value + max_key + 64;
inline constexpr std::size_t hello_fixed = 8 + 4 + 4 + 4 + 4;  // magic version rank world token_len
/// Connections that have not yet said a complete hello: at most this many wait at once (a new
/// one closes the oldest: a rank sends its hello as soon as it connects, so the newest is the
/// likeliest to be one), each at most `hello_within`; so silent connections cannot use up the
/// descriptors of the store or of the tcp mesh.
inline constexpr std::size_t max_silent = 64;
inline constexpr std::chrono::seconds hello_within{10};
/// A client that connected waits this long for the welcome, whatever its own timeout: a tutti
/// store answers a hello at once, so a silence this long means another program holds the port.
inline constexpr std::chrono::seconds welcome_within{5};

enum class opcode : std::uint8_t { set = 1, get = 2, wait = 3, add = 4 };
enum class status : std::uint8_t { ok = 0, timeout = 1, refused = 2, failed = 3 };

/// Appends little-endian integers and length-prefixed strings.
struct writer {
  std::string out;
  template <class U>
  writer& num(U v) {
    using W = std::make_unsigned_t<U>;
    W w = static_cast<W>(v);
    for (std::size_t i = 0; i < sizeof(U); ++i) out += static_cast<char>((w >> (8 * i)) & 0xff);
    return *this;
  }
  writer& str(std::string_view s) {
    num(static_cast<std::uint32_t>(s.size()));
    out.append(s);
    return *this;
  }
};

/// Reads what `writer` wrote; every read is bounds-checked (`ok` turns false, values are 0/empty).
struct reader {
  std::string_view in;
  bool ok = true;
  template <class U>
  U num() {
    if (in.size() < sizeof(U)) {
      ok = false;
      in = {};
      return U{};
    }
    std::make_unsigned_t<U> w = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i)
      w |= static_cast<std::make_unsigned_t<U>>(static_cast<unsigned char>(in[i])) << (8 * i);
    in.remove_prefix(sizeof(U));
    return static_cast<U>(w);
  }
  std::string_view str(std::size_t limit) {
    const auto n = num<std::uint32_t>();
    if (!ok || n > limit || n > in.size()) {
      ok = false;
      in = {};
      return {};
    }
    auto s = in.substr(0, n);
    in.remove_prefix(n);
    return s;
  }
};

/// Whether a peer's job token equals ours, in time that depends only on the lengths (a
/// stranger timing its refusals learns nothing about how much of the secret it guessed).
inline bool same_token(std::string_view theirs, std::string_view ours) {
  unsigned char diff = theirs.size() == ours.size() ? 0 : 1;
  const std::size_t n = std::min(theirs.size(), ours.size());
  for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(theirs[i] ^ ours[i]);
  // an opaque barrier: the compiler may not turn the loop back into an early exit
  asm volatile("" : "+r"(diff));
  return diff == 0;
}

inline std::string frame(const std::string& body) {
  writer w;
  w.num(static_cast<std::uint32_t>(body.size()));
  return w.out + body;
}

/// A message that breaks the protocol: what the pure parsers below raise. `reason` is what is
/// wrong ("frame of 4294967295 bytes"); `stranger`: the bytes are not tutti's protocol at all
/// (wrong magic), so the caller closes without answering.
struct malformed : error {
  explicit malformed(const std::string& why, bool stranger_ = false)
      : error(errc::aborted, "malformed message: " + why), reason(why), stranger(stranger_) {}
  std::string reason;
  bool stranger;
};

/// A client's hello: magic u64, version u32, rank i32, world i32, token (u32 length + bytes).
struct client_hello {
  std::uint32_t version = 0;
  std::int32_t rank = -1, world = 0;
  std::string_view token;  // points into the parsed bytes
  std::size_t size = 0;    // bytes it took
};

/// Parses the hello at the front of `in`: empty while incomplete; `malformed` for another magic
/// (stranger) or a token longer than `max_token`, as soon as the fixed part has arrived.
inline std::optional<client_hello> parse_hello(std::string_view in) {
  if (in.size() < hello_fixed) return std::nullopt;
  reader r{in};
  if (r.num<std::uint64_t>() != magic) throw malformed("not a tutti store client (wrong magic)", true);
  client_hello h;
  h.version = r.num<std::uint32_t>();
  h.rank = r.num<std::int32_t>();
  h.world = r.num<std::int32_t>();
  const auto tlen = r.num<std::uint32_t>();
  if (tlen > max_token) throw malformed("token of " + std::to_string(tlen) + " bytes");
  if (in.size() < hello_fixed + tlen) return std::nullopt;
  h.token = in.substr(hello_fixed, tlen);
  h.size = hello_fixed + tlen;
  return h;
}

/// One request: a frame (u32 length, then the body: opcode u8 and its fields).
struct request {
  opcode op = opcode::set;
  std::string_view key, value;          // set, add, get (key)
  std::int64_t delta = 0;               // add
  std::uint64_t timeout_ms = 0;         // get, wait
  std::vector<std::string_view> keys;   // wait (at most max_keys)
  std::size_t size = 0;                 // bytes it took, length included
};

/// Parses the request at the front of `in`: empty while incomplete; `malformed` for a frame
/// longer than `max_frame` (said by its first 4 bytes, before the rest is buffered), a field
/// running past the frame or past its bound, bytes left over, an unknown operation.
inline std::optional<request> parse_request(std::string_view in) {
  if (in.size() < 4) return std::nullopt;
  reader lr{in};
  const auto len = lr.num<std::uint32_t>();
  if (len > max_frame) throw malformed("frame of " + std::to_string(len) + " bytes");
  if (in.size() < 4 + std::size_t{len}) return std::nullopt;
  reader r{in.substr(4, len)};
  request q;
  q.size = 4 + std::size_t{len};
  const auto o = r.num<std::uint8_t>();
  q.op = static_cast<opcode>(o);
  switch (q.op) {
    case opcode::set:
      q.key = r.str(max_key);
      q.value = r.str(max_value);
      if (!r.ok || !r.in.empty()) throw malformed("set");
      return q;
    case opcode::add:
      q.key = r.str(max_key);
      q.delta = r.num<std::int64_t>();
      if (!r.ok || !r.in.empty()) throw malformed("add");
      return q;
    case opcode::get:
    case opcode::wait: {
      q.timeout_ms = r.num<std::uint64_t>();
      if (q.op == opcode::get) {
        q.keys.push_back(r.str(max_key));
      } else {
        const auto n = r.num<std::uint32_t>();
        if (n > max_keys) throw malformed("wait for " + std::to_string(n) + " keys");
        for (std::uint32_t i = 0; i < n && r.ok; ++i) q.keys.push_back(r.str(max_key));
      }
      // 2^40 ms is 35 years: longer is no deadline anyone meant, and would overflow the clock.
      if (!r.ok || !r.in.empty() || q.timeout_ms > (std::uint64_t{1} << 40)) throw malformed("get/wait");
      if (q.op == opcode::get) q.key = q.keys[0];
      return q;
    }
  }
  throw malformed("unknown operation " + std::to_string(o));
}

/// `add` on a counter's text: the new value, or `malformed` when it would overflow 64 bits
/// (the counter keeps its value).
inline std::string add_to(std::string_view counter, std::int64_t delta) {
  const std::string text(counter);
  long long now = text.empty() ? 0 : std::strtoll(text.c_str(), nullptr, 10);
  long long sum = 0;
  if (__builtin_add_overflow(now, delta, &sum))
    throw malformed("add of " + std::to_string(delta) + " to " + std::to_string(now) + " overflows");
  return std::to_string(sum);
}

/// The head of an answer to a hello (the store's welcome, the tcp mesh's answer): magic u64,
/// status u8, u32 length of the text that follows (at most 4096 bytes).
struct answer_head {
  std::uint8_t status = 0;
  std::uint32_t text_bytes = 0;
};
inline constexpr std::size_t answer_head_bytes = 8 + 1 + 4;
inline constexpr std::size_t max_answer_text = 4096;
inline answer_head parse_answer_head(std::string_view head, std::uint64_t want_magic) {
  reader r{head};
  if (head.size() != answer_head_bytes) throw malformed("answer head of " + std::to_string(head.size()) + " bytes");
  if (r.num<std::uint64_t>() != want_magic) throw malformed("wrong magic", true);
  answer_head a;
  a.status = r.num<std::uint8_t>();
  a.text_bytes = r.num<std::uint32_t>();
  if (a.text_bytes > max_answer_text) throw malformed("answer text of " + std::to_string(a.text_bytes) + " bytes");
  return a;
}

/// The head of the store's reply to a request: status u8, u32 payload length (at most
/// `max_value`: the largest value a client may set).
struct reply_head {
  status st = status::ok;
  std::uint32_t payload_bytes = 0;
};
inline constexpr std::size_t reply_head_bytes = 1 + 4;
inline reply_head parse_reply_head(std::string_view head) {
  if (head.size() != reply_head_bytes) throw malformed("reply head of " + std::to_string(head.size()) + " bytes");
  reader r{head};
  reply_head h;
  const auto st = r.num<std::uint8_t>();
  h.payload_bytes = r.num<std::uint32_t>();
  if (st > static_cast<std::uint8_t>(status::failed)) throw malformed("reply status " + std::to_string(st));
  if (h.payload_bytes > max_value) throw malformed("reply of " + std::to_string(h.payload_bytes) + " bytes");
  h.st = static_cast<status>(st);
  return h;
}

/// "host:port", with brackets for IPv6.
inline std::string host_port(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

/// Best effort: "pid 123 (python3)" for the process listening on TCP `port`, from /proc.
inline std::string who_listens(int port) {
  std::set<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      ls >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      const auto colon = local.rfind(':');
      if (st != "0A" || colon == std::string::npos) continue;  // 0A: LISTEN
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) inodes.insert("socket:[" + inode + "]");
    }
  }
  if (inodes.empty()) return {};
  DIR* proc = ::opendir("/proc");
  if (!proc) return {};
  std::string found;
  while (dirent* d = ::readdir(proc)) {
    if (!found.empty()) break;
    if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
    const std::string base = std::string("/proc/") + d->d_name;
    DIR* fds = ::opendir((base + "/fd").c_str());
    if (!fds) continue;
    while (dirent* e = ::readdir(fds)) {
      char target[128];
      const ssize_t n = ::readlink((base + "/fd/" + e->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (inodes.count(target)) {
        std::ifstream comm(base + "/comm");
        std::string name;
        std::getline(comm, name);
        found = "pid " + std::string(d->d_name) + " (" + name + ")";
        break;
      }
    }
    ::closedir(fds);
  }
  ::closedir(proc);
  return found;
}

/// The addresses `host` resolves to for a TCP socket (numeric or a name).
inline std::vector<sockaddr_storage> resolve(const std::string& host, int port, bool passive, std::string& why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  std::vector<sockaddr_storage> out;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    why = ::gai_strerror(rc);
    return out;
  }
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    sockaddr_storage s{};
    std::memcpy(&s, ai->ai_addr, ai->ai_addrlen);
    out.push_back(s);
  }
  ::freeaddrinfo(res);
  return out;
}

inline socklen_t addr_len(const sockaddr_storage& s) {
  return s.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}
inline int addr_port(const sockaddr_storage& s) {
  return s.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6&>(s).sin6_port)
                                 : ntohs(reinterpret_cast<const sockaddr_in&>(s).sin_port);
}
inline std::string addr_host(const sockaddr_storage& s) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (s.ss_family == AF_INET6) ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(s).sin6_addr, buf, sizeof buf);
  else ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(s).sin_addr, buf, sizeof buf);
  return buf;
}

inline std::chrono::milliseconds left(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
}

}  // namespace detail::store_impl

/// Rank 0's side of the store: a thread serving clients until the object is destroyed.
class store_server {
 public:
  /// Listens on `host:port` (port 0: any free port, see `port()`); `host` empty: every address.
  /// `world_size` 0 accepts any client; otherwise a client's world size must match. `token`
  /// empty accepts any token. Throws `config_error` when the port is taken, naming the holder.
  store_server(const std::string& host, int port, int world_size, std::string token)
      : world_size_(world_size), token_(std::move(token)) {
    using namespace detail::store_impl;
    std::string why;
    auto addrs = resolve(host, port, true, why);
    if (addrs.empty()) throw config_error("store: cannot resolve MASTER_ADDR '" + host + "': " + why);
    int last_errno = 0;
    for (const auto& a : addrs) {
      detail::unique_fd fd(::socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!fd) continue;
      const int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_storage b = a;
      int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&b), addr_len(b));
      if (rc != 0 && errno == EADDRNOTAVAIL) {
        // MASTER_ADDR is not an address of this host (a NAT or a name for it): any address.
        sockaddr_storage any{};
        any.ss_family = b.ss_family;
        if (b.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(any).sin6_port = htons(static_cast<std::uint16_t>(port));
        else reinterpret_cast<sockaddr_in&>(any).sin_port = htons(static_cast<std::uint16_t>(port));
        b = any;
        rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&b), addr_len(b));
        if (rc == 0)
          std::fprintf(stderr, "[tutti store] MASTER_ADDR '%s' is not an address of this host: the store listens "
                       "on every address (port %d)\n", host.c_str(), port);
      }
      if (rc != 0) {
        last_errno = errno;
        if (errno == EADDRINUSE) {
          const std::string who = who_listens(port);
          throw config_error("store: MASTER_PORT " + std::to_string(port) + " on " + host_port(host, port) +
                             " is already in use" + (who.empty() ? "" : " by " + who) +
                             ": another job or service holds it; pick another MASTER_PORT (tuttirun "
                             "picks a free one when --master-port is not given)");
        }
        continue;
      }
      if (::listen(fd.get(), 4096) != 0) {
        last_errno = errno;
        continue;
      }
      sockaddr_storage got{};
      socklen_t len = sizeof got;
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&got), &len);
      port_ = addr_port(got);
      address_ = addr_host(got);
      where_ = host_port(address_, port_);
      listener_ = std::move(fd);
      break;
    }
    if (!listener_)
      throw config_error("store: cannot listen on " + host_port(host, port) + ": " +
                         detail::errno_text(last_errno ? last_errno : EINVAL));
    wake_ = detail::unique_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_) throw config_error("store: eventfd: " + detail::errno_text(errno));
    thread_ = std::thread([this] { serve(); });
  }
  store_server(const store_server&) = delete;
  store_server& operator=(const store_server&) = delete;
  ~store_server() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto k = ::write(wake_.get(), &one, sizeof one);
    if (thread_.joinable()) thread_.join();
  }

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

  void serve() {
    using namespace detail::store_impl;
    std::map<std::uint64_t, conn> conns;
    std::uint64_t next_id = 1;
    while (true) {
      std::vector<pollfd> fds{{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
      std::vector<std::uint64_t> ids;
      for (auto& [id, c] : conns) {
        fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
        ids.push_back(id);
      }
      int timeout_ms = -1;
      auto until = [&](clock::time_point deadline) {
        const auto l = std::max<long long>(0, left(deadline).count() + 1);
        timeout_ms = timeout_ms < 0 ? static_cast<int>(std::min<long long>(l, 60000))
                                    : std::min(timeout_ms, static_cast<int>(std::min<long long>(l, 60000)));
      };
      for (auto& p : pending_) until(p.deadline);
      std::size_t silent = 0;
      for (auto& [id, c] : conns)
        if (!c.hello && !c.closing) until(c.accepted + hello_within), ++silent;
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        for (std::size_t k = 0; k < max_silent; ++k) {  // the rest at the next round
          sockaddr_storage from{};
          socklen_t from_len = sizeof from;
          detail::unique_fd c(::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&from), &from_len,
                                        SOCK_CLOEXEC | SOCK_NONBLOCK));
          if (!c) break;
          const int one = 1;
          ::setsockopt(c.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          conn n;
          n.fd = std::move(c);
          n.id = next_id++;
          n.peer = host_port(addr_host(from), addr_port(from));
          n.accepted = clock::now();
          if (silent >= max_silent) {
            for (auto& [id, o] : conns)
              if (!o.hello && !o.closing) {
                refused(o, "closed for a newer one: " + std::to_string(max_silent) + " connections were waiting to say hello");
                o.closing = true;
                o.out.clear();
                break;
              }
          } else {
            ++silent;
          }
          conns.emplace(n.id, std::move(n));
        }
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        conn& c = conns[ids[i - 2]];
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          char buf[65536];
          while (!c.closing) {
            const ssize_t k = ::recv(c.fd.get(), buf, sizeof buf, 0);
            if (k > 0) {
              c.in.append(buf, static_cast<std::size_t>(k));
              if (!handle(c)) break;
              continue;
            }
            if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
            if (!c.hello && !c.in.empty())  // a probe that connects and closes says nothing
              refused(c, "it closed the connection after " + std::to_string(c.in.size()) +
                             " bytes of an incomplete hello");
            c.closing = true;  // EOF or error: the client went away
            c.out.clear();
          }
        }
      }
      for (auto& [id, c] : conns)
        if (!c.hello && !c.closing && clock::now() >= c.accepted + hello_within) {
          refused(c, "it sent no complete hello within " + std::to_string(hello_within.count()) + " s");
          c.closing = true;
          c.out.clear();
        }
      expire_and_answer(conns);
      for (auto it = conns.begin(); it != conns.end();) {
        conn& c = it->second;
        while (!c.out.empty()) {
          const ssize_t k = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
          if (k > 0) c.out.erase(0, static_cast<std::size_t>(k));
          else if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
          else {
            c.closing = true;
            c.out.clear();
          }
        }
        if (c.closing && c.out.empty()) {
          std::erase_if(pending_, [&](const pending& p) { return p.conn == c.id; });
          it = conns.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  void reply(conn& c, detail::store_impl::status s, std::string_view payload) {
    detail::store_impl::writer w;
    w.num(static_cast<std::uint8_t>(s)).str(payload);  // a reply: status, length, payload
    c.out += w.out;
  }
  /// Logs a connection the server refuses or drops, naming the client's address and why (never
  /// the token). At most `max_logged` lines, so a port scanner cannot flood rank 0's stderr.
  void refused(const conn& c, const std::string& why) {
    static constexpr int max_logged = 100;
    if (logged_ > max_logged) return;
    if (logged_++ == max_logged)
      std::fprintf(stderr, "[tutti store %s] more refused connections; no longer logged\n", where_.c_str());
    else
      std::fprintf(stderr, "[tutti store %s] refused a connection from %s: %s\n", where_.c_str(), c.peer.c_str(),
                   why.c_str());
  }

  /// Consumes the complete messages in `c.in` (parsed by `parse_hello` and `parse_request`);
  /// false once the connection is to be closed. A malformed message gets an error reply (none
  /// for a stranger: it may not even speak TCP to us on purpose) and the connection is dropped.
  bool handle(conn& c) {
    using namespace detail::store_impl;
    try {
      while (!c.closing) {
        if (!c.hello) {
          const auto h = parse_hello(c.in);
          if (!h) return true;
          std::string refusal;
          bool poison = false;
          if (h->version != version) {
            refusal = "protocol version " + std::to_string(h->version) + " differs from the store's " +
                      std::to_string(version);
          } else if (!token_.empty() && !same_token(h->token, token_)) {
            refusal = "wrong job token: this process's TUTTI_JOB_TOKEN differs from rank 0's (another job's "
                      "process, or a rank started with a different environment)";
          } else if (h->rank >= 0 && world_size_ > 0 && h->world != world_size_) {
            refusal = "rank " + std::to_string(h->rank) + " says the world has " + std::to_string(h->world) +
                      " ranks, rank 0 says " + std::to_string(world_size_) + " (WORLD_SIZE differs between ranks)";
            poison = true;
          } else if (h->rank >= 0 && world_size_ > 0 && h->rank >= world_size_) {
            refusal = "a process claims rank " + std::to_string(h->rank) + " in a world of " +
                      std::to_string(world_size_);
            poison = true;
          } else if (h->rank >= 0 && !ranks_.insert(h->rank).second) {
            refusal = "two processes claim rank " + std::to_string(h->rank) + " (duplicate RANK)";
            poison = true;
          }
          c.in.erase(0, h->size);  // h->token points into c.in: not used past here
          if (poison && problem_.empty()) problem_ = refusal;
          writer w;
          w.num(magic).num(static_cast<std::uint8_t>(refusal.empty() ? status::ok : status::refused)).str(refusal);
          c.out += w.out;
          if (!refusal.empty()) {
            refused(c, refusal);
            c.closing = true;
            return false;
          }
          c.hello = true;
          continue;
        }
        const auto q = parse_request(c.in);
        if (!q) return true;
        switch (q->op) {
          case opcode::set:
            data_[std::string(q->key)] = std::string(q->value);
            reply(c, status::ok, {});
            break;
          case opcode::add: {
            auto& slot = data_[std::string(q->key)];
            slot = add_to(slot, q->delta);
            reply(c, status::ok, slot);
            break;
          }
          case opcode::get:
          case opcode::wait:
            pending_.push_back({c.id, std::vector<std::string>(q->keys.begin(), q->keys.end()),
                                q->op == opcode::get, clock::now() + std::chrono::milliseconds(q->timeout_ms)});
            break;
        }
        c.in.erase(0, q->size);
      }
    } catch (const malformed& e) {
      if (!e.stranger) reply(c, status::failed, "store: malformed message (" + e.reason + "); closing the connection");
      refused(c, e.stranger ? e.reason : "malformed message (" + e.reason + ")");
      c.in.clear();
      c.closing = true;
    }
    return false;
  }

  /// Answers the waits whose keys exist, whose deadline passed, or that a start-up problem ends.
  void expire_and_answer(std::map<std::uint64_t, conn>& conns) {
    using namespace detail::store_impl;
    const auto now = clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      auto cit = conns.find(it->conn);
      if (cit == conns.end()) {
        it = pending_.erase(it);
        continue;
      }
      std::string missing;
      for (const auto& k : it->keys)
        if (!data_.count(k)) missing += (missing.empty() ? "" : ", ") + k;
      if (!problem_.empty()) reply(cit->second, status::failed, problem_);
      else if (missing.empty()) reply(cit->second, status::ok, it->get ? std::string_view(data_[it->keys[0]]) : "");
      else if (now >= it->deadline) reply(cit->second, status::timeout, missing);
      else {
        ++it;
        continue;
      }
      it = pending_.erase(it);
    }
  }

  int world_size_;
  std::string token_;
  int port_ = 0;
  std::string address_, where_;  // the listening address, and with its port for the log
  int logged_ = 0;               // refusals logged (server thread only)
  detail::unique_fd listener_, wake_;
  std::thread thread_;
  // Touched by the server thread only.
  std::map<std::string, std::string> data_;
  std::vector<pending> pending_;
  std::set<int> ranks_;
  std::string problem_;
};

/// A client of the store. Blocking calls; each waits at most its timeout (plus a few seconds for
/// a slow server) and raises `timeout_error`, `peer_lost` (the server went away) or
/// `config_error` (refused: token, world size, duplicate rank; or what listens on the port is not
/// a tutti store).
class store {
 public:
  /// Connects to `host:port`, retrying while the port refuses connections (the server may not be
  /// up yet) until `timeout` passes. Once connected, the welcome must come within
  /// `welcome_within` (5 s) and be tutti's: otherwise `config_error` at once, naming the address
  /// (another program holds the port). `rank` -1 and `world_size` 0: an anonymous client (tools,
  /// tests).
  store(const std::string& host, int port, int rank, int world_size, const std::string& token,
        std::chrono::milliseconds timeout)
      : where_(detail::store_impl::host_port(host, port)) {
    using namespace detail::store_impl;
    if (token.size() > max_token) throw config_error("TUTTI_JOB_TOKEN is longer than " + std::to_string(max_token) + " bytes");
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string why = "no address";
    for (auto pause = std::chrono::milliseconds(5);; pause = std::min(pause * 2, std::chrono::milliseconds(100))) {
      std::string rwhy;
      for (const auto& a : resolve(host, port, false, rwhy)) {
        detail::unique_fd fd(::socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        if (!fd) continue;
        if (connect_by(fd.get(), a, deadline, why)) {
          fd_ = std::move(fd);
          break;
        }
      }
      if (!rwhy.empty()) why = "cannot resolve: " + rwhy;
      if (fd_) break;
      if (left(deadline).count() <= 0)
        throw timeout_error("store: cannot reach the store at MASTER_ADDR:MASTER_PORT = " + where_ + " after " +
                            std::to_string(timeout.count()) + " ms (" + why +
                            "); is rank 0 running, and do all ranks use the same MASTER_ADDR and MASTER_PORT?");
      std::this_thread::sleep_for(std::min(pause, std::max(left(deadline), std::chrono::milliseconds(1))));
    }
    const int one = 1;
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    writer w;
    w.num(magic).num(version).num(static_cast<std::int32_t>(rank)).num(static_cast<std::int32_t>(world_size)).str(token);
    // Something accepted the connection, but node 0's tutti may not be what did: another program
    // holding MASTER_PORT accepts too, and then says nothing or something else. Bounded by
    // `welcome_within`, not by `timeout` (300 s in a job), so that is an error at once.
    const auto welcome_by = std::chrono::steady_clock::now() + welcome_within;
    auto not_a_store = [&](const std::string& what) {
      fd_.reset();
      return config_error("store: what listens at MASTER_ADDR:MASTER_PORT = " + where_ + " is not a tutti store: " +
                          what + ". Another program probably holds MASTER_PORT there (which one cannot be known "
                          "from here; on that host, `ss -ltnp` names it), so rank 0's store could not take it; "
                          "pick another MASTER_PORT for the job");
    };
    char head[answer_head_bytes];
    answer_head a;
    try {
      io(w.out.data(), w.out.size(), true, welcome_by);
      io(head, sizeof head, false, welcome_by);
      a = parse_answer_head(std::string_view(head, sizeof head), magic);
    } catch (const timeout_error&) {
      throw not_a_store("it accepted the connection but sent no welcome within " +
                        std::to_string(welcome_within.count()) + " s (a tutti store answers at once)");
    } catch (const malformed& e) {
      throw not_a_store(e.stranger ? "it answered with bytes that are not tutti's welcome (wrong magic)"
                                   : "it sent a malformed welcome (" + e.reason + ")");
    }
    std::string msg(a.text_bytes, '\0');
    io(msg.data(), msg.size(), false, welcome_by);
    if (a.status != static_cast<std::uint8_t>(status::ok))
      throw config_error("store at " + where_ + " refused this process: " + msg);
  }

  void set(std::string_view key, std::string_view value) {
    using namespace detail::store_impl;
    check_key(key);
    if (value.size() > max_value) throw usage_error("store::set: value larger than 64 MiB");
    writer w;
    w.num(static_cast<std::uint8_t>(opcode::set)).str(key).str(value);
    call(w.out, std::chrono::seconds(60), key);
  }

  /// The value of `key`, waiting up to `timeout` for some rank to set it.
  std::string get(std::string_view key, std::chrono::milliseconds timeout) {
    using namespace detail::store_impl;
    check_key(key);
    writer w;
    w.num(static_cast<std::uint8_t>(opcode::get)).num(static_cast<std::uint64_t>(timeout.count())).str(key);
    return call(w.out, timeout, key);
  }

  /// Returns once every key exists; `timeout_error` naming the missing ones otherwise.
  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
    using namespace detail::store_impl;
    if (keys.size() > max_keys) throw usage_error("store::wait: more than 4096 keys");
    writer w;
    w.num(static_cast<std::uint8_t>(opcode::wait)).num(static_cast<std::uint64_t>(timeout.count()));
    w.num(static_cast<std::uint32_t>(keys.size()));
    for (const auto& k : keys) {
      check_key(k);
      w.str(k);
    }
    call(w.out, timeout, keys.empty() ? std::string_view{} : std::string_view(keys[0]));
  }

  /// Adds `delta` to the counter `key` (0 when absent) and returns the new value, atomically.
  long long add(std::string_view key, long long delta) {
    using namespace detail::store_impl;
    check_key(key);
    writer w;
    w.num(static_cast<std::uint8_t>(opcode::add)).str(key).num(static_cast<std::int64_t>(delta));
    return std::strtoll(call(w.out, std::chrono::seconds(60), key).c_str(), nullptr, 10);
  }

  /// This end of the connection: the address other hosts reach this one by, on the route to
  /// the master.
  sockaddr_storage local_address() const {
    sockaddr_storage s{};
    socklen_t len = sizeof s;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&s), &len);
    return s;
  }
  const std::string& where() const noexcept { return where_; }

  /// Sends raw bytes as one frame (for tests of the server's checks).
  std::string raw_call(const std::string& body, std::chrono::milliseconds timeout) { return call(body, timeout, "raw"); }

 private:
  static void check_key(std::string_view key) {
    if (key.size() > detail::store_impl::max_key) throw usage_error("store: key longer than 4096 bytes");
  }

  static bool connect_by(int fd, const sockaddr_storage& a, std::chrono::steady_clock::time_point deadline,
                         std::string& why) {
    using namespace detail::store_impl;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), addr_len(a)) == 0) return true;
    if (errno != EINPROGRESS) {
      why = detail::errno_text(errno);
      return false;
    }
    pollfd pf{fd, POLLOUT, 0};
    const auto l = std::max<long long>(1, std::min<long long>(left(deadline).count(), 5000));
    if (::poll(&pf, 1, static_cast<int>(l)) <= 0) {
      why = "connection timed out";
      return false;
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) why = detail::errno_text(err);
    return err == 0;
  }

  void io(void* buf, std::size_t n, bool writing, std::chrono::steady_clock::time_point deadline) {
    if (!fd_) throw error(errc::aborted, "store: the connection to " + where_ + " was closed after an earlier error");
    auto* p = static_cast<char*>(buf);
    while (n) {
      const ssize_t k = writing ? ::send(fd_.get(), p, n, MSG_NOSIGNAL) : ::recv(fd_.get(), p, n, 0);
      if (k > 0) {
        p += k;
        n -= static_cast<std::size_t>(k);
        continue;
      }
      if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
        const std::string why = k == 0 ? "closed the connection" : detail::errno_text(errno);
        fd_.reset();
        throw peer_lost("store: the store at " + where_ + " (rank 0) " + why +
                        " (rank 0 exited, failed or refused this process)");
      }
      pollfd pf{fd_.get(), static_cast<short>(writing ? POLLOUT : POLLIN), 0};
      const auto l = detail::store_impl::left(deadline).count();
      if (l <= 0) {
        fd_.reset();  // a reply may still come: the stream is out of step
        throw timeout_error("store: the store at " + where_ + " did not answer in time");
      }
      ::poll(&pf, 1, static_cast<int>(std::min<long long>(l, 1000)));
    }
  }

  std::string call(const std::string& body, std::chrono::milliseconds timeout, std::string_view key) {
    using namespace detail::store_impl;
    // The server answers a wait when it times out; the client waits a little longer for that.
    const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(5);
    const std::string f = frame(body);
    io(const_cast<char*>(f.data()), f.size(), true, deadline);
    char head[reply_head_bytes];
    io(head, sizeof head, false, deadline);
    reply_head h;
    try {
      h = parse_reply_head(std::string_view(head, sizeof head));
    } catch (const malformed& e) {
      fd_.reset();
      throw error(errc::aborted, "store: malformed reply from " + where_ + " (" + e.reason +
                                     ") to a request about '" + std::string(key) + "'");
    }
    std::string payload(h.payload_bytes, '\0');
    io(payload.data(), payload.size(), false, deadline);
    switch (h.st) {
      case status::ok: return payload;
      case status::timeout:
        throw timeout_error("store: timed out after " + std::to_string(timeout.count()) + " ms waiting for key(s) " +
                            payload + " at " + where_ + " (a rank did not start, or died during start-up)");
      case status::failed: throw config_error("store at " + where_ + ": " + payload);
      default: break;
    }
    fd_.reset();  // status::refused answers only a hello
    throw error(errc::aborted, "store: malformed reply from " + where_ + " (status refused) to a request about '" +
                                   std::string(key) + "'");
  }

  std::string where_;
  detail::unique_fd fd_;
};

}  // namespace tutti
