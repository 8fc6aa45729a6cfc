/// \file
/// Point to point over shm: one byte ring per ordered pair of ranks (head written only by the
/// sender, tail only by the receiver, each on its own cache line). A message is a 64-byte header
/// frame (`toolkit::wire::frame`: fingerprint with the communicator's context, byte count) and
/// the payload padded to 64 bytes; it is written in pieces as room appears, and a receiver hands
/// what has arrived to its consumer straight out of the ring (`zero_copy_recv`).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/byte_consumer.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/shm/segment.hpp"
#include "tutti/transport/toolkit/errors.hpp"
#include "tutti/transport/toolkit/group_map.hpp"
#include "tutti/transport/toolkit/wire.hpp"

namespace tutti::detail::shm_impl {

constexpr std::size_t pad(std::size_t n) { return (n + 63) & ~std::size_t{63}; }
/// A sender rings the receiver's bell after each piece this large, so it can start on it.
inline constexpr std::size_t piece_limit = std::size_t{64} << 10;

struct copier {
  std::byte* dst;
  void operator()(const std::byte* src, std::size_t offset, std::size_t n) const { std::memcpy(dst + offset, src, n); }
};

/// A message being written to `peer`.
struct outgoing {
  int peer;
  const header& h;
  const std::byte* data;
  std::size_t done = 0;  // bytes of this message written (the header counts 64)
  std::uint64_t seen_tail = 0;
};

/// A message being read from `peer`.
struct incoming {
  int peer;
  const header& expected;
  byte_consumer consume;
  bool checked = false;
  std::size_t done = 0;  // payload bytes consumed (padded)
  std::uint64_t seen_head = 0;
};

/// Writes as much of `out` as the ring has room for; true when all of it is written.
inline bool progress(segment& seg, const toolkit::group_map& g, outgoing& out) {
  const int me = seg.world_rank, to = g.world(out.peer);
  auto& ends = seg.ends(me, to);
  std::byte* ring = seg.ring_data(me, to);
  const std::size_t cap = seg.lay.opt.ring_bytes;
  std::uint64_t& head = seg.sent[static_cast<std::size_t>(to)];
  const std::size_t total = toolkit::wire::frame_bytes + pad(out.h.bytes);
  out.seen_tail = ends.tail.load(std::memory_order_acquire);
  bool published = false;
  while (out.done < total) {
    const std::size_t room = cap - static_cast<std::size_t>(head - out.seen_tail);
    if (room < 64) break;
    const std::size_t pos = static_cast<std::size_t>(head % cap);
    std::size_t n;
    if (out.done == 0) {
      header h = out.h;
      h.fp.context = g.context();
      const auto f = toolkit::wire::frame::of(toolkit::wire::kind::message, h);
      std::memcpy(ring + pos, &f, sizeof f);
      n = sizeof f;
    } else {
      const std::size_t off = out.done - toolkit::wire::frame_bytes;
      n = std::min({room, total - out.done, cap - pos, piece_limit});
      const std::size_t real = std::min(n, out.h.bytes - std::min(off, out.h.bytes));
      if (real) std::memcpy(ring + pos, out.data + off, real);
    }
    head += n;
    out.done += n;
    ends.head.store(head, std::memory_order_release);
    published = true;
    if (n >= piece_limit) {  // let a sleeping receiver start on this piece
      seg.ring_bell(to);
      published = false;
    }
  }
  if (published) seg.ring_bell(to);
  return out.done == total;
}

/// Consumes what has arrived of `in`; true when the whole message is consumed. The header is
/// checked (`toolkit::check_header`) before any payload byte is handed on.
inline bool progress(segment& seg, const toolkit::group_map& g, incoming& in, const wait_context& w) {
  const int me = seg.world_rank, from = g.world(in.peer);
  auto& ends = seg.ends(from, me);
  const std::byte* ring = seg.ring_data(from, me);
  const std::size_t cap = seg.lay.opt.ring_bytes;
  std::uint64_t& tail = seg.received[static_cast<std::size_t>(from)];
  in.seen_head = ends.head.load(std::memory_order_acquire);
  bool consumed = false;
  if (!in.checked) {
    if (in.seen_head - tail < toolkit::wire::frame_bytes) return false;
    toolkit::wire::frame f;
    std::memcpy(&f, ring + tail % cap, sizeof f);
    if (!f.is(toolkit::wire::kind::message))
      throw error(errc::aborted, "shm: corrupt message stream from rank " + std::to_string(in.peer));
    header want = in.expected;
    want.fp.context = g.context();
    toolkit::check_header(want, g.rank(), f.head(), in.peer, w.algorithm);
    in.checked = true;
    tail += toolkit::wire::frame_bytes;
    consumed = true;
  }
  const std::size_t bytes = in.expected.bytes, total = pad(bytes);
  while (in.done < total && in.seen_head > tail) {
    const std::size_t pos = static_cast<std::size_t>(tail % cap);
    const std::size_t n = std::min({static_cast<std::size_t>(in.seen_head - tail), total - in.done, cap - pos});
    const std::size_t real = std::min(n, bytes - std::min(in.done, bytes));
    if (real) in.consume(ring + pos, in.done, real);
    tail += n;
    in.done += n;
    consumed = true;
  }
  if (consumed) {
    ends.tail.store(tail, std::memory_order_release);
    seg.ring_bell(from);
  }
  return in.checked && in.done == total;
}

inline bool room_changed(const segment& seg, const toolkit::group_map& g, const outgoing& out) {
  return seg.ends(seg.world_rank, g.world(out.peer)).tail.load(std::memory_order_acquire) != out.seen_tail;
}
inline bool data_arrived(const segment& seg, const toolkit::group_map& g, const incoming& in) {
  return seg.ends(g.world(in.peer), seg.world_rank).head.load(std::memory_order_acquire) != in.seen_head;
}

/// No unread message of an earlier collective of this communicator may wait in rank r's ring to
/// this rank: ranks that disagreed about a point-to-point schedule (two ranks that each took
/// itself for the root) finish it with messages nobody receives, and the windows never read the
/// rings. Reliable once r has posted a phase of the current call (its sends of every earlier
/// call were written before).
inline void check_ring(const segment& seg, const toolkit::group_map& g, int r, const fingerprint& fp,
                       const wait_context& w) {
  const int from = g.world(r), to = seg.world_rank;
  const std::uint64_t tail = seg.received[static_cast<std::size_t>(from)];
  if (seg.ends(from, to).head.load(std::memory_order_acquire) - tail < toolkit::wire::frame_bytes) return;
  toolkit::wire::frame f;
  std::memcpy(&f, seg.ring_data(from, to) + tail % seg.lay.opt.ring_bytes, sizeof f);
  const fingerprint theirs = f.head().fp;
  if (f.is(toolkit::wire::kind::message) && is_collective(static_cast<std::uint8_t>(theirs.coll)) &&
      theirs.context == g.context() && theirs.coll != collective::send_recv && theirs.seq <= fp.seq && theirs != fp)
    throw mismatch_error(toolkit::where({fp, 0}, w.algorithm) + ": " +
                         detail::describe_difference(fp, g.rank(), theirs, r) + "; rank " + std::to_string(r) +
                         "'s message of its " + std::string(collective_name(theirs.coll)) + " #" +
                         std::to_string(theirs.seq) + " to rank " + std::to_string(g.rank()) + " was never received");
}

}  // namespace tutti::detail::shm_impl
