/// \file
/// Definitions for tutti/transport/tcp/matching.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "tutti/core/error.hpp"
#include "tutti/transport/tcp/matching.hpp"
#include "tutti/transport/tcp/sockets.hpp"
#include "tutti/transport/toolkit/errors.hpp"
#include "tutti/transport/toolkit/p2p.hpp"

namespace tutti::detail::tcp_impl {

namespace p2p_wire = toolkit::p2p_wire;

/// A posted send or receive; its request's state is a member (one allocation per operation).
struct p2p_op : std::enable_shared_from_this<p2p_op> {
  bool send = false;
  int peer = 0;  // group rank; a receive's may be any_source
  int tag = 0;   // a receive's may be any_tag
  dtype type;
  std::size_t count = 0, bytes = 0;
  std::byte* data = nullptr;
  std::uint64_t seq = 0;   // a rendezvous send's number; a receive's: the message's it took
  bool announced = false;  // a rendezvous send whose rts is out: its number is set
  bool blocked = false;    // its holder waits for it (`operation_state::awaited`, copied by its own poll)
  int from = -1;           // a receive that took a message whose bytes are still coming: its sender
  std::size_t moved = 0;   // rendezvous bytes handed to pieces (send) or arrived (receive)
  std::size_t expect = 0;  // a receive that took a rendezvous message: the message's bytes
  std::chrono::steady_clock::time_point posted = std::chrono::steady_clock::now();
  operation_state state;
  std::shared_ptr<connections> conn;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<const std::atomic<bool>> aborted;
  std::chrono::steady_clock::time_point deadline{}, look{};
  unsigned polls = 0;
};

/// A message that arrived before a receive took it.
struct p2p_arrived {
  int src = 0, tag = 0;
  dtype type;
  std::uint64_t count = 0, bytes = 0;
  bool rendezvous = false;
  std::uint64_t seq = 0;
  std::vector<std::byte> payload;  // eager: the message
};

/// A frame and its payload being written to a peer.
struct p2p_item {
  p2p_wire::frame f;
  const std::byte* payload = nullptr;
  std::size_t n = 0, done = 0;     // payload bytes; frame and payload bytes written
  std::shared_ptr<p2p_op> op;      // completed once all of it is written (an eager send, a last piece)
  std::vector<std::byte> owned;    // the payload, copied here when its send is given up mid-write
  std::size_t size() const { return sizeof f + n; }
};

/// What this rank reads from one peer: a staging buffer for frames and small payloads, and the
/// payload of the frame being read, which goes to `dst` (null: dropped).
struct p2p_inbound {
  static constexpr std::size_t staging_bytes = 4096;  // (larger reads copy payloads that could go straight to their buffers)
  std::vector<std::byte> buf;
  std::size_t lo = 0, hi = 0;
  bool in_payload = false;
  p2p_wire::frame f{};
  std::byte* dst = nullptr;
  std::size_t need = 0, got = 0;
  std::shared_ptr<p2p_op> target;  // the receive the payload completes (eager) or fills (data)
  std::optional<p2p_arrived> aside;  // an eager message no receive took yet
  std::string notice;                // a failure frame's text
  bool failure_text = false;         // the payload being read is that text
  std::string closed;                // why the stream ended (empty while it goes on)
};

/// One peer's side of the engine (indexed by group rank).
struct p2p_peer {
  std::deque<std::shared_ptr<p2p_op>> sends;      // posted, not yet started
  std::deque<std::shared_ptr<p2p_op>> streaming;  // cleared rendezvous sends, pieces to write
  std::deque<p2p_wire::frame> controls;           // cts, refuse, cancel, wait
  std::optional<p2p_item> out;                    // being written
  std::string broken;                             // why writing to it failed
  bool failed_here = false;                       // this rank failed (p2p_fail): its socket is not ours
  p2p_inbound in;
  std::uint64_t next_seq = 0;
  std::uint64_t sent = 0, read = 0;  // message frames (eager, rts) written to it, read from it
  p2p_wire::frame theirs{};          // the last `wait` it sent (count 0: none)
};

struct p2p_engine {
  explicit p2p_engine(toolkit::group_map group) : g(std::move(group)), peers(static_cast<std::size_t>(g.size())) {}
  const toolkit::group_map g;
  std::mutex mu;
  std::vector<p2p_peer> peers;
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<p2p_op>> announced;  // (peer, seq): rts written
  std::deque<std::shared_ptr<p2p_op>> receives;                                 // posted, not matched
  std::deque<p2p_arrived> arrived;                                              // arrived, not matched
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<p2p_op>> filling;     // (sender, seq): data coming
  /// The wait this rank told a peer of (`wait` frames): its operation and the frame sent.
  std::weak_ptr<p2p_op> published;
  int published_to = -1;
  std::string failed;  // why this rank failed (p2p_fail): what is pending fails with it
  p2p_wire::frame told{};
};

namespace p2p_steps {

struct p2p_ctx {
  connections& conn;
  p2p_engine& eng;
  const toolkit::group_map& g;
  p2p_peer& at(int peer) { return eng.peers[static_cast<std::size_t>(peer)]; }
  link& l(int peer) {
    return *conn.peers[static_cast<std::size_t>(g.world(peer))][static_cast<std::size_t>(conn.opt.streams)];
  }
};

inline header op_header(const p2p_op& e) { return toolkit::p2p_header(e.type, e.count, e.tag, e.bytes); }

inline std::string here(const toolkit::group_map& g, const p2p_op& e) {
  return toolkit::where(op_header(e), "p2p") + " on " + g.name(g.rank());
}

/// A frame from a peer that breaks the protocol: that peer's stream ends there (`read_from`), and
/// only what is pending with that peer fails.
struct corrupt_stream {
  const char* what;
};
[[noreturn]] inline void corrupt(const char* what) { throw corrupt_stream{what}; }

inline bool takes(const p2p_op& r, const p2p_arrived& m) {
  return (r.peer == any_source || r.peer == m.src) && (r.tag == any_tag || r.tag == m.tag);
}

inline std::size_t pending_count(const p2p_engine& eng) {
  std::size_t n = eng.receives.size() + eng.announced.size() + eng.filling.size();
  for (const auto& p : eng.peers) n += p.sends.size() + p.streaming.size() + (p.out && p.out->op ? 1 : 0);
  return n;
}

/// Frames this rank still owes a peer that no pending operation accounts for: answers, notices,
/// and the rest of a given-up send's frame.
inline bool owes(const p2p_engine& eng) {
  return std::any_of(eng.peers.begin(), eng.peers.end(), [](const p2p_peer& p) {
    return p.broken.empty() && !p.failed_here && (p.out || !p.controls.empty());
  });
}

inline p2p_wire::frame control(std::uint32_t kind, std::uint64_t seq, dtype type, std::uint64_t room) {
  p2p_wire::frame f;
  f.kind = kind;
  f.seq = seq;
  f.type_id = type.id;
  f.type_size = type.size;
  f.count = room;
  return f;
}

/// Send `s` is over (given up, or its receive was): the frame being written to its peer for it
/// (its eager message, a piece) goes on from a copy of its payload, so that the stream stays
/// whole and the caller may free its buffer, and completes nothing.
inline void detach(p2p_peer& p, const p2p_op& s) {
  if (!p.out) return;
  p2p_item& it = *p.out;
  if (it.op.get() != &s && !(s.announced && it.f.kind == p2p_wire::data && it.f.seq == s.seq)) return;
  it.op.reset();
  if (it.n && it.payload != it.owned.data()) {
    it.owned.assign(it.payload, it.payload + it.n);
    it.payload = it.owned.data();
  }
}

/// Receive `r` takes message `m`, whose header has just been read (or which was set aside):
/// a mismatch fails it (and, for a rendezvous, its send); an eager message set aside is copied
/// into its buffer; otherwise the bytes are to come (`r.from` set). True when they are.
inline bool take(p2p_ctx& c, p2p_op& r, const p2p_arrived& m, bool payload_here) {
  const std::string wrong = toolkit::p2p_mismatch(m.src, c.g.rank(), m.tag, m.type, m.count, r.type, r.count);
  if (!wrong.empty() || m.bytes > r.bytes) {
    if (m.rendezvous) c.at(m.src).controls.push_back(control(p2p_wire::refuse, m.seq, r.type, r.count));
    complete(r.state, std::make_exception_ptr(mismatch_error(
                          wrong.empty() ? here(c.g, r) + ": a message longer than the buffer" : wrong)));
    return false;
  }
  r.state.status = recv_status{m.src, m.tag, static_cast<std::size_t>(m.count)};
  if (payload_here) {
    if (m.bytes) std::memcpy(r.data, m.payload.data(), static_cast<std::size_t>(m.bytes));
    complete(r.state, nullptr);
    return false;
  }
  r.from = m.src;
  r.seq = m.seq;
  r.expect = static_cast<std::size_t>(m.bytes);
  if (m.rendezvous) c.at(m.src).controls.push_back(control(p2p_wire::cts, m.seq, r.type, r.count));
  return true;
}

/// The earliest posted receive that takes `m`, taken off the queue; null if none.
inline std::shared_ptr<p2p_op> posted_for(p2p_ctx& c, const p2p_arrived& m) {
  auto& q = c.eng.receives;
  const auto it = std::find_if(q.begin(), q.end(), [&](const auto& r) { return takes(*r, m); });
  if (it == q.end()) return nullptr;
  std::shared_ptr<p2p_op> r = *it;
  q.erase(it);
  return r;
}

inline p2p_arrived arrival(int peer, const p2p_wire::frame& f) {
  p2p_arrived m;
  m.src = peer;
  m.tag = f.tag;
  m.type = dtype{f.type_id, f.type_size};
  m.count = f.count;
  m.bytes = f.bytes;
  m.rendezvous = f.kind == p2p_wire::rts;
  m.seq = f.seq;
  return m;
}

/// The payload of the frame being read from `peer` has all arrived.
inline void payload_done(p2p_ctx& c, int peer) {
  p2p_inbound& in = c.at(peer).in;
  in.in_payload = false;
  // An eager message counts as read (`wait` frames) once a receive can take it: a count that
  // took it in at its header would tell the sender "all read" while a receive posted meanwhile
  // still waits for it.
  if (in.f.kind == p2p_wire::eager) ++c.at(peer).read;
  if (in.failure_text) {
    in.failure_text = false;
    return;
  }
  if (in.aside) {  // an eager message read aside: a receive posted meanwhile takes it now
    p2p_arrived m = std::move(*in.aside);
    in.aside.reset();
    if (const auto r = posted_for(c, m)) take(c, *r, m, true);
    else c.eng.arrived.push_back(std::move(m));
    return;
  }
  const std::shared_ptr<p2p_op> r = std::move(in.target);
  if (!r) return;  // dropped
  if (in.f.kind == p2p_wire::eager) {
    complete(r->state, nullptr);
    return;
  }
  r->moved += in.need;
  if (r->moved >= r->expect) {
    c.eng.filling.erase({peer, r->seq});
    complete(r->state, nullptr);
  }
}

/// Acts on a frame read from `peer`; sets up the reading of its payload.
inline void on_frame(p2p_ctx& c, int peer, const p2p_wire::frame& f) {
  p2p_peer& p = c.at(peer);
  p2p_inbound& in = p.in;
  if (f.magic != p2p_wire::magic) corrupt("a frame of another kind");
  in.f = f;
  in.dst = nullptr;
  in.need = f.payload();
  in.got = 0;
  in.target.reset();
  switch (f.kind) {
    case p2p_wire::eager: {
      if (f.bytes > p2p_eager_bytes) corrupt("an eager message too long");
      p2p_arrived m = arrival(peer, f);
      if (const auto r = posted_for(c, m)) {
        if (take(c, *r, m, false)) {
          in.target = r;
          in.dst = r->data;
        }
      } else {
        m.payload.resize(static_cast<std::size_t>(f.bytes));
        in.dst = m.payload.data();
        in.aside = std::move(m);
      }
      break;
    }
    case p2p_wire::rts: {
      ++p.read;
      p2p_arrived m = arrival(peer, f);
      if (const auto r = posted_for(c, m)) {
        if (take(c, *r, m, false)) c.eng.filling[{peer, m.seq}] = r;
      } else {
        c.eng.arrived.push_back(std::move(m));
      }
      break;
    }
    case p2p_wire::cts:
    case p2p_wire::refuse: {
      const auto it = c.eng.announced.find({peer, f.seq});
      if (it == c.eng.announced.end()) break;  // a send given up meanwhile
      const std::shared_ptr<p2p_op> s = it->second;
      c.eng.announced.erase(it);
      if (f.kind == p2p_wire::cts) {
        p.streaming.push_back(s);
      } else {
        complete(s->state, std::make_exception_ptr(mismatch_error(toolkit::p2p_mismatch(
                               c.g.rank(), peer, s->tag, s->type, s->count, dtype{f.type_id, f.type_size},
                               static_cast<std::size_t>(f.count)))));
      }
      break;
    }
    case p2p_wire::cancel: {
      std::erase_if(c.eng.arrived, [&](const p2p_arrived& m) { return m.rendezvous && m.src == peer && m.seq == f.seq; });
      const auto it = c.eng.filling.find({peer, f.seq});
      if (it == c.eng.filling.end()) break;
      complete(it->second->state,
               std::make_exception_ptr(error(errc::aborted, here(c.g, *it->second) + ": " + c.g.name(peer) +
                                                                " gave its send up (its deadline or abort) before all "
                                                                "of it came")));
      c.eng.filling.erase(it);
      break;
    }
    case p2p_wire::withdrawn: {  // its receiver gave up a message it had cleared (deadline, abort)
      const auto it = std::find_if(p.streaming.begin(), p.streaming.end(), [&](const auto& s) { return s->seq == f.seq; });
      if (it == p.streaming.end()) break;  // all of it written meanwhile
      const std::shared_ptr<p2p_op> s = *it;
      p.streaming.erase(it);
      detach(p, *s);
      complete(s->state, std::make_exception_ptr(error(errc::aborted, here(c.g, *s) + ": " + c.g.name(peer) +
                                                                          " gave its receive up (its deadline or "
                                                                          "abort) before all of it came")));
      break;
    }
    case p2p_wire::data: {
      if (f.bytes > p2p_piece_bytes) corrupt("a piece too long");
      const auto it = c.eng.filling.find({peer, f.seq});
      if (it == c.eng.filling.end()) break;  // a receive given up meanwhile: dropped
      p2p_op& r = *it->second;
      if (f.offset > r.expect || f.bytes > r.expect - f.offset) corrupt("a piece beyond its message");
      in.target = it->second;
      in.dst = r.data + f.offset;
      break;
    }
    case p2p_wire::wait: p.theirs = f; break;
    case p2p_wire::failure: {
      if (f.bytes > toolkit::max_notice_text) corrupt("a notice too long");
      in.notice.assign(static_cast<std::size_t>(f.bytes), '\0');
      in.dst = reinterpret_cast<std::byte*>(in.notice.data());
      in.failure_text = true;
      break;
    }
    default: corrupt("a frame of no known kind");
  }
  in.in_payload = true;
  if (in.need == 0) payload_done(c, peer);
}

/// Reads what `peer` has sent, frame by frame. True if bytes moved.
inline bool read_from(p2p_ctx& c, int peer) {
  p2p_inbound& in = c.at(peer).in;
  if (!in.closed.empty() || c.at(peer).failed_here) return false;
  if (in.buf.empty()) in.buf.resize(p2p_inbound::staging_bytes);
  const int fd = c.l(peer).fd();
  bool moved = false;
  const auto fill = [&](std::byte* to, std::size_t room) -> std::size_t {  // 0: nothing now (or closed)
    for (;;) {
      const ssize_t k = ::recv(fd, to, room, MSG_DONTWAIT);
      if (k > 0) return static_cast<std::size_t>(k);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
      in.closed = k == 0 ? "closed its connection" : "broke its connection (" + std::string(std::strerror(errno)) + ")";
      return 0;
    }
  };
  for (;;) {
    if (in.in_payload) {
      if (in.hi > in.lo) {
        const std::size_t k = std::min(in.hi - in.lo, in.need - in.got);
        if (in.dst) std::memcpy(in.dst + in.got, in.buf.data() + in.lo, k);
        in.lo += k;
        in.got += k;
      }
      if (in.got == in.need) {
        payload_done(c, peer);
        continue;
      }
      in.lo = in.hi = 0;
      const std::size_t rest = in.need - in.got;
      if (in.dst && rest >= p2p_inbound::staging_bytes) {  // straight into its buffer
        const std::size_t k = fill(in.dst + in.got, rest);
        if (!k) return moved;
        in.got += k;
        moved = true;
        if (in.got == in.need) payload_done(c, peer);
        continue;
      }
    } else if (in.hi - in.lo >= sizeof(p2p_wire::frame)) {
      p2p_wire::frame f;
      std::memcpy(&f, in.buf.data() + in.lo, sizeof f);
      in.lo += sizeof f;
      try {
        on_frame(c, peer, f);
      } catch (const corrupt_stream& bad) {
        in.closed = std::string("sent a corrupt point-to-point stream (") + bad.what + ")";
        return true;
      }
      moved = true;
      continue;
    } else if (in.lo > 0) {
      std::memmove(in.buf.data(), in.buf.data() + in.lo, in.hi - in.lo);
      in.hi -= in.lo;
      in.lo = 0;
    }
    const std::size_t k = fill(in.buf.data() + in.hi, in.buf.size() - in.hi);
    if (!k) return moved;
    in.hi += k;
    moved = true;
  }
}

inline p2p_wire::frame message_frame(const p2p_op& s, std::uint32_t kind) {
  p2p_wire::frame f;
  f.kind = kind;
  f.tag = s.tag;
  f.type_id = s.type.id;
  f.type_size = s.type.size;
  f.count = s.count;
  f.bytes = s.bytes;
  f.seq = s.seq;
  return f;
}

/// The next frame this rank owes `peer`: its answers and notices first, then a piece of a
/// cleared message, then the next send in posting order. False when there is none.
inline bool next_item(p2p_ctx& c, int peer) {
  p2p_peer& p = c.at(peer);
  p2p_item it;
  if (!p.controls.empty()) {
    it.f = p.controls.front();
    p.controls.pop_front();
    p.out = std::move(it);
    return true;
  }
  while (!p.streaming.empty()) {
    const std::shared_ptr<p2p_op> s = p.streaming.front();
    if (s->state.done.load(std::memory_order_acquire)) {  // given up
      p.streaming.pop_front();
      continue;
    }
    const std::size_t n = std::min(p2p_piece_bytes, s->bytes - s->moved);
    it.f.kind = p2p_wire::data;
    it.f.seq = s->seq;
    it.f.bytes = n;
    it.f.offset = s->moved;
    it.payload = s->data + s->moved;
    it.n = n;
    s->moved += n;
    if (s->moved == s->bytes) {
      it.op = s;
      p.streaming.pop_front();
    }
    p.out = std::move(it);
    return true;
  }
  while (!p.sends.empty()) {
    const std::shared_ptr<p2p_op> s = p.sends.front();
    p.sends.pop_front();
    if (s->state.done.load(std::memory_order_acquire)) continue;  // given up
    ++p.sent;
    if (s->bytes <= p2p_eager_bytes) {
      it.f = message_frame(*s, p2p_wire::eager);
      it.payload = s->data;
      it.n = s->bytes;
      it.op = s;
    } else {
      s->seq = p.next_seq++;
      s->announced = true;
      it.f = message_frame(*s, p2p_wire::rts);
      c.eng.announced[{peer, s->seq}] = s;
    }
    p.out = std::move(it);
    return true;
  }
  return false;
}

/// Writes what this rank owes `peer` as far as its socket takes it. True if bytes moved.
inline bool write_to(p2p_ctx& c, int peer) {
  p2p_peer& p = c.at(peer);
  if (!p.broken.empty() || p.failed_here) return false;
  bool moved = false;
  for (;;) {
    if (!p.out && !next_item(c, peer)) return moved;
    p2p_item& it = *p.out;
    iovec iov[2];
    int n = 0;
    if (it.done < sizeof it.f)
      iov[n++] = {reinterpret_cast<char*>(&it.f) + it.done, sizeof it.f - it.done};
    const std::size_t from = it.done > sizeof it.f ? it.done - sizeof it.f : 0;
    if (it.n > from) iov[n++] = {const_cast<std::byte*>(it.payload) + from, it.n - from};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(n);
    const ssize_t k = ::sendmsg(c.l(peer).fd(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      p.broken = "broke its connection (" + std::string(std::strerror(errno)) + ")";
      return moved;
    }
    moved = true;
    it.done += static_cast<std::size_t>(k);
    if (it.done < it.size()) continue;
    if (it.op) complete(it.op->state, nullptr);
    p.out.reset();
  }
}

/// This rank's wait as the `wait` frame tells it (count 0: none): its only pending operation,
/// awaited, a receive not yet matched or a rendezvous send announced and not yet answered.
inline p2p_wire::frame wait_word(p2p_ctx& c, const std::shared_ptr<p2p_op>& e) {
  p2p_wire::frame f;
  f.kind = p2p_wire::wait;
  if (!e || e->state.done.load(std::memory_order_acquire) || !e->blocked || e->peer == any_source ||
      pending_count(c.eng) != 1)
    return f;
  const bool waiting =
      e->send ? c.eng.announced.contains({e->peer, e->seq}) && c.eng.announced.at({e->peer, e->seq}) == e
              : std::find(c.eng.receives.begin(), c.eng.receives.end(), e) != c.eng.receives.end();
  if (!waiting) return f;
  f.count = e->send ? 1 : 2;
  f.tag = e->peer;
  f.seq = c.at(e->peer).read;
  return f;
}

/// Tells the peer concerned when this rank's wait (`wait_word`) changed.
inline void tell_wait(p2p_ctx& c, const std::shared_ptr<p2p_op>& e) {
  const p2p_wire::frame f = wait_word(c, e);
  const int to = f.count ? f.tag : -1;
  if (c.eng.published_to >= 0 && c.eng.published_to != to) {  // withdrawn from the last one told
    p2p_wire::frame none;
    none.kind = p2p_wire::wait;
    c.at(c.eng.published_to).controls.push_back(none);
    c.eng.published_to = -1;
  }
  if (to < 0) return;
  if (c.eng.published_to == to && c.eng.told.count == f.count && c.eng.told.seq == f.seq) return;
  c.at(to).controls.push_back(f);
  c.eng.published_to = to;
  c.eng.told = f;
  c.eng.published = e;
}

/// Withdraws this rank's wait once its operation is done or no longer the only one pending.
inline void refresh_published(p2p_ctx& c) {
  if (c.eng.published_to < 0) return;
  const auto e = c.eng.published.lock();
  if (wait_word(c, e).count) return;
  tell_wait(c, nullptr);
}

/// Moves every pending operation as far as it goes now.
inline void progress(p2p_ctx& c) {
  for (int r = 0; r < c.g.size(); ++r)
    if (r != c.g.rank()) read_from(c, r);
  refresh_published(c);
  for (int r = 0; r < c.g.size(); ++r)
    if (r != c.g.rank()) write_to(c, r);
}

/// `mismatch_error` when this rank and `e`'s peer wait for each other in the same direction,
/// each having read all the other sent (see the file comment).
inline void check_cycle(p2p_ctx& c, const p2p_op& e) {
  if (c.eng.published_to != e.peer) return;
  const p2p_peer& p = c.at(e.peer);
  const p2p_wire::frame& theirs = p.theirs;
  if (theirs.count != c.eng.told.count || theirs.tag != c.g.rank() || theirs.seq != p.sent) return;
  const char* verb = e.send ? " sends to " : " receives from ";
  throw mismatch_error(here(c.g, e) + ": the ranks wait for each other in a cycle that nothing can break: " +
                       c.g.name(c.g.rank()) + verb + c.g.name(e.peer) + ", which" + verb + c.g.name(c.g.rank()) +
                       (e.send ? " (a send of more than " + std::to_string(p2p_eager_bytes) +
                                     " bytes waits until its receive is posted: post the receive first, with irecv, "
                                     "or send with isend)"
                               : " (post the receives with irecv, or send first on one side)"));
}

/// The failure of `e`'s peer (for an any-source receive: of every other rank) as this rank
/// raises it, or null while the operation may still complete.
inline std::exception_ptr lost(p2p_ctx& c, const p2p_op& e) {
  try {
    if (!c.eng.failed.empty()) throw error(errc::aborted, here(c.g, e) + ": this rank failed earlier: " + c.eng.failed);
    const auto check = [&](int peer) {
      const p2p_peer& p = c.at(peer);
      const std::string& why = !p.in.closed.empty() ? p.in.closed : p.broken;
      if (why.empty()) return;
      if (!p.in.notice.empty()) toolkit::raise_notice(p.in.notice, c.g, peer, here(c.g, e));
      toolkit::throw_lost(here(c.g, e) + ": " + c.g.name(peer) + " " + why + " without " +
                              (e.send ? "receiving it" : "sending it"),
                          c.g.job_rank(peer));
    };
    if (e.send || e.peer != any_source || e.from >= 0) {
      check(e.send || e.peer != any_source ? e.peer : e.from);
      return nullptr;
    }
    std::string gone;  // each rank's end, when every other rank's stream has ended
    for (int r = 0; r < c.g.size(); ++r) {
      if (r == c.g.rank()) continue;
      const p2p_inbound& in = c.at(r).in;
      if (in.closed.empty()) return nullptr;
      gone += (gone.empty() ? "" : "; ") + c.g.name(r) + " " + (in.notice.empty() ? in.closed : "failed: " + in.notice);
    }
    if (c.g.size() == 2) check(1 - c.g.rank());  // the one peer's loss, as for a receive from it
    throw peer_lost(here(c.g, e) + " from any rank: no message can come, every other rank has ended its "
                                   "connection (" + gone + ")");
  } catch (...) {
    return std::current_exception();
  }
}

/// Takes a given-up operation off every list of the engine; the frame being written for it is
/// finished from a copy (the stream must go on), and a rendezvous send its receiver knows of is
/// said given up (`cancel`).
inline void withdraw(p2p_ctx& c, const p2p_op* e) {
  const auto is_e = [&](const auto& x) { return x.get() == e; };
  if (e->send) {
    p2p_peer& p = c.at(e->peer);
    if (e->announced) p.controls.push_back(control(p2p_wire::cancel, e->seq, e->type, 0));
    detach(p, *e);
  }
  for (const auto& [key, r] : c.eng.filling)  // a receive that cleared a message tells its sender to stop
    if (r.get() == e) c.at(key.first).controls.push_back(control(p2p_wire::withdrawn, key.second, e->type, 0));
  const auto drop = [&](auto& list) { std::erase_if(list, is_e); };
  const auto drop_mapped = [&](auto& map) { std::erase_if(map, [&](const auto& kv) { return is_e(kv.second); }); };
  drop(c.eng.receives);
  for (auto& p : c.eng.peers) {
    drop(p.sends);
    drop(p.streaming);
    if (p.in.target.get() == e) {  // the rest of its bytes is dropped
      p.in.target.reset();
      p.in.dst = nullptr;
    }
  }
  drop_mapped(c.eng.announced);
  drop_mapped(c.eng.filling);
}

}  // namespace p2p_steps

TUTTI_DECL std::shared_ptr<p2p_engine> p2p_make(const toolkit::group_map& g) { return std::make_shared<p2p_engine>(g); }

TUTTI_DECL std::shared_ptr<operation_state> p2p_post_op(const std::shared_ptr<connections>& conn, const p2p_post& p,
                                                        bool send) {
  using namespace p2p_steps;
  using clock = std::chrono::steady_clock;
  p2p_engine& eng = *conn->p2p;
  const toolkit::group_map& g = eng.g;
  if (!conn->failure.empty()) throw error(errc::aborted, "tcp: this rank failed earlier: " + conn->failure);
  auto op = std::make_shared<p2p_op>();
  op->send = send;
  op->peer = p.peer;
  op->tag = p.tag;
  op->type = p.type;
  op->count = p.count;
  op->bytes = p.bytes;
  op->data = p.data;
  op->conn = conn;
  op->timeout = p.timeout;
  op->aborted = p.aborted;
  op->state.poll = [e = op.get()](operation_state& st) {
    if (st.done.load(std::memory_order_acquire)) return;
    p2p_engine& eng = *e->conn->p2p;
    const toolkit::group_map& g = eng.g;
    std::lock_guard lk(eng.mu);
    p2p_ctx c{*e->conn, eng, g};
    std::exception_ptr why;
    try {
      progress(c);
    } catch (...) {
      why = std::current_exception();
    }
    if (st.done.load(std::memory_order_acquire)) return;
    if (!why && e->deadline != clock::time_point{} && ++e->polls % 16 != 0 &&
        !(e->aborted && e->aborted->load(std::memory_order_relaxed)))
      return;
    const auto now = clock::now();
    if (e->deadline == clock::time_point{}) {
      e->deadline = now + e->timeout;
      e->look = now + std::chrono::milliseconds(1);
    }
    if (!why && e->aborted && e->aborted->load(std::memory_order_acquire)) {
      why = std::make_exception_ptr(
          error(errc::aborted, here(g, *e) + ": the communicator was aborted (communicator::abort)"));
    } else if (!why && now >= e->look) {  // the peers' connections and the wait cycle, every millisecond
      e->look = now + std::chrono::milliseconds(1);
      why = lost(c, *e);
      if (!why) {
        try {
          e->blocked = st.awaited;
          tell_wait(c, e->shared_from_this());
          check_cycle(c, *e);
        } catch (...) {
          why = std::current_exception();
        }
      }
    }
    if (!why && now >= e->deadline) {
      const std::string peer = e->peer == any_source ? "any rank" : g.name(e->peer);
      why = std::make_exception_ptr(timeout_error(toolkit::timeout_text(
          op_header(*e), "p2p", g.name(g.rank()), e->timeout, e->send ? "to take delivery from" : "to receive from",
          peer)));
    }
    if (!why) return;
    withdraw(c, e);
    complete(st, why);
    try {
      refresh_published(c);
      progress(c);  // (a given-up rendezvous send's cancel goes now)
    } catch (...) {
    }
  };
  std::lock_guard lk(eng.mu);
  p2p_ctx c{*conn, eng, g};
  if (send) {
    eng.peers[static_cast<std::size_t>(p.peer)].sends.push_back(op);
    if (std::exception_ptr gone = lost(c, *op)) {  // its connection is over: at once
      withdraw(c, op.get());
      complete(op->state, std::move(gone));
      return std::shared_ptr<operation_state>(op, &op->state);
    }
  } else {
    for (int r = 0; r < g.size(); ++r)  // what has arrived is matched first
      if (r != g.rank()) read_from(c, r);
    auto& q = eng.arrived;
    const auto it = std::find_if(q.begin(), q.end(), [&](const p2p_arrived& m) { return takes(*op, m); });
    if (it != q.end()) {
      const p2p_arrived m = std::move(*it);
      q.erase(it);
      if (take(c, *op, m, !m.rendezvous) && m.rendezvous) eng.filling[{m.src, m.seq}] = op;
    } else {
      eng.receives.push_back(op);
    }
  }
  refresh_published(c);
  for (int r = 0; r < g.size(); ++r)
    if (r != g.rank()) write_to(c, r);
  return std::shared_ptr<operation_state>(op, &op->state);
}

TUTTI_DECL bool p2p_drive(connections& conn) noexcept {
  if (!conn.p2p) return false;
  p2p_engine& eng = *conn.p2p;
  std::unique_lock lk(eng.mu, std::try_to_lock);
  if (!lk.owns_lock()) return true;
  if (p2p_steps::pending_count(eng) == 0 && !p2p_steps::owes(eng)) return false;
  p2p_steps::p2p_ctx c{conn, eng, eng.g};
  try {
    p2p_steps::progress(c);
  } catch (...) {  // (a corrupt stream: the point-to-point wait raises it)
  }
  return true;
}

TUTTI_DECL std::vector<std::string> p2p_pending(connections& conn) {
  std::vector<std::string> out;
  if (!conn.p2p) return out;
  p2p_engine& eng = *conn.p2p;
  const toolkit::group_map& g = eng.g;
  const auto now = std::chrono::steady_clock::now();
  const auto line = [&](const p2p_op& e) {
    if (e.state.done.load(std::memory_order_acquire)) return;
    out.push_back(toolkit::p2p_pending_line(e.send, e.peer == any_source ? "any rank" : g.name(e.peer), e.tag, e.bytes,
                                            now - e.posted));
  };
  std::lock_guard lk(eng.mu);
  for (const auto& p : eng.peers) {
    if (p.out && p.out->op) line(*p.out->op);
    for (const auto& e : p.sends) line(*e);
    for (const auto& e : p.streaming)
      if (!p.out || p.out->op != e) line(*e);
  }
  for (const auto& [key, e] : eng.announced) line(*e);
  for (const auto& e : eng.receives) line(*e);
  for (const auto& [key, e] : eng.filling) line(*e);
  return out;
}

TUTTI_DECL void p2p_fail(connections& conn, std::string_view why) noexcept {
  if (!conn.p2p) return;
  p2p_engine& eng = *conn.p2p;
  // Blocking: the engine holds its lock only for non-blocking reads and writes. Afterwards it
  // touches the sockets no more (tcp::fail closes them) and fails what is pending as this
  // rank's failure.
  std::unique_lock<std::mutex> lk;
  try {
    lk = std::unique_lock(eng.mu);
  } catch (...) {
    return;
  }
  try {
    if (eng.failed.empty()) eng.failed = why.empty() ? std::string("failed") : std::string(why);
  } catch (...) {
  }
  p2p_wire::frame f;
  f.kind = p2p_wire::failure;
  f.bytes = why.size();
  for (int r = 0; r < eng.g.size(); ++r) {
    if (r == eng.g.rank()) continue;
    p2p_peer& p = eng.peers[static_cast<std::size_t>(r)];
    if (p.out || !p.broken.empty()) continue;  // mid-frame: no room for a notice
    iovec iov[2] = {{&f, sizeof f}, {const_cast<char*>(why.data()), why.size()}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    const int fd = conn.peers[static_cast<std::size_t>(eng.g.world(r))][static_cast<std::size_t>(conn.opt.streams)]->fd();
    (void)::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  for (p2p_peer& p : eng.peers) {
    p.failed_here = true;
  }
}

}  // namespace tutti::detail::tcp_impl
