// tuttirun: the rendezvous across nodes over sockets: node 0's server (rdzv_server), the other
// nodes' client (rdzv_client), and what the launcher sees of both (rendezvous). It restarts the
// nodes together (--max-restarts) and gathers the job's hang report node by node.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common.hpp"
#include "failure.hpp"
#include "job.hpp"
#include "options.hpp"
#include "rendezvous_codec.hpp"

namespace tuttirun {

// With --nnodes > 1, every other node's tuttirun keeps one connection to node 0's (the lines
// they exchange: rendezvous_codec.hpp). With --max-restarts > 0 (`coordinated`) node 0 takes
// part like the others, through direct calls; every decision is node 0's, so the nodes always
// agree on what comes next; `events` hands them to the launcher. Without, the connection carries
// the hang report only: the nodes start at once (a node connects when it can, retrying, and
// without it prints its own node's report) and end on their own, as their ranks do.
//
// The job's hang report: a node that wants it (a rank failed there, SIGUSR1) says `dump`, and
// `tuttirun --dump` on any node sends `query`; node 0 takes its own ranks' records, asks every
// node for theirs (`collect`: each reads its ranks' flight tables at once, before it acts on
// what follows, such as the failure that stops its ranks), and once all have answered or
// `report_wait` passed prints one report (unless only `--dump` asked) and sends it to whoever
// asked. One report per failed attempt: a node whose rank fails after it gets the same text.

// A connection to node 0's rendezvous must say hello within this, and node 0 must welcome it.
inline constexpr auto rdzv_hello_within = std::chrono::seconds(10);
// How long the other nodes wait beyond node 0's own deadlines before they give up on it.
inline constexpr auto rdzv_margin = std::chrono::seconds(10);
inline constexpr std::size_t max_rdzv_strangers = 16;  // connections yet to say hello
// How long node 0 waits for the nodes' records before it reports without those missing, and
// how much longer a node that asked waits for the report before it prints its own node's.
inline constexpr auto report_wait = std::chrono::seconds(3);
inline constexpr auto report_margin = std::chrono::seconds(2);

struct rdzv_event {
  enum class kind { start, failed, end, abort } what;
  long long attempt = 0;
  int code = 0;                          // end: the job's status; abort: tuttirun's
  std::optional<failure_report> report;  // start: the failure it follows; failed; end: the root cause
  std::string why;                       // abort
};

inline std::string host_port_text(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

inline std::string address_text(const sockaddr_storage& a) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  const socklen_t len = a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown address";
  return host_port_text(host, std::atoi(serv));
}

// The rendezvous' connections carry each line at once, and notice a node that vanished without
// a word (its host went down) in about half a minute.
inline void tune_rdzv_socket(int fd) {
  const int one = 1, idle = 15, interval = 5, count = 4;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// One connection of the rendezvous, non-blocking: whole lines in, lines out.
class line_conn {
 public:
  line_conn(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  line_conn(const line_conn&) = delete;
  line_conn& operator=(const line_conn&) = delete;
  ~line_conn() { ::close(fd_); }

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  bool wants_out() const { return !out_.empty(); }

  void send(std::string_view line) {
    out_.append(line);
    out_ += '\n';
    flush();
  }

  // Writes what the socket takes now; false once the connection is broken.
  bool flush() {
    while (!out_.empty() && !broken_) {
      const ssize_t n = ::send(fd_, out_.data(), out_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) out_.erase(0, static_cast<std::size_t>(n));
      else if (n < 0 && errno == EINTR) continue;
      else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      else broken_ = true;
    }
    return !broken_;
  }

  // Waits up to `until` for the peer to take what is still to be sent (before tuttirun exits).
  void drain(steady_clock::time_point until) {
    while (flush() && !out_.empty() && steady_clock::now() < until) {
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, 50);
    }
  }

  // Reads what has come and appends its complete lines to `lines`. False (`why` says why) at
  // EOF, on an error, or when a line is longer than any this protocol sends.
  bool receive(std::vector<std::string>& lines, std::string& why) {
    char buf[4096];
    while (true) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        in_.append(buf, static_cast<std::size_t>(n));
        for (std::size_t nl; (nl = in_.find('\n')) != std::string::npos; in_.erase(0, nl + 1))
          lines.push_back(in_.substr(0, nl));
        if (in_.size() > max_rdzv_line) {
          why = "it sent a line of more than " + std::to_string(max_rdzv_line) + " bytes";
          return false;
        }
      } else if (n == 0) {
        why = "it closed the connection";
        return false;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return true;
      } else if (errno != EINTR) {
        why = errno_text("recv");
        return false;
      }
    }
  }

 private:
  int fd_;
  std::string peer_;
  std::string in_, out_;
  bool broken_ = false;
};

// What the launcher sees of the rendezvous, on node 0 (rdzv_server) and the others (rdzv_client).
class rendezvous {
 public:
  virtual ~rendezvous() = default;
  // Before the first attempt: the other nodes connect to node 0. Returns 0, or the signal
  // (SIGINT, SIGTERM, SIGHUP) that came first. Throws launcher_error when node 0 cannot be reached.
  virtual int join(int sigfd) = 0;
  // The descriptors to poll, appended to `fds`; then what poll() said of them, in that order.
  virtual void add_fds(std::vector<pollfd>& fds) = 0;
  virtual void on_poll(const pollfd* fds) = 0;
  // When on_time() has something to check, if ever; on_time() acts on the deadlines passed.
  virtual std::optional<steady_clock::time_point> deadline() const = 0;
  virtual void on_time() = 0;
  // This node's first failure of an attempt, as it happens.
  virtual void report_failure(const failure_report& r) = 0;
  // Attempt `attempt` is over on this node (every rank gone), with this node's status and its
  // ranks' part in the failure (the launcher's failures_seen: node 0 picks the cause from all).
  virtual void report_done(long long attempt, int code, const std::vector<failure_report>& seen) = 0;
  // This node's tuttirun leaves (it received a signal): the others are told why.
  virtual void leave(const std::string& why) = 0;
  // Before tuttirun exits: what is still to be sent goes out.
  virtual void finish() = 0;
  // This node wants the job's hang report, printed on stderr (here and on node 0): `failure` when
  // a rank of `attempt` failed, else on SIGUSR1. False when the rendezvous cannot give it (not
  // connected): the caller prints its own node's.
  virtual bool want_report(const std::string& why, bool failure, long long attempt) = 0;
  // A report is being gathered or awaited: tuttirun lets it finish before it exits.
  virtual bool busy() const = 0;

  std::deque<rdzv_event> events;  // what the launcher is to act on, in order
  // What this node's ranks are doing now (the launcher's local_records).
  std::function<std::vector<flight_process>()> local_records;
};

// The title of the job's report.
inline std::string job_report_title(const std::string& why) {
  return "hang report (" + why + "): what each rank of the job was doing";
}

// Node 0's listening socket, on `host` (on every address when `host` is not one of this host's,
// as the ranks' store does).
inline int listen_for_nodes(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    throw launcher_error("cannot resolve --master-addr " + host + ": " + ::gai_strerror(rc));
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    const int s = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) { why = errno_text("socket"); continue; }
    const int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage a{};
    std::memcpy(&a, ai->ai_addr, ai->ai_addrlen);
    int rc = ::bind(s, reinterpret_cast<sockaddr*>(&a), ai->ai_addrlen);
    if (rc != 0 && errno == EADDRNOTAVAIL) {  // not an address of this host (a NAT, a name for it)
      sockaddr_storage any{};
      any.ss_family = a.ss_family;
      if (a.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(any).sin6_port = htons(static_cast<std::uint16_t>(port));
      else reinterpret_cast<sockaddr_in&>(any).sin_port = htons(static_cast<std::uint16_t>(port));
      rc = ::bind(s, reinterpret_cast<sockaddr*>(&any), ai->ai_addrlen);
    }
    if (rc == 0 && ::listen(s, 64) == 0) {
      fd = s;
      break;
    }
    why = errno == EADDRINUSE ? "the port is in use: another job or service holds it; pick another --rdzv-port "
                                "(by default --master-port + 1)"
                              : errno_text(rc != 0 ? "bind" : "listen");
    ::close(s);
  }
  ::freeaddrinfo(res);
  if (fd < 0) throw launcher_error("cannot serve the nodes' rendezvous on " + host_port_text(host, port) + ": " + why);
  return fd;
}

// One try to connect to `host`:`port`, each of its addresses waited for until `deadline` (at
// most 5 s). Returns the socket; -1 with `why`, or -1 with `sig` when a signal came on `sigfd`
// (-1: none is watched).
inline int connect_once(const std::string& host, int port, steady_clock::time_point deadline, int sigfd, int& sig,
                        std::string& why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    why = std::string("cannot resolve --master-addr: ") + ::gai_strerror(rc);
    return -1;
  }
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int s = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) { why = errno_text("socket"); continue; }
    if (::connect(s, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
      pollfd p[2] = {{s, POLLOUT, 0}, {sigfd, POLLIN, 0}};
      ::poll(p, 2, std::max(1, std::min(poll_ms_until(deadline), 5000)));
      if ((p[1].revents & POLLIN) && (sig = take_signal(sigfd))) {
        ::close(s), ::freeaddrinfo(res);
        return -1;
      }
      int err = ETIMEDOUT;
      socklen_t len = sizeof err;
      if (p[0].revents) ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0) {
        ::freeaddrinfo(res);
        tune_rdzv_socket(s);
        return s;
      }
      why = std::strerror(err);
    } else {
      why = errno_text("connect");
    }
    ::close(s);
  }
  ::freeaddrinfo(res);
  return -1;
}

// Connects to node 0's rendezvous, retrying while nothing listens there yet (node 0's tuttirun
// may start later) until `deadline`. Returns the socket, or -1 when a signal came first (`sig`).
inline int connect_to_node0(const options& o, steady_clock::time_point deadline, int sigfd, int& sig) {
  const std::string where = host_port_text(o.master_addr, *o.rdzv_port);
  std::string why = "no address";
  for (auto pause = std::chrono::milliseconds(10);; pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
    if (const int s = connect_once(o.master_addr, *o.rdzv_port, deadline, sigfd, sig, why); s >= 0 || sig) return s;
    if (steady_clock::now() >= deadline)
      throw launcher_error("cannot reach node 0's tuttirun at " + where + " (the restart rendezvous, --rdzv-port) within " +
                           seconds_text(o.rdzv_timeout_s) + " s (--rdzv-timeout): " + why +
                           "; is it running, with the same --master-addr, --master-port, --rdzv-port?");
    pollfd p{sigfd, POLLIN, 0};
    ::poll(&p, 1, std::max(1, std::min(poll_ms_until(deadline), static_cast<int>(pause.count()))));
    if ((p.revents & POLLIN) && (sig = take_signal(sigfd))) return -1;
  }
}

// Whether two tokens are equal, in a time that does not depend on where they differ.
inline bool same_token(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

inline std::string node_list(const std::vector<long long>& nodes) {
  std::string s = nodes.size() == 1 ? "node " : "nodes ";
  for (std::size_t i = 0; i < nodes.size(); ++i) s += (i ? ", " : "") + std::to_string(nodes[i]);
  return s;
}

// Node 0's side: accepts the other nodes, gathers their reports and decides for all of them.
class rdzv_server final : public rendezvous {
 public:
  rdzv_server(const options& o, const std::string& token)
      : o_(o), coordinated_(restarts_across_nodes(o)),
        token_hex_(to_hex(reinterpret_cast<const unsigned char*>(token.data()), token.size())),
        where_(host_port_text(o.master_addr, *o.rdzv_port)), listener_(listen_for_nodes(o.master_addr, *o.rdzv_port)),
        joined_(static_cast<std::size_t>(o.nnodes), false), left_(static_cast<std::size_t>(o.nnodes), false),
        done_(static_cast<std::size_t>(o.nnodes)) {
    joined_[0] = true;
  }
  ~rdzv_server() override { ::close(listener_); }

  int join(int) override {
    if (!coordinated_) return 0;  // the nodes connect as they start; nothing waits for them
    say("restart rendezvous: serving on " + where_ + ", waiting for " +
        (o_.nnodes == 2 ? "node 1" : "nodes 1-" + std::to_string(o_.nnodes - 1)));
    deadline_ = steady_clock::now() + to_duration(o_.rdzv_timeout_s);
    return 0;
  }

  void add_fds(std::vector<pollfd>& fds) override {
    polled_ = peers_.size();
    fds.push_back({listener_, POLLIN, 0});
    for (const auto& p : peers_)
      fds.push_back({p->conn.fd(), static_cast<short>(POLLIN | (p->conn.wants_out() ? POLLOUT : 0)), 0});
  }

  void on_poll(const pollfd* fds) override {
    for (std::size_t i = 0; i < polled_ && i < peers_.size(); ++i) {
      peer& p = *peers_[i];
      const short ev = fds[1 + i].revents;
      if ((ev & POLLOUT) && !p.closed) p.conn.flush();
      if ((ev & (POLLIN | POLLHUP | POLLERR)) && !p.closed) read_from(p);
    }
    if (fds[0].revents & POLLIN) accept_nodes();
    std::erase_if(peers_, [](const std::unique_ptr<peer>& p) { return p->closed; });
    polled_ = 0;
    if (collecting_ && all_answered()) end_collection();  // the last answer, or a node gone
  }

  std::optional<steady_clock::time_point> deadline() const override {
    std::optional<steady_clock::time_point> next = deadline_;
    auto sooner = [&next](steady_clock::time_point t) {
      if (!next || t < *next) next = t;
    };
    for (const auto& p : peers_)
      if (p->node < 0 && !p->query && !p->closed) sooner(p->accepted + rdzv_hello_within);
    if (collecting_) sooner(collecting_->until);
    return next;
  }

  void on_time() override {
    const auto now = steady_clock::now();
    for (auto& p : peers_)
      if (p->node < 0 && !p->query && !p->closed && now >= p->accepted + rdzv_hello_within) {
        log_refusal(*p, "it sent no hello within " + std::to_string(rdzv_hello_within.count()) + " s");
        p->closed = true;
      }
    std::erase_if(peers_, [](const std::unique_ptr<peer>& p) { return p->closed; });
    if (deadline_ && now >= *deadline_) abort(lateness());
    if (collecting_ && (now >= collecting_->until || all_answered())) end_collection();
  }

  void report_failure(const failure_report& r) override { note_failure(r.attempt, r); }
  void report_done(long long attempt, int code, const std::vector<failure_report>& seen) override {
    note_done(0, attempt, code, node_pick(seen), seen);
  }
  void leave(const std::string& why) override {
    abort("node 0's tuttirun left: " + why);
    finish();
  }
  void finish() override {
    const auto until = steady_clock::now() + std::chrono::seconds(2);
    for (auto& p : peers_) p->conn.drain(until);
  }

  bool want_report(const std::string& why, bool failure, long long attempt) override {
    request(nullptr, why, failure, attempt);
    return true;
  }
  bool busy() const override { return collecting_.has_value(); }

 private:
  struct peer {
    peer(int fd, std::string from) : conn(fd, std::move(from)), accepted(steady_clock::now()) {}
    line_conn conn;
    long long node = -1;  // -1 until its hello is accepted
    bool query = false;   // `tuttirun --dump`: it waits for the report, then its connection ends
    bool wants_report = false;  // it asked for the report being gathered
    steady_clock::time_point accepted;
    bool closed = false;
  };

  // A report being gathered: node 0's records, then the nodes' as they come.
  struct collection {
    long long id = 0;
    std::string why;
    bool failure = false;
    bool print_here = false;  // a node asked (not only `tuttirun --dump`): node 0 prints it too
    long long attempt = 0;
    std::vector<flight_process> procs;
    std::vector<bool> answered;  // per node
    steady_clock::time_point until;
  };

  // `from` (a node's connection or a query; null: node 0 itself) wants the job's report.
  void request(peer* from, const std::string& why, bool failure, long long attempt) {
    if (failure && attempt == failure_reported_) {  // this attempt's report is made: the same text
      if (from) send_report(*from, failure_report_id_, failure_report_text_);
      return;
    }
    if (from) from->wants_report = true;
    bool print_here = !from || !from->query;
    if (collecting_ && (collecting_->failure || !failure)) {  // one report serves both
      collecting_->print_here = collecting_->print_here || print_here;
      return;
    }
    // A failure while a report for SIGUSR1 or --dump is being gathered: that one starts again as
    // the failure's, with records taken now (those who asked for it get this one).
    if (collecting_) print_here = print_here || collecting_->print_here;
    collection c;
    c.print_here = print_here;
    c.id = next_collection_++;
    c.why = why, c.failure = failure, c.attempt = attempt;
    c.answered.assign(static_cast<std::size_t>(o_.nnodes), false);
    c.answered[0] = true;
    c.until = steady_clock::now() + report_wait;
    broadcast(rdzv_msg::collect{c.id});  // first: a failure that stops the nodes' ranks comes after
    if (local_records) c.procs = local_records();
    collecting_ = std::move(c);
    if (all_answered()) end_collection();
  }

  // Every node answered, or left (its tuttirun ended); one yet to join may still (it started
  // later, or is retrying) and is waited for until the collection's end.
  bool all_answered() const {
    for (long long n = 1; n < o_.nnodes; ++n)
      if (!collecting_->answered[static_cast<std::size_t>(n)] && !left_[static_cast<std::size_t>(n)]) return false;
    return true;
  }

  void send_report(peer& p, long long id, const std::string& text) {
    p.conn.send(encode(rdzv_msg::report{id, text}));
    if (p.query) {  // its only question
      p.conn.drain(steady_clock::now() + std::chrono::seconds(1));
      p.closed = true;
    }
  }

  // Every node answered or the wait is over: one report, printed here and sent to who asked.
  void end_collection() {
    collection c = std::move(*collecting_);
    collecting_.reset();
    std::vector<long long> silent, gone;
    for (long long n = 1; n < o_.nnodes; ++n)
      if (!c.answered[static_cast<std::size_t>(n)]) (left_[static_cast<std::size_t>(n)] ? gone : silent).push_back(n);
    std::sort(c.procs.begin(), c.procs.end(), [](const flight_process& a, const flight_process& b) {
      return a.job_rank != b.job_rank ? a.job_rank < b.job_rank : a.pid < b.pid;
    });
    std::string title = job_report_title(c.why);
    if (!silent.empty())
      title += " (" + node_list(silent) + " did not answer within " + std::to_string(report_wait.count()) +
               " s: not connected to this tuttirun, or busy; missing below)";
    if (!gone.empty()) title += " (" + node_list(gone) + ": its tuttirun has ended; missing below)";
    const std::string text = titled_report(title, c.procs, tutti::detail::realtime_ns());
    if (c.print_here) say_lines(text);
    for (auto& p : peers_)
      if (p->wants_report && !p->closed) {
        p->wants_report = false;
        send_report(*p, c.id, text);
      }
    if (c.failure) failure_reported_ = c.attempt, failure_report_id_ = c.id, failure_report_text_ = text;
  }

  void accept_nodes() {
    while (true) {
      sockaddr_storage from{};
      socklen_t len = sizeof from;
      const int fd = ::accept4(listener_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      const auto strangers = std::count_if(peers_.begin(), peers_.end(), [](const auto& p) { return p->node < 0; });
      if (decided_ || static_cast<std::size_t>(strangers) >= max_rdzv_strangers) {
        ::close(fd);
        continue;
      }
      tune_rdzv_socket(fd);
      peers_.push_back(std::make_unique<peer>(fd, address_text(from)));
    }
  }

  void read_from(peer& p) {
    std::vector<std::string> lines;
    std::string why;
    const bool open = p.conn.receive(lines, why);
    for (const std::string& line : lines) {
      if (p.closed) break;
      handle(p, line);
    }
    if (!open && !p.closed) lost(p, why);
  }

  void handle(peer& p, const std::string& line) {
    const std::optional<rdzv_message> m = decode(line);
    if (p.query) return;  // it asked its question
    if (p.node < 0) {
      if (const auto* q = message_as<rdzv_msg::query>(m)) return query(p, *q);
      return hello(p, message_as<rdzv_msg::hello>(m));
    }
    if (const auto* r = message_as<rdzv_msg::records>(m)) {
      if (collecting_ && collecting_->id == r->id) collecting_->procs.push_back(r->process);
      return;
    }
    if (const auto* c = message_as<rdzv_msg::collected>(m)) {
      if (!collecting_ || collecting_->id != c->id) return;
      collecting_->answered[static_cast<std::size_t>(p.node)] = true;
      if (all_answered()) end_collection();  // now: a `done` read after it may end the job
      return;
    }
    if (const auto* d = message_as<rdzv_msg::dump>(m)) return request(&p, d->why, d->failure, d->attempt);
    if (!coordinated_) {  // the report is all this rendezvous carries: nothing else ends the job
      say("rendezvous: node " + std::to_string(p.node) + "'s tuttirun sent a line this one does not understand ('" +
          one_field(line.substr(0, 60)) + "'): do all nodes run the same tuttirun? No job report from it");
      p.closed = true;
      return;
    }
    if (const auto* f = message_as<rdzv_msg::failed>(m)) return note_failure(f->attempt, f->report);
    if (const auto* d = message_as<rdzv_msg::done>(m))
      return note_done(p.node, d->attempt, d->code, d->first, d->first ? std::vector{*d->first} : std::vector<failure_report>{});
    if (const auto* l = message_as<rdzv_msg::leave>(m)) {
      p.closed = true;
      // A node leaves on a signal to its tuttirun. After a failure of this attempt (a second
      // signal to a node whose first one is that failure: GNU timeout forwards one to the process
      // and one to its group), the job ends as that failure says, without a restart the leaver
      // could not join; before one, nothing says how the job went: an abort.
      if (started_ && first_ && !decided_) {
        say("node " + std::to_string(p.node) + "'s tuttirun left (" + l->why + "): the job ends after attempt " +
            std::to_string(attempt_) + "'s failure, without a restart");
        no_restart_ = true;
        return decide();
      }
      return abort("node " + std::to_string(p.node) + "'s tuttirun left: " + l->why);
    }
    abort("node " + std::to_string(p.node) + "'s tuttirun sent a line this one does not understand ('" +
          one_field(line.substr(0, 60)) + "'): do all nodes run the same tuttirun?");
  }

  // `tuttirun --dump` on some node: with the job's token, it gets the report.
  void query(peer& p, const rdzv_msg::query& q) {
    if (!same_token(q.token_hex, token_hex_)) {
      log_refusal(p, "a report query with the wrong job token");
      p.conn.send(encode(rdzv_msg::refused{"wrong job token"}));
      p.conn.drain(steady_clock::now() + std::chrono::seconds(1));
      p.closed = true;
      return;
    }
    p.query = true;
    request(&p, q.why, false, attempt_);
  }

  // A new connection's first line: `h`, or null when it was not a hello of this protocol.
  void hello(peer& p, const rdzv_msg::hello* h) {
    std::string refusal;
    if (!h) {
      log_refusal(p, "it does not speak " + std::string(rdzv_protocol) + " (another program, or another tuttirun version)");
      p.closed = true;  // a stranger gets no answer
      return;
    }
    if (!same_token(h->token_hex, token_hex_)) {
      refusal = "wrong job token: its TUTTI_JOB_TOKEN differs from node 0's";
    } else if (h->nnodes != o_.nnodes) {
      refusal = "it has --nnodes=" + std::to_string(h->nnodes) + ", node 0 has --nnodes=" + std::to_string(o_.nnodes);
    } else if (h->node < 1 || h->node >= o_.nnodes) {
      refusal = "it has --node-rank=" + std::to_string(h->node) + " (another node 0?)";
    } else if (joined_[static_cast<std::size_t>(h->node)]) {
      refusal = "node " + std::to_string(h->node) + " has joined already (two tuttiruns with --node-rank=" +
                std::to_string(h->node) + "?)";
    } else if (h->max_restarts != o_.max_restarts) {
      refusal = "it has --max-restarts=" + std::to_string(h->max_restarts) + ", node 0 has --max-restarts=" +
                std::to_string(o_.max_restarts);
    }
    if (!refusal.empty()) {
      log_refusal(p, refusal);
      p.conn.send(encode(rdzv_msg::refused{refusal}));
      p.conn.drain(steady_clock::now() + std::chrono::seconds(1));
      p.closed = true;
      return;
    }
    p.node = h->node;
    joined_[static_cast<std::size_t>(h->node)] = true;
    left_[static_cast<std::size_t>(h->node)] = false;
    p.conn.send(encode(rdzv_msg::welcome{}));
    if (collecting_) p.conn.send(encode(rdzv_msg::collect{collecting_->id}));  // it joined late
    if (coordinated_ && std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) start(0, std::nullopt);
  }

  void log_refusal(const peer& p, const std::string& why) {
    if (refusals_ > 100) return;
    say(++refusals_ > 100 ? "rendezvous: more refused connections, no longer logged"
                          : "rendezvous: refused a connection from " + p.conn.peer() + ": " + why);
  }

  void broadcast(const rdzv_message& m) {
    const std::string line = encode(m);
    for (auto& p : peers_)
      if (p->node >= 0 && !p->closed) p->conn.send(line);
  }

  void start(long long attempt, std::optional<failure_report> after) {  // a copy: first_ is reset
    started_ = true;
    attempt_ = attempt;
    first_.reset();
    no_restart_ = false;
    std::fill(done_.begin(), done_.end(), std::nullopt);
    seen_.clear();
    deadline_.reset();
    broadcast(rdzv_msg::start{attempt, after});
    events.push_back({rdzv_event::kind::start, attempt, 0, after, {}});
  }

  void note_failure(long long attempt, const failure_report& r) {
    if (decided_ || !started_ || attempt != attempt_) return;
    no_restart_ = no_restart_ || r.no_restart;
    if (first_) return;
    first_ = r;
    broadcast(rdzv_msg::failed{attempt, r});
    events.push_back({rdzv_event::kind::failed, attempt, 0, r, {}});
    // Every node's ranks are stopped within the failure grace and the grace (and the wait for
    // their output); the rendezvous timeout comes on top.
    deadline_ = steady_clock::now() + to_duration(o_.failure_grace_s + o_.grace_s + o_.rdzv_timeout_s) + drain_after_exit;
  }

  // `first`: the failure its ranks followed, as the node judged it; `seen`: what node 0 picks the
  // cause from (that one from another node; every rank's exit from node 0, which judges here).
  void note_done(long long node, long long attempt, int code, const std::optional<failure_report>& first,
                 const std::vector<failure_report>& seen) {
    auto& done = done_[static_cast<std::size_t>(node)];
    if (decided_ || !started_ || attempt != attempt_ || done) return;
    done = code;
    seen_.insert(seen_.end(), seen.begin(), seen.end());
    if (code != 0) {
      failure_report r;
      r.attempt = attempt, r.node = node, r.exit_code = code, r.unix_ms = unix_ms_now();
      r.what = "the ranks of node " + std::to_string(node) + " failed (status " + std::to_string(code) + ")";
      if (!first) seen_.push_back(r);
      note_failure(attempt, first ? *first : r);
    }
    // Reported as it happened, a rank's failure came before its last words on stderr.
    if (first_ && first && first->node == first_->node && first->rank == first_->rank && first->rank >= 0)
      first_->last_line = first->last_line;
    if (std::all_of(done_.begin(), done_.end(), [](const std::optional<int>& d) { return d.has_value(); })) decide();
  }

  // Every node is done: the cause is picked from what they saw (not the first failure reported,
  // often a victim of the cause), and every node exits with its status.
  void decide() {
    std::optional<failure_report> cause = first_ ? pick_cause(seen_) : std::nullopt;
    if (first_ && !cause) cause = first_;
    if (cause && !no_restart_ && attempt_ < o_.max_restarts) return start(attempt_ + 1, cause);
    decided_ = true;
    deadline_.reset();
    const int code = cause ? job_status(*cause, seen_) : 0;
    broadcast(rdzv_msg::end{attempt_, code, cause});
    events.push_back({rdzv_event::kind::end, attempt_, code, cause, {}});
  }

  void abort(const std::string& why) {
    if (decided_) return;
    decided_ = true;
    deadline_.reset();
    broadcast(rdzv_msg::abort{why});
    events.push_back({rdzv_event::kind::abort, attempt_, exit_launcher_error, std::nullopt, why});
  }

  void lost(peer& p, const std::string& why) {
    p.closed = true;
    if (p.node < 0) return;  // a stranger, a query, or a node that was refused
    if (!coordinated_) {     // its ranks end on their own; it is no longer asked for records
      joined_[static_cast<std::size_t>(p.node)] = false;
      left_[static_cast<std::size_t>(p.node)] = true;
      return;
    }
    abort("node " + std::to_string(p.node) + "'s tuttirun went away " +
          (started_ ? "during attempt " + std::to_string(attempt_) : std::string("before the job started")) + " (" +
          why + "): the job ends on every node");
  }

  // Why the deadline passed: who has not joined, or not finished the failed attempt.
  std::string lateness() const {
    std::vector<long long> missing;
    if (!started_) {
      for (long long n = 0; n < o_.nnodes; ++n)
        if (!joined_[static_cast<std::size_t>(n)]) missing.push_back(n);
      return node_list(missing) + " did not join the restart rendezvous on " + where_ + " within " +
             seconds_text(o_.rdzv_timeout_s) + " s (--rdzv-timeout): not started, or started with another "
             "--master-addr, --master-port, --rdzv-port or TUTTI_JOB_TOKEN?";
    }
    for (long long n = 0; n < o_.nnodes; ++n)
      if (!done_[static_cast<std::size_t>(n)]) missing.push_back(n);
    return node_list(missing) + " did not finish attempt " + std::to_string(attempt_) + " within " +
           seconds_text(o_.failure_grace_s + o_.grace_s + o_.rdzv_timeout_s + 1) + " s of its first failure (" +
           (first_ ? cause_text(*first_, true) : "") + "; --failure-grace + --grace + --rdzv-timeout): the job ends "
           "on every node";
  }

  const options o_;
  const bool coordinated_;  // restarts across nodes (else: reports only)
  std::string token_hex_, where_;
  int listener_;
  std::vector<std::unique_ptr<peer>> peers_;
  std::size_t polled_ = 0;  // the peers add_fds() handed to poll()
  std::vector<bool> joined_;
  std::vector<bool> left_;  // reports only: its tuttirun was connected, and went away
  std::vector<std::optional<int>> done_;  // each node's status for the current attempt
  long long attempt_ = 0;
  bool started_ = false, decided_ = false, no_restart_ = false;
  std::optional<failure_report> first_;  // the current attempt's first failure
  std::vector<failure_report> seen_;     // the nodes' judgements of their ranks' exits (note_done)
  std::optional<steady_clock::time_point> deadline_;
  int refusals_ = 0;
  std::optional<collection> collecting_;
  long long next_collection_ = 1;
  long long failure_reported_ = -1;  // the attempt whose failure has had its report
  long long failure_report_id_ = 0;
  std::string failure_report_text_;
};

// Another node's side: one connection to node 0's tuttirun, which decides.
class rdzv_client final : public rendezvous {
 public:
  rdzv_client(const options& o, const std::string& token)
      : o_(o), coordinated_(restarts_across_nodes(o)),
        token_hex_(to_hex(reinterpret_cast<const unsigned char*>(token.data()), token.size())),
        where_(host_port_text(o.master_addr, *o.rdzv_port)) {}
  ~rdzv_client() override {
    if (connecting_ >= 0) ::close(connecting_);
  }

  int join(int sigfd) override {
    if (!coordinated_) {  // reports only: connect when node 0's tuttirun listens, retrying meanwhile
      try_connect();
      return 0;
    }
    say("restart rendezvous: joining node 0's tuttirun at " + where_);
    int sig = 0;
    const int fd = connect_to_node0(o_, steady_clock::now() + to_duration(o_.rdzv_timeout_s), sigfd, sig);
    if (fd < 0) return sig;
    conn_ = std::make_unique<line_conn>(fd, where_);
    conn_->send(encode(rdzv_msg::hello{token_hex_, o_.nnodes, o_.node_rank, o_.max_restarts}));
    // Node 0 gives up on the nodes missing after --rdzv-timeout of its own; this one, a little later.
    wait_for(to_duration(o_.rdzv_timeout_s) + rdzv_margin, "for every node to join");
    return 0;
  }

  void add_fds(std::vector<pollfd>& fds) override {
    polled_ = conn_ != nullptr || connecting_ >= 0;
    if (conn_) fds.push_back({conn_->fd(), static_cast<short>(POLLIN | (conn_->wants_out() ? POLLOUT : 0)), 0});
    else if (connecting_ >= 0) fds.push_back({connecting_, POLLOUT, 0});
  }

  void on_poll(const pollfd* fds) override {
    if (!polled_) return;
    polled_ = false;
    if (connecting_ >= 0) {
      if (fds[0].revents) connected();
      return;
    }
    if (!conn_) return;
    if (fds[0].revents & POLLOUT) conn_->flush();
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) return;
    std::vector<std::string> lines;
    std::string why;
    const bool open = conn_->receive(lines, why);
    for (const std::string& line : lines)
      if (conn_) handle(line);
    if (!coordinated_) {  // node 0's tuttirun ended (or refused this node): no more job reports
      if (!open) conn_.reset(), gone_ = true;
      return;
    }
    if (!open && !decided_)
      give_up(welcomed_ ? "lost node 0's tuttirun (the restart rendezvous at " + where_ + ": " + why +
                              "): it exited or was killed, or its host is gone"
                        : "the restart rendezvous at " + where_ + " closed the connection before it welcomed this "
                          "node: is --rdzv-port node 0's tuttirun's (and not, say, rank 0's store)?");
  }

  std::optional<steady_clock::time_point> deadline() const override {
    std::optional<steady_clock::time_point> next = deadline_;
    for (const auto& t : {retry_at_, report_until_, connecting_ >= 0 ? std::optional(connect_until_) : std::nullopt})
      if (t && (!next || *t < *next)) next = t;
    return next;
  }

  void on_time() override {
    const auto now = steady_clock::now();
    if (connecting_ >= 0 && now >= connect_until_) retry_later();  // no answer: try again later
    if (retry_at_ && now >= *retry_at_) try_connect();
    if (report_until_ && now >= *report_until_) {
      report_until_.reset();
      say_lines(titled_report("hang report (" + report_why_ + "): node 0's tuttirun sent no job report within " +
                                  std::to_string((report_wait + report_margin).count()) + " s; what each rank of node " +
                                  std::to_string(o_.node_rank) + " was doing",
                              pending_          ? *pending_
                              : local_records ? local_records()
                                              : std::vector<flight_process>{},
                              tutti::detail::realtime_ns()));
      pending_.reset();
    }
    if (deadline_ && now >= *deadline_)
      give_up("no word from node 0's tuttirun at " + where_ + " while waiting " + waiting_for_ + ": giving up");
  }

  void report_failure(const failure_report& r) override {
    conn_->send(encode(rdzv_msg::failed{r.attempt, r}));
  }

  void report_done(long long attempt, int code, const std::vector<failure_report>& seen) override {
    conn_->send(encode(rdzv_msg::done{attempt, code, node_pick(seen)}));
    if (code != 0 || failed_attempt_ == attempt) wait_after_failure();
  }

  void leave(const std::string& why) override {
    if (!conn_) return;
    conn_->send(encode(rdzv_msg::leave{why}));
    finish();
  }

  void finish() override {
    if (conn_) conn_->drain(steady_clock::now() + std::chrono::seconds(1));
  }

  bool want_report(const std::string& why, bool failure, long long attempt) override {
    if (!conn_ || !welcomed_) return false;
    // Taken now, before this node acts on the failure: node 0's collect gets these.
    if (local_records) pending_ = local_records();
    report_why_ = why;
    report_until_ = steady_clock::now() + report_wait + report_margin;
    conn_->send(encode(rdzv_msg::dump{attempt, failure, why}));
    return true;
  }
  bool busy() const override { return report_until_.has_value(); }

 private:
  // Reports only: node 0's tuttirun is reached without blocking the launcher's loop: its address
  // resolved once, a non-blocking connect finished in on_poll (or given up after a second), the
  // next try in 20 ms, doubling up to 1 s, for as long as the job runs.
  void try_connect() {
    retry_at_.reset();
    if (gone_ || conn_ || connecting_ >= 0) return;
    if (!address_) {
      addrinfo hints{};
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      if (::getaddrinfo(o_.master_addr.c_str(), std::to_string(*o_.rdzv_port).c_str(), &hints, &res) != 0 || !res) {
        retry_pause_ = std::chrono::milliseconds(5000);  // a name that does not resolve: rarely again
        retry_at_ = steady_clock::now() + retry_pause_;
        return;
      }
      address_.emplace();
      std::memcpy(&address_->first, res->ai_addr, res->ai_addrlen);
      address_->second = res->ai_addrlen;
      ::freeaddrinfo(res);
    }
    const int fd = ::socket(address_->first.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return retry_later();
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address_->first), address_->second) != 0 &&
        errno != EINPROGRESS) {
      ::close(fd);
      return retry_later();
    }
    connecting_ = fd;
    connect_until_ = steady_clock::now() + std::chrono::seconds(1);
  }

  // The connect in progress finished: the connection, or a later try.
  void connected() {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(connecting_, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return retry_later();
    const int fd = connecting_;
    connecting_ = -1;
    tune_rdzv_socket(fd);
    conn_ = std::make_unique<line_conn>(fd, where_);
    conn_->send(encode(rdzv_msg::hello{token_hex_, o_.nnodes, o_.node_rank, o_.max_restarts}));
  }

  void retry_later() {
    if (connecting_ >= 0) ::close(connecting_);
    connecting_ = -1;
    retry_pause_ = std::min(retry_pause_ * 2, std::chrono::milliseconds(1000));
    retry_at_ = steady_clock::now() + retry_pause_;
  }

  // Node 0 asks what this node's ranks are doing: as taken when this node asked for the report,
  // else now.
  void answer(long long id) {
    std::vector<flight_process> procs =
        pending_ ? std::move(*pending_) : local_records ? local_records() : std::vector<flight_process>{};
    pending_.reset();
    for (flight_process& p : procs) conn_->send(encode(rdzv_msg::records{id, std::move(p)}));
    conn_->send(encode(rdzv_msg::collected{id, static_cast<long long>(procs.size())}));
  }

  void handle(const std::string& line) {
    const std::optional<rdzv_message> m = decode(line);
    if (message_as<rdzv_msg::welcome>(m)) {
      welcomed_ = true;
      return;
    }
    if (const auto* r = welcomed_ ? message_as<rdzv_msg::report>(m) : nullptr) {
      if (report_until_) say_lines(r->text);
      report_until_.reset();
      pending_.reset();  // taken for this report; a later one takes its own
      return;
    }
    if (decided_) return;  // the job is over: only the report asked for still counts
    if (const auto* c = welcomed_ ? message_as<rdzv_msg::collect>(m) : nullptr) return answer(c->id);
    if (!coordinated_) {  // a refusal, or a line of another tuttirun: no job reports, the job goes on
      const auto* r = message_as<rdzv_msg::refused>(m);
      say("rendezvous: " + (r ? "node 0's tuttirun at " + where_ + " refused this node: " + r->why
                              : "node 0's tuttirun sent a line this one does not understand ('" +
                                    one_field(line.substr(0, 60)) + "'): do all nodes run the same tuttirun?") +
          "; no job report from this node");
      conn_.reset();
      gone_ = true;
      return;
    }
    if (const auto* r = message_as<rdzv_msg::refused>(m))
      return give_up("node 0's tuttirun at " + where_ + " refused this node: " + r->why);
    if (const auto* a = message_as<rdzv_msg::abort>(m)) {
      decided_ = true;
      events.push_back({rdzv_event::kind::abort, 0, exit_launcher_error, std::nullopt, a->why});
      return;
    }
    if (const auto* s = welcomed_ ? message_as<rdzv_msg::start>(m) : nullptr) {
      deadline_.reset();
      events.push_back({rdzv_event::kind::start, s->attempt, 0, s->after, {}});
      return;
    }
    if (const auto* f = welcomed_ ? message_as<rdzv_msg::failed>(m) : nullptr) {
      failed_attempt_ = f->attempt;
      events.push_back({rdzv_event::kind::failed, f->attempt, 0, f->report, {}});
      return;
    }
    if (const auto* e = welcomed_ ? message_as<rdzv_msg::end>(m) : nullptr) {
      decided_ = true;
      deadline_.reset();
      events.push_back({rdzv_event::kind::end, e->attempt, e->code, e->root_cause, {}});
      return;
    }
    give_up("node 0's tuttirun sent a line this one does not understand ('" + one_field(line.substr(0, 60)) +
            "'): do all nodes run the same tuttirun?");
  }

  // Once an attempt failed, every node is done with it soon: node 0 waits for them until its
  // deadline; this node waits for node 0 a little longer.
  void wait_after_failure() {
    wait_for(to_duration(o_.failure_grace_s + o_.grace_s + o_.rdzv_timeout_s) + drain_after_exit + rdzv_margin,
             "for the next attempt");
  }

  void wait_for(steady_clock::duration d, std::string what) {
    deadline_ = steady_clock::now() + d;
    waiting_for_ = std::move(what);
  }

  void give_up(const std::string& why) {
    decided_ = true;
    deadline_.reset();
    events.push_back({rdzv_event::kind::abort, 0, exit_launcher_error, std::nullopt, why});
  }

  const options o_;
  const bool coordinated_;  // restarts across nodes (else: reports only)
  std::string token_hex_, where_;
  std::unique_ptr<line_conn> conn_;
  bool welcomed_ = false, decided_ = false;
  bool polled_ = false;  // add_fds() handed the connection to poll()
  bool gone_ = false;    // reports only: node 0's tuttirun ended, or refused this node
  std::optional<steady_clock::time_point> retry_at_;  // reports only: the next try to connect
  std::chrono::milliseconds retry_pause_{10};
  std::optional<std::pair<sockaddr_storage, socklen_t>> address_;  // node 0's, resolved once
  int connecting_ = -1;                                              // a connect in progress
  steady_clock::time_point connect_until_;
  std::optional<std::vector<flight_process>> pending_;  // this node's records, taken when it asked
  std::optional<steady_clock::time_point> report_until_;  // it asked: the report is due by then
  std::string report_why_;
  long long failed_attempt_ = -1;  // the last attempt node 0 said failed
  std::optional<steady_clock::time_point> deadline_;
  std::string waiting_for_;
};

// With --nnodes > 1 (and a port for it). Without --max-restarts a port node 0 cannot listen on
// costs the job report only: the job runs, and each node prints its own.
inline std::unique_ptr<rendezvous> make_rendezvous(const options& o, const job_identity& job) {
  if (o.nnodes < 2 || !o.rdzv_port) return nullptr;
  if (o.node_rank != 0) return std::make_unique<rdzv_client>(o, job.token);
  try {
    return std::make_unique<rdzv_server>(o, job.token);
  } catch (const launcher_error& e) {
    if (restarts_across_nodes(o)) throw;
    say(std::string(e.what()) + "; hang reports will cover each node alone");
    return nullptr;
  }
}

}  // namespace tuttirun
