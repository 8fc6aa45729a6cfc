/// \file
/// Definitions for tutti/transport/shm/matching.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>

#include "tutti/core/error.hpp"
#include "tutti/detail/futex.hpp"
#include "tutti/transport/shm/matching.hpp"
#include "tutti/transport/toolkit/errors.hpp"
#include "tutti/transport/toolkit/p2p.hpp"

namespace tutti::detail::shm_impl {

namespace p2p_wire = toolkit::p2p_wire;

/// The steps `p2p_post_op` and the polls take.
namespace p2p_steps {

/// A blocking receive on the fast path (`p2p_recv_now`): posted after every receive in the
/// engine, it takes an arriving message none of them takes; it declines (and the posted path
/// then runs) the first such message that is not an eager one that fits its buffer.
struct p2p_fast_recv {
  const p2p_post& p;
  recv_status got{};
  bool taken = false, declined = false;
};

/// What the functions below work on: one process's engine, its segment, its group.
struct p2p_ctx {
  segment& seg;
  p2p_engine& eng;
  const toolkit::group_map& g;
  p2p_fast_recv* fast = nullptr;  // a blocking receive on the fast path, while it looks
  std::size_t at(int peer) const { return static_cast<std::size_t>(g.world(peer)); }
};

/// The bytes of a message where they lie: in a ring (wrapping at its end) or in one piece.
struct p2p_bytes {
  const std::byte* ring = nullptr;
  std::uint64_t at = 0;
  const std::byte* flat = nullptr;
  void copy_to(std::byte* dst, std::size_t n) const {
    if (!n) return;
    if (flat) {
      std::memcpy(dst, flat, n);
      return;
    }
    const std::size_t pos = static_cast<std::size_t>(at % p2p_ring_bytes), first = std::min(n, p2p_ring_bytes - pos);
    std::memcpy(dst, ring + pos, first);
    if (n > first) std::memcpy(dst + first, ring, n - first);
  }
};

inline header p2p_op_header(const p2p_op& e) { return toolkit::p2p_header(e.type, e.count, e.tag, e.bytes); }

/// "send/recv(p2p) tag=5 count=... on rank 1", for errors.
inline std::string p2p_here(const toolkit::group_map& g, const p2p_op& e) {
  return toolkit::where(p2p_op_header(e), "p2p") + " on " + g.name(g.rank());
}

/// Whether receive `r` (a posted `p2p_op` or a fast receive's `p2p_post`) matches message `m`.
template <class Receive>
bool takes(const Receive& r, const p2p_arrived& m) {
  return (r.peer == any_source || r.peer == m.src) && (r.tag == any_tag || r.tag == m.tag);
}

/// The stamp word of the 64-byte line at `line` of a ring (where a frame's `stamp` lies).
inline std::atomic_ref<std::uint64_t> stamp_at(std::byte* line) {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(line + p2p_wire::stamp_at));
}

/// Writes frame `f` and `n` bytes of payload into the ring to `peer` if both fit: the frame's
/// stamp last, so that the reader, which looks for the stamp where its next frame goes, finds
/// them whole (one cache line to watch, no counter beside it); then the head, for the looks
/// that ask whether a ring is empty. Before the stamp, the stamp word where the next frame
/// will go is cleared: what lies there from the ring's previous round (a message's bytes) can
/// never pass for a frame. The receiver's tail is read again only when the room the last one
/// left is short (it is the receiver's line: reading it at each send moves it).
inline bool put(p2p_ctx& c, int peer, const p2p_wire::frame& f, const std::byte* payload, std::size_t n) {
  const int me = c.seg.world_rank, to = c.g.world(peer);
  auto& ends = c.seg.p2p_ends(me, to);
  std::uint64_t& head = c.eng.head[c.at(peer)];
  std::uint64_t& seen_tail = c.eng.seen_tail[c.at(peer)];
  const std::size_t need = sizeof f + pad(n);
  const auto short_of_room = [&] { return p2p_ring_bytes - static_cast<std::size_t>(head - seen_tail) < need + 64; };
  if (short_of_room()) {
    seen_tail = ends.tail.load(std::memory_order_acquire);
    if (short_of_room()) return false;
  }
  std::byte* ring = c.seg.p2p_data(me, to);
  std::byte* slot = ring + head % p2p_ring_bytes;  // frames never wrap: 64 divides the ring
  stamp_at(ring + (head + need) % p2p_ring_bytes).store(0, std::memory_order_relaxed);
  std::memcpy(slot, &f, p2p_wire::stamp_at);
  if (n && payload) {
    const std::size_t pos = static_cast<std::size_t>((head + sizeof f) % p2p_ring_bytes);
    const std::size_t first = std::min(n, p2p_ring_bytes - pos);
    std::memcpy(ring + pos, payload, first);
    if (n > first) std::memcpy(ring, payload + first, n - first);
  }
  stamp_at(slot).store(head + 1, std::memory_order_release);
  head += need;
  ends.head.store(head, std::memory_order_release);
  return true;
}

/// Writes an eager message to `peer` (`f`: its frame, kind aside): within the frame when it is
/// short (one cache line in all), else after it.
inline bool put_eager(p2p_ctx& c, int peer, p2p_wire::frame f, const std::byte* data, std::size_t n) {
  if (n <= p2p_wire::short_bytes) {
    f.kind = p2p_wire::short_eager;
    if (n) std::memcpy(reinterpret_cast<std::byte*>(&f) + p2p_wire::short_at, data, n);
    return put(c, peer, f, nullptr, 0);
  }
  f.kind = p2p_wire::eager;
  return put(c, peer, f, data, n);
}

/// Whether the ring from world rank `from` to this rank holds a frame not yet read (no lock:
/// the reader's own tail, and the stamp at it).
inline bool p2p_written(const segment& seg, int from) {
  const auto& ends = seg.p2p_ends(from, seg.world_rank);
  const std::uint64_t tail = ends.tail.load(std::memory_order_relaxed);
  return stamp_at(seg.p2p_data(from, seg.world_rank) + tail % p2p_ring_bytes).load(std::memory_order_acquire) ==
         tail + 1;
}

/// Whether any ring to this rank holds a frame not yet read (`p2p_written` for every peer).
inline bool any_written(const segment& seg, const toolkit::group_map& g) {
  for (int r = 0; r < g.size(); ++r)
    if (r != g.rank() && p2p_written(seg, g.world(r))) return true;
  return false;
}

/// Receive `r` takes message `m`: a mismatch fails it (and, for a rendezvous, its send);
/// otherwise an eager message is copied into its buffer, a rendezvous one cleared to come.
inline void take(p2p_ctx& c, p2p_op& r, const p2p_arrived& m, const p2p_bytes& payload) {
  if (!toolkit::p2p_fits(m.type, m.count, r.type, r.count)) {
    if (m.rendezvous) c.eng.controls[c.at(m.src)].push_back({p2p_wire::refuse, m.seq, r.type, r.count});
    complete(r.state, std::make_exception_ptr(mismatch_error(
                          toolkit::p2p_mismatch(m.src, c.g.rank(), m.tag, m.type, m.count, r.type, r.count))));
    return;
  }
  r.state.status = recv_status{m.src, m.tag, static_cast<std::size_t>(m.count)};
  if (!m.rendezvous) {
    payload.copy_to(r.data, static_cast<std::size_t>(m.bytes));
    complete(r.state, nullptr);
    return;
  }
  r.from = m.src;
  r.seq = m.seq;
  r.expect = static_cast<std::size_t>(m.bytes);
  c.eng.controls[c.at(m.src)].push_back({p2p_wire::cts, m.seq, r.type, r.count});
}

/// An eager message or a rendezvous envelope from `peer`: to the earliest posted receive that
/// takes it, or among the arrived.
inline void arrive(p2p_ctx& c, int peer, const p2p_wire::frame& f, const p2p_bytes& payload) {
  p2p_arrived m;
  m.src = peer;
  m.tag = f.tag;
  m.type = dtype{f.type_id, f.type_size};
  m.count = f.count;
  m.bytes = f.bytes;
  m.rendezvous = f.kind == p2p_wire::rts;
  m.seq = f.seq;
  auto& q = c.eng.receives;
  const auto it = std::find_if(q.begin(), q.end(), [&](const auto& r) { return takes(*r, m); });
  if (it != q.end()) {
    const std::shared_ptr<p2p_op> r = *it;
    q.erase(it);
    take(c, *r, m, payload);
    if (m.rendezvous && !r->state.done.load(std::memory_order_acquire)) c.eng.filling[{peer, m.seq}] = r;
    return;
  }
  if (p2p_fast_recv* f = c.fast; f && !f->taken && !f->declined && takes(f->p, m)) {
    if (!m.rendezvous && toolkit::p2p_fits(m.type, m.count, f->p.type, f->p.count)) {
      payload.copy_to(f->p.data, static_cast<std::size_t>(m.bytes));
      f->got = recv_status{peer, m.tag, static_cast<std::size_t>(m.count)};
      f->taken = true;
      return;
    }
    f->declined = true;  // the earliest message it matches: the posted receive takes it from `arrived`
  }
  if (!m.rendezvous) {
    m.payload.resize(static_cast<std::size_t>(m.bytes));
    payload.copy_to(m.payload.data(), m.payload.size());
  }
  c.eng.arrived.push_back(std::move(m));
}

inline std::size_t pending_count(const p2p_engine& eng) {
  std::size_t n = eng.receives.size() + eng.announced.size() + eng.filling.size();
  for (const auto& q : eng.sends) n += q.size();
  for (const auto& q : eng.streaming) n += q.size();
  return n;
}

/// Publishes that this rank waits for `e`, its only pending operation (see the file comment).
inline void publish(p2p_ctx& c, p2p_op& e) {
  if (c.eng.is_published && c.eng.published.lock().get() == &e) return;
  const std::uint64_t word = (std::uint64_t{++c.eng.publications} << 32) | (std::uint64_t{e.send ? 1u : 2u} << 24) |
                             static_cast<std::uint64_t>(c.g.world(e.peer) + 1);
  c.seg.ctl(c.seg.world_rank).p2p_wait.store(word, std::memory_order_release);
  c.eng.published = e.weak_from_this();
  c.eng.is_published = true;
}

inline void unpublish(p2p_ctx& c) {
  c.seg.ctl(c.seg.world_rank).p2p_wait.store(0, std::memory_order_release);
  c.eng.published.reset();
  c.eng.is_published = false;
}

/// Withdraws the publication once its operation is done or no longer the only one pending.
inline void refresh_published(p2p_ctx& c) {
  if (!c.eng.is_published) return;
  const auto e = c.eng.published.lock();
  if (e && !e->state.done.load(std::memory_order_acquire) && pending_count(c.eng) == 1) return;
  unpublish(c);
}

/// Reads every frame `peer` has written to this rank (a fast receive: up to its message), each
/// found by its stamp where the previous one ended (`put`).
inline void read_from(p2p_ctx& c, int peer) {
  const int from = c.g.world(peer), me = c.seg.world_rank;
  auto& ends = c.seg.p2p_ends(from, me);
  std::uint64_t& tail = c.eng.tail[c.at(peer)];
  const std::uint64_t start = tail;
  std::byte* ring = c.seg.p2p_data(from, me);
  for (;;) {
    std::byte* slot = ring + tail % p2p_ring_bytes;
    if (stamp_at(slot).load(std::memory_order_acquire) != tail + 1) break;
    p2p_wire::frame f;
    std::memcpy(&f, slot, sizeof f);
    if (f.magic != p2p_wire::magic)
      throw error(errc::aborted, "shm: corrupt point-to-point stream from " + c.g.name(peer));
    if (f.payload() > p2p_piece_bytes || (f.kind == p2p_wire::short_eager && f.bytes > p2p_wire::short_bytes))
      throw error(errc::aborted, "shm: corrupt point-to-point stream from " + c.g.name(peer) + " (a frame too long)");
    const p2p_bytes payload = f.kind == p2p_wire::short_eager
                                  ? p2p_bytes{nullptr, 0, reinterpret_cast<const std::byte*>(&f) + p2p_wire::short_at}
                                  : p2p_bytes{ring, tail + sizeof f, nullptr};
    switch (f.kind) {
      case p2p_wire::eager:
      case p2p_wire::short_eager:
      case p2p_wire::rts: arrive(c, peer, f, payload); break;
      case p2p_wire::cts:
      case p2p_wire::refuse: {
        const auto it = c.eng.announced.find({peer, f.seq});
        if (it == c.eng.announced.end()) break;  // a send given up meanwhile
        const std::shared_ptr<p2p_op> s = it->second;
        c.eng.announced.erase(it);
        if (f.kind == p2p_wire::cts) {
          c.eng.streaming[c.at(peer)].push_back(s);
        } else {
          const std::string wrong = toolkit::p2p_mismatch(c.g.rank(), peer, s->tag, s->type, s->count,
                                                          dtype{f.type_id, f.type_size}, static_cast<std::size_t>(f.count));
          complete(s->state, std::make_exception_ptr(mismatch_error(wrong)));
        }
        break;
      }
      case p2p_wire::cancel: {  // its sender gave up a rendezvous message (deadline, abort)
        std::erase_if(c.eng.arrived, [&](const p2p_arrived& m) { return m.rendezvous && m.src == peer && m.seq == f.seq; });
        const auto it = c.eng.filling.find({peer, f.seq});
        if (it == c.eng.filling.end()) break;
        complete(it->second->state,
                 std::make_exception_ptr(error(errc::aborted, p2p_here(c.g, *it->second) + ": " + c.g.name(peer) +
                                                                  " gave its send up (its deadline or abort) before "
                                                                  "all of it came")));
        c.eng.filling.erase(it);
        break;
      }
      case p2p_wire::withdrawn: {  // its receiver gave up a message it had cleared (deadline, abort)
        auto& q = c.eng.streaming[c.at(peer)];
        const auto it = std::find_if(q.begin(), q.end(), [&](const auto& s) { return s->seq == f.seq; });
        if (it == q.end()) break;  // all of it written meanwhile
        complete((*it)->state, std::make_exception_ptr(error(
                                   errc::aborted, p2p_here(c.g, **it) + ": " + c.g.name(peer) +
                                                      " gave its receive up (its deadline or abort) before all of it came")));
        q.erase(it);
        break;
      }
      case p2p_wire::data: {
        const auto it = c.eng.filling.find({peer, f.seq});
        if (it == c.eng.filling.end()) break;  // a receive given up meanwhile
        p2p_op& r = *it->second;
        if (f.offset > r.expect || f.bytes > r.expect - f.offset)
          throw error(errc::aborted, "shm: corrupt point-to-point stream from " + c.g.name(peer) +
                                         " (a piece beyond its message)");
        payload.copy_to(r.data + f.offset, static_cast<std::size_t>(f.bytes));
        r.moved += static_cast<std::size_t>(f.bytes);
        if (r.moved >= r.expect) {
          complete(r.state, nullptr);
          c.eng.filling.erase(it);
        }
        break;
      }
      default: throw error(errc::aborted, "shm: corrupt point-to-point stream from " + c.g.name(peer));
    }
    tail += sizeof f + pad(f.payload());
    // A fast receive that has its message reads no further: the next frame's line is the
    // writer's (it cleared the stamp there), and fetching it would delay the program's answer.
    // What lies behind is read by the next look (a call, a wait, a collective's `p2p_drive`),
    // so a sender waiting behind it for a `cts` or for room goes on then, as MPI progresses
    // within calls. (An any-source receive reads one frame of each other peer after its own:
    // they keep their turn.)
    if (c.fast && c.fast->taken) break;
  }
  if (tail == start) return;
  // What this rank published it waits for may be what it just read: withdrawn before the peer
  // can see the ring empty, so that no look finds a stale wait beside quiet rings.
  if (c.eng.is_published) unpublish(c);
  ends.tail.store(tail, std::memory_order_release);
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

/// Writes what this rank owes `peer`, as far as the ring has room: answers to its rendezvous
/// envelopes, pieces of cleared messages, then the sends in posting order.
inline void write_to(p2p_ctx& c, int peer) {
  auto& controls = c.eng.controls[c.at(peer)];
  while (!controls.empty()) {
    const p2p_control& k = controls.front();
    p2p_wire::frame f;
    f.kind = k.kind;
    f.seq = k.seq;
    f.type_id = k.type.id;
    f.type_size = k.type.size;
    f.count = k.room;
    if (!put(c, peer, f, nullptr, 0)) return;
    controls.pop_front();
  }
  auto& streaming = c.eng.streaming[c.at(peer)];
  while (!streaming.empty()) {
    p2p_op& s = *streaming.front();
    if (!s.state.done.load(std::memory_order_acquire)) {
      const std::size_t n = std::min(p2p_piece_bytes, s.bytes - s.moved);
      p2p_wire::frame f;
      f.kind = p2p_wire::data;
      f.seq = s.seq;
      f.bytes = n;
      f.offset = s.moved;
      if (!put(c, peer, f, s.data + s.moved, n)) return;
      s.moved += n;
      if (s.moved < s.bytes) continue;
      complete(s.state, nullptr);
    }
    streaming.pop_front();
  }
  auto& sends = c.eng.sends[c.at(peer)];
  while (!sends.empty()) {
    const std::shared_ptr<p2p_op> s = sends.front();
    if (!s->state.done.load(std::memory_order_acquire)) {  // (done: given up)
      if (s->bytes <= p2p_eager_bytes) {
        if (!put_eager(c, peer, message_frame(*s, p2p_wire::eager), s->data, s->bytes)) return;
        complete(s->state, nullptr);
      } else {
        s->seq = c.eng.next_seq[c.at(peer)];
        if (!put(c, peer, message_frame(*s, p2p_wire::rts), nullptr, 0)) return;
        ++c.eng.next_seq[c.at(peer)];
        c.eng.announced[{peer, s->seq}] = s;
      }
    }
    sends.pop_front();
  }
}

/// Moves every pending operation as far as it goes now: reads what the peers wrote, then
/// writes what this rank owes them.
inline void progress(p2p_ctx& c) {
  for (int r = 0; r < c.g.size(); ++r)
    if (r != c.g.rank()) read_from(c, r);
  for (int r = 0; r < c.g.size(); ++r)
    if (r != c.g.rank()) write_to(c, r);
  refresh_published(c);
}

/// Raises `mismatch_error` when this rank, waiting for `e`, is part of a cycle of published
/// waits none of which the next rank's can complete, with nothing in flight between any two of
/// them, that `last` already held at the previous look (each rank published the same wait both
/// times). A wait is completed by its peer's when they are a send and a receive of each other.
inline void check_cycle(p2p_ctx& c, const p2p_op& e, std::vector<std::uint64_t>& last) {
  const segment& seg = c.seg;
  const auto quiet = [&](int a, int b) {  // nothing written from a to b that b has not read
    const auto& x = seg.p2p_ends(a, b);
    return x.head.load(std::memory_order_acquire) == x.tail.load(std::memory_order_acquire);
  };
  std::vector<std::uint64_t> seen;
  std::vector<bool> visited(static_cast<std::size_t>(seg.lay.p));
  std::string chain;
  int r = seg.world_rank, prev = -1, first_peer = -1;
  std::uint32_t prev_kind = 0, first_kind = 0;
  for (;;) {
    const std::uint64_t word = seg.ctl(r).p2p_wait.load(std::memory_order_acquire);
    const int peer = static_cast<int>(word & 0xffffff) - 1;
    const auto kind = static_cast<std::uint32_t>((word >> 24) & 0xff);
    if (!word || peer < 0 || peer >= seg.lay.p || peer == r || !quiet(r, peer) || !quiet(peer, r) ||
        seg.ctl(r).p2p_wait.load(std::memory_order_acquire) != word)  // (still published once the rings looked quiet)
      return last.clear();
    if (prev >= 0 && peer == prev && kind != prev_kind) return last.clear();  // r's wait completes prev's
    if (visited[static_cast<std::size_t>(r)]) return last.clear();           // a cycle, but not through this rank
    visited[static_cast<std::size_t>(r)] = true;
    if (prev < 0) {
      first_peer = peer;
      first_kind = kind;
    }
    seen.push_back(word);
    chain += (chain.empty() ? c.g.world_name(r) : ", which") + (kind == 1 ? " sends to " : " receives from ") +
             c.g.world_name(peer);
    if (peer == seg.world_rank) {
      if (first_peer == r && first_kind != kind) return last.clear();  // this rank's wait completes r's
      break;
    }
    prev = r;
    prev_kind = kind;
    r = peer;
  }
  if (seen != last) {
    last = std::move(seen);
    return;
  }
  throw mismatch_error(p2p_here(c.g, e) + ": the ranks wait for each other in a cycle that nothing can break: " + chain +
                       " (a send of more than " + std::to_string(p2p_eager_bytes) +
                       " bytes waits until its receive is posted: post the receive first, with irecv, or send with "
                       "isend)");
}

/// The failure of `e`'s peer (for an any-source receive: of every other rank) as this rank
/// raises it, or null while it may still come.
inline std::exception_ptr p2p_lost(const segment& seg, const toolkit::group_map& g, const p2p_op& e) {
  try {
    const auto check = [&](int peer) {
      const int wr = g.world(peer);
      const std::string why = seg.gone(wr);
      if (why.empty()) return;
      if (auto notice = seg.failure_notice(wr)) toolkit::raise_notice(*notice, g, peer, p2p_here(g, e));
      toolkit::throw_lost(p2p_here(g, e) + ": " + g.name(peer) + " " + why + " without " +
                              (e.send ? "receiving it" : "sending it"),
                          g.job_rank(peer));
    };
    if (e.send || e.peer != any_source || e.from >= 0) {  // (an any-source receive taking a message: its sender)
      check(e.send || e.peer != any_source ? e.peer : e.from);
      return nullptr;
    }
    for (int r = 0; r < g.size(); ++r)
      if (r != g.rank() && seg.gone(g.world(r)).empty()) return nullptr;
    throw peer_lost(p2p_here(g, e) + " from any rank: every other rank has exited or failed, so no message can come");
  } catch (...) {
    return std::current_exception();
  }
}

/// Takes a given-up operation off every list of the engine.
inline void withdraw(p2p_engine& eng, const p2p_op* e) {
  // A rendezvous send its receiver knows of (announced, or being written) is said given up.
  if (e->send) {
    const auto to = static_cast<std::size_t>(eng.g.world(e->peer));
    const auto is_e = [&](const auto& x) { return x.get() == e; };
    if (std::any_of(eng.announced.begin(), eng.announced.end(), [&](const auto& kv) { return is_e(kv.second); }) ||
        std::any_of(eng.streaming[to].begin(), eng.streaming[to].end(), is_e))
      eng.controls[to].push_back({p2p_wire::cancel, e->seq, e->type, 0});
  }
  // A receive that cleared a rendezvous message tells its sender to stop.
  for (const auto& [key, r] : eng.filling)
    if (r.get() == e)
      eng.controls[static_cast<std::size_t>(eng.g.world(key.first))].push_back({p2p_wire::withdrawn, key.second, e->type, 0});
  const auto drop = [&](auto& list) { std::erase_if(list, [&](const auto& x) { return x.get() == e; }); };
  const auto drop_mapped = [&](auto& map) { std::erase_if(map, [&](const auto& kv) { return kv.second.get() == e; }); };
  drop(eng.receives);
  for (auto& q : eng.sends) drop(q);
  for (auto& q : eng.streaming) drop(q);
  drop_mapped(eng.announced);
  drop_mapped(eng.filling);
}

}  // namespace p2p_steps

TUTTI_DECL std::shared_ptr<operation_state> p2p_post_op(const std::shared_ptr<segment>& seg,
                                                        const std::shared_ptr<p2p_engine>& eng, const p2p_post& p,
                                                        bool send) {
  using namespace p2p_steps;
  using clock = std::chrono::steady_clock;
  const toolkit::group_map& g = eng->g;
  auto op = std::make_shared<p2p_op>();
  op->send = send;
  op->peer = p.peer;
  op->tag = p.tag;
  op->type = p.type;
  op->count = p.count;
  op->bytes = p.bytes;
  op->data = p.data;
  op->seg = seg;
  op->eng = eng;
  op->timeout = p.timeout;
  op->aborted = p.aborted;
  // The poll runs only while the request holds the state, and so the operation: a plain
  // pointer (which std::function keeps without allocating).
  op->state.poll = [e = op.get()](operation_state& st) {
    if (st.done.load(std::memory_order_acquire)) return;
    p2p_engine& eng = *e->eng;
    const toolkit::group_map& g = eng.g;
    std::lock_guard lk(eng.mu);
    p2p_ctx c{*e->seg, eng, g};
    std::exception_ptr why;
    try {
      progress(c);
    } catch (...) {
      why = std::current_exception();
    }
    if (st.done.load(std::memory_order_acquire)) {
      refresh_published(c);
      return;
    }
    // The clock every 16th poll (a wait polls about every 0.1 us at first), the abort at each.
    if (!why && e->deadline != clock::time_point{} && ++e->polls % 16 != 0 &&
        !(e->aborted && e->aborted->load(std::memory_order_relaxed)))
      return;
    const auto now = clock::now();
    if (e->deadline == clock::time_point{}) {  // the first look at the peers a millisecond in: a
      e->deadline = now + e->timeout;          // process's liveness costs a system call
      e->look = now + std::chrono::milliseconds(1);
    }
    if (!why && e->aborted && e->aborted->load(std::memory_order_acquire)) {
      why = std::make_exception_ptr(
          error(errc::aborted, p2p_here(g, *e) + ": the communicator was aborted (communicator::abort)"));
    } else if (!why && now >= e->look) {  // the peers' processes and the wait cycles, every millisecond
      e->look = now + std::chrono::milliseconds(1);
      why = p2p_lost(c.seg, g, *e);
      if (!why && st.awaited && e->peer != any_source && pending_count(eng) == 1) {
        publish(c, *e);
        try {
          check_cycle(c, *e, e->cycle);
        } catch (...) {
          why = std::current_exception();
        }
      }
      if (why) {  // what a peer wrote before it went is still to be read
        try {
          progress(c);
        } catch (...) {
        }
        if (st.done.load(std::memory_order_acquire)) return;
      }
    }
    if (!why && now >= e->deadline) {
      const std::string peer = e->peer == any_source ? "any rank" : g.name(e->peer);
      why = std::make_exception_ptr(timeout_error(toolkit::timeout_text(
          p2p_op_header(*e), "p2p", g.name(g.rank()), e->timeout, e->send ? "to take delivery from" : "to receive from",
          peer)));
    }
    if (!why) return;
    withdraw(eng, e);
    complete(st, why);
    try {
      progress(c);  // (a given-up rendezvous send's cancel goes now)
    } catch (...) {
    }
    refresh_published(c);
  };
  std::lock_guard lk(eng->mu);
  p2p_ctx c{*seg, *eng, g};
  if (send) {
    // To a rank that failed: its failure now (a rank that exited is found by the wait of a
    // rendezvous send; an eager message to it is written and lost, as MPI's would be).
    const auto& dst = seg->ctl(g.world(p.peer));
    if (dst.state.load(std::memory_order_acquire) == static_cast<std::uint32_t>(rank_state::failed))
      if (std::exception_ptr gone = p2p_lost(*seg, g, *op)) {
        complete(op->state, std::move(gone));
        return std::shared_ptr<operation_state>(op, &op->state);
      }
    eng->sends[c.at(p.peer)].push_back(op);
  } else {
    for (int r = 0; r < g.size(); ++r)  // what has arrived is matched first
      if (r != g.rank()) read_from(c, r);
    auto& q = eng->arrived;
    const auto it = std::find_if(q.begin(), q.end(), [&](const p2p_arrived& m) { return takes(*op, m); });
    if (it != q.end()) {
      const p2p_arrived m = std::move(*it);
      q.erase(it);
      take(c, *op, m, p2p_bytes{nullptr, 0, m.payload.data()});
      if (m.rendezvous && !op->state.done.load(std::memory_order_acquire)) eng->filling[{m.src, m.seq}] = op;
    } else {
      eng->receives.push_back(op);
    }
  }
  for (int r = 0; r < g.size(); ++r)
    if (r != g.rank()) write_to(c, r);
  refresh_published(c);
  return std::shared_ptr<operation_state>(op, &op->state);
}

TUTTI_DECL bool p2p_send_now(segment& seg, p2p_engine& eng, const p2p_post& p) {
  using namespace p2p_steps;
  if (p.bytes > p2p_eager_bytes) return false;
  const toolkit::group_map& g = eng.g;
  const int to = g.world(p.peer);
  // A failed peer: the posted path raises its failure.
  if (seg.ctl(to).state.load(std::memory_order_acquire) == static_cast<std::uint32_t>(rank_state::failed)) return false;
  std::lock_guard lk(eng.mu);
  if (!eng.sends[static_cast<std::size_t>(to)].empty()) return false;  // sends to one peer go in posting order
  p2p_ctx c{seg, eng, g};
  p2p_wire::frame f;
  f.tag = p.tag;
  f.type_id = p.type.id;
  f.type_size = p.type.size;
  f.count = p.count;
  f.bytes = p.bytes;
  return put_eager(c, p.peer, f, p.data, p.bytes);
}

TUTTI_DECL bool p2p_recv_now(segment& seg, p2p_engine& eng, const p2p_post& p, recv_status& got) {
  using namespace p2p_steps;
  const toolkit::group_map& g = eng.g;
  p2p_fast_recv fast{p};
  // Looks (under the lock) at what has arrived, then reads the rings with `fast` waiting in
  // them: true once it has its message, or when it declined one (the posted path's then).
  const auto look = [&] {
    std::lock_guard lk(eng.mu);
    p2p_ctx c{seg, eng, g, &fast};
    for (const p2p_arrived& m : eng.arrived)
      if (takes(p, m)) return true;
    if (p.peer != any_source) {
      read_from(c, p.peer);
    } else {
      for (int r = 0; r < g.size(); ++r)
        if (r != g.rank()) read_from(c, r);
    }
    // What the reading owes the peers goes now, as a post's would (a `cts` or `refuse` for an
    // envelope a posted receive took, the pieces of a message just cleared): after this call
    // nothing may look at the rings for a long while.
    for (int r = 0; r < g.size(); ++r)
      if (r != g.rank() && (!eng.controls[c.at(r)].empty() || !eng.streaming[c.at(r)].empty())) write_to(c, r);
    return fast.taken || fast.declined;
  };
  const auto unread = [&] {  // a ring this receive reads holds something unread
    return p.peer != any_source ? p2p_written(seg, g.world(p.peer)) : any_written(seg, g);
  };
  bool ended = look();
  for (int i = 0; !ended && i < p2p_fast_spins; ++i) {
    if (unread()) ended = look();
    else detail::cpu_relax();
  }
  if (!fast.taken) return false;
  got = fast.got;
  return true;
}

TUTTI_DECL void p2p_drive(segment& seg, p2p_engine& eng) noexcept {
  std::unique_lock lk(eng.mu, std::try_to_lock);
  if (!lk.owns_lock()) return;
  // With nothing pending, frames still unread are read too: a sender that filled its ring with
  // eager messages (a fast receive reads only up to its own) may wait for the room.
  if (p2p_steps::pending_count(eng) == 0 && !p2p_steps::any_written(seg, eng.g)) return;
  p2p_steps::p2p_ctx c{seg, eng, eng.g};
  try {
    p2p_steps::progress(c);
  } catch (...) {  // (a corrupt stream: the point-to-point wait raises it)
  }
}

TUTTI_DECL std::vector<std::string> p2p_pending(p2p_engine& eng) {
  using namespace p2p_steps;
  const toolkit::group_map& g = eng.g;
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> out;
  const auto line = [&](const p2p_op& e) {
    if (e.state.done.load(std::memory_order_acquire)) return;
    out.push_back(toolkit::p2p_pending_line(e.send, e.peer == any_source ? "any rank" : g.name(e.peer), e.tag, e.bytes,
                                            now - e.posted));
  };
  std::lock_guard lk(eng.mu);
  for (const auto& q : eng.sends)
    for (const auto& e : q) line(*e);
  for (const auto& [key, e] : eng.announced) line(*e);
  for (const auto& q : eng.streaming)
    for (const auto& e : q) line(*e);
  for (const auto& e : eng.receives) line(*e);
  for (const auto& [key, e] : eng.filling) line(*e);
  return out;
}

}  // namespace tutti::detail::shm_impl
