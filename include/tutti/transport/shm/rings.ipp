/// \file
/// Definitions for tutti/transport/shm/rings.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>

#include "tutti/core/error.hpp"
#include "tutti/transport/shm/rings.hpp"
#include "tutti/transport/toolkit/errors.hpp"
#include "tutti/transport/toolkit/wire.hpp"

namespace tutti::detail::shm_impl {

TUTTI_DECL bool progress(segment& seg, const toolkit::group_map& g, outgoing& out) {
  const int me = seg.world_rank, to = g.world(out.peer);
  auto& ends = seg.ends(me, to);
  std::byte* ring = seg.ring_data(me, to);
  const std::size_t cap = seg.lay.opt.ring_bytes;
  std::uint64_t& head = seg.sent[static_cast<std::size_t>(to)];
  const std::size_t total = toolkit::wire::frame_bytes + pad(out.h.bytes);
  out.seen_tail = ends.tail.load(std::memory_order_acquire);
  if (out.done == 0 && total <= small_message_bytes) {
    // A small message whose frame and payload fit at once, without wrapping: both written and
    // published with one store of the head (the receiver reads the frame and its data together).
    const std::size_t pos = static_cast<std::size_t>(head % cap);
    if (cap - static_cast<std::size_t>(head - out.seen_tail) >= total && cap - pos >= total) {
      toolkit::wire::frame::put(toolkit::wire::kind::message, out.h, g.context(), ring + pos);
      if (out.h.bytes) copy_host(ring + pos + toolkit::wire::frame_bytes, out.data, out.h.bytes);
      head += total;
      out.done = total;
      ends.head.store(head, std::memory_order_release);
      seg.ring_bell(to);
      return true;
    }
  }
  bool published = false;
  while (out.done < total) {
    const std::size_t room = cap - static_cast<std::size_t>(head - out.seen_tail);
    if (room < 64) break;
    const std::size_t pos = static_cast<std::size_t>(head % cap);
    std::size_t n;
    if (out.done == 0) {
      toolkit::wire::frame::put(toolkit::wire::kind::message, out.h, g.context(), ring + pos);
      n = toolkit::wire::frame_bytes;
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

/// A frame not the one `in` expects: not a message frame at all, or a header that differs.
[[noreturn]] TUTTI_COLD TUTTI_DECL void refuse_frame(const std::byte* at, const toolkit::group_map& g,
                                                     const incoming& in, const wait_context& w) {
  toolkit::wire::frame f;
  std::memcpy(&f, at, sizeof f);
  if (!f.is(toolkit::wire::kind::message))
    throw error(errc::aborted, "shm: corrupt message stream from rank " + std::to_string(in.peer));
  header want = in.expected;
  want.fp.context = g.context();
  toolkit::check_header(want, g.rank(), f.head(), in.peer, w.algorithm);
  throw std::logic_error("shm: a frame that matches did not match");  // (check_header threw)
}

TUTTI_DECL bool progress(segment& seg, const toolkit::group_map& g, incoming& in, const wait_context& w) {
  const int me = seg.world_rank, from = g.world(in.peer);
  auto& ends = seg.ends(from, me);
  const std::byte* ring = seg.ring_data(from, me);
  const std::size_t cap = seg.lay.opt.ring_bytes;
  std::uint64_t& tail = seg.received[static_cast<std::size_t>(from)];
  in.seen_head = ends.head.load(std::memory_order_acquire);
  bool consumed = false;
  const std::size_t bytes = in.expected.bytes, total = pad(bytes);
  if (!in.checked) {
    if (in.seen_head - tail < toolkit::wire::frame_bytes) return false;
    const std::byte* at = ring + tail % cap;
    if (!toolkit::wire::frame::matches(at, toolkit::wire::kind::message, in.expected, g.context())) [[unlikely]]
      refuse_frame(at, g, in, w);
    in.checked = true;
    const std::size_t whole = toolkit::wire::frame_bytes + total;
    if (in.seen_head - tail >= whole && cap - static_cast<std::size_t>(tail % cap) >= whole) {
      // The whole message is there in one piece (a small one, as a sender writes it): consumed
      // and released at once.
      if (bytes) in.consume(at + toolkit::wire::frame_bytes, 0, bytes);
      in.done = total;
      tail += whole;
      ends.tail.store(tail, std::memory_order_release);
      seg.ring_bell(from);
      return true;
    }
    tail += toolkit::wire::frame_bytes;
    consumed = true;
  }
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

TUTTI_DECL void check_ring(const segment& seg, const toolkit::group_map& g, int r, const fingerprint& fp,
                           const wait_context& w) {
  const int from = g.world(r), to = seg.world_rank;
  const std::uint64_t tail = seg.received[static_cast<std::size_t>(from)];
  if (seg.ends(from, to).head.load(std::memory_order_acquire) - tail < toolkit::wire::frame_bytes) return;
  toolkit::wire::frame f;
  std::memcpy(&f, seg.ring_data(from, to) + tail % seg.lay.opt.ring_bytes, sizeof f);
  const fingerprint theirs = f.head().fp;
  if (f.is(toolkit::wire::kind::message) && is_collective(static_cast<std::uint8_t>(theirs.coll)) &&
      theirs.context == g.context() && theirs.coll != collective::send_recv && theirs.seq <= fp.seq && theirs != fp)
    toolkit::throw_left_behind({fp, 0}, w.algorithm, fp, g.rank(), theirs, r,
                               "; rank " + std::to_string(r) + "'s message of its " +
                                   std::string(collective_name(theirs.coll)) + " #" + std::to_string(theirs.seq) +
                                   " to rank " + std::to_string(g.rank()) + " was never received");
}

}  // namespace tutti::detail::shm_impl
