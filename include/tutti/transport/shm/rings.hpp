/// \file
/// Point to point over shm: one byte ring per ordered pair of ranks (head written only by the
/// sender, tail only by the receiver, each on its own cache line). A message is a 64-byte header
/// frame (`toolkit::wire::frame`: fingerprint with the communicator's context, byte count) and
/// the payload padded to 64 bytes; it is written in pieces as room appears, and a receiver hands
/// what has arrived to its consumer straight out of the ring (`zero_copy_recv`).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tutti/detail/attributes.hpp"
#include "tutti/detail/copy.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/byte_consumer.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/shm/segment.hpp"
#include "tutti/transport/toolkit/group_map.hpp"

namespace tutti::detail::shm_impl {

constexpr std::size_t pad(std::size_t n) { return (n + 63) & ~std::size_t{63}; }
/// A sender rings the receiver's bell after each piece this large, so it can start on it.
inline constexpr std::size_t piece_limit = std::size_t{64} << 10;
/// A message (frame and padded payload) up to this size is written and published in one step
/// where the ring has room for all of it; a larger one piece by piece.
inline constexpr std::size_t small_message_bytes = 4096;

struct copier {
  std::byte* dst;
  void operator()(const std::byte* src, std::size_t offset, std::size_t n) const { copy_host(dst + offset, src, n); }
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
TUTTI_DECL bool progress(segment& seg, const toolkit::group_map& g, outgoing& out);

/// Consumes what has arrived of `in`; true when the whole message is consumed. The header is
/// checked (`toolkit::check_header`) before any payload byte is handed on.
TUTTI_DECL bool progress(segment& seg, const toolkit::group_map& g, incoming& in, const wait_context& w);

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
TUTTI_DECL void check_ring(const segment& seg, const toolkit::group_map& g, int r, const fingerprint& fp,
                           const wait_context& w);

}  // namespace tutti::detail::shm_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/rings.ipp"
#endif
