/// \file
/// Point-to-point matched by source and tag over shm (`matched_p2p`), apart from the
/// collectives: a byte ring of its own per ordered pair of ranks in the segment (layout.hpp)
/// carries frames of 64 bytes, each followed by its payload and found by the reader through its
/// stamp (toolkit/p2p.hpp), so that a short message is one cache line moved between the ranks:
/// - `eager`: a message of at most `p2p_eager_bytes`, whole; the send completes once it is in
///   the ring (`short_eager`: one of at most 16 bytes, inside its frame);
/// - `rts` (ready to send): a larger message's envelope, numbered by its sender (`cancel` with
///   its number withdraws it, or fails the receive that took it, when the sender gives up); the
///   receive that takes it answers
/// - `cts` (clear to send), upon which the sender writes it in `data` pieces that the receiver
///   copies straight into its buffer, or `refuse`, with the receive's dtype and room, when the
///   message does not fit it (both sides then fail with the same `mismatch_error`).
/// Each process keeps the rest (`p2p_engine`, one per segment): the sends waiting for room in a
/// ring, the announced sends waiting for an answer, the receives posted and the messages that
/// arrived before a receive took them (eager ones copied aside), matched as MPI does: a receive
/// takes the earliest arrived message of its source (or any) and tag (or any), an arriving
/// message the earliest posted receive that takes it, so one sender's messages of one tag are
/// received in the order sent. Nothing runs in the background: whoever waits for or tests a
/// point-to-point request moves every pending one of its communicator (`progress`), and so does
/// a wait of a collective of the same transport before it sleeps (`p2p_drive`).
///
/// A rank that waits for its only pending operation, to or from one peer, publishes so in its
/// control block; ranks that wait for each other in a cycle no wait can complete (two blocking
/// sends of rendezvous size, each before the other's receive; two receives, each before the
/// other's send), seen twice unchanged with nothing in their rings, raise `mismatch_error`
/// naming the cycle at once instead of timing out.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/detail/futex.hpp"
#include "tutti/detail/operation.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/shm/rings.hpp"
#include "tutti/transport/shm/segment.hpp"
#include "tutti/transport/toolkit/group_map.hpp"

namespace tutti::detail::shm_impl {

/// A message of at most this many bytes is copied into the ring and its send completes without
/// a receive: the largest piece a frame holds, as a rendezvous would pass the same bytes through
/// the ring after a round trip (measured in bench/RESULTS.md: from 16 to 32 KiB, 1.1 us less
/// latency and 1.3x the bandwidth than 16 KiB gave).
inline constexpr std::size_t p2p_eager_bytes = std::size_t{32} << 10;
/// A rendezvous message is written in pieces of at most this many bytes.
inline constexpr std::size_t p2p_piece_bytes = std::size_t{32} << 10;
static_assert(p2p_eager_bytes <= p2p_piece_bytes, "an eager message goes in one frame");

struct p2p_engine;

/// A posted send or receive. Its request's state is a member (one allocation per operation):
/// the request holds the operation, and so does the engine while it is pending.
struct p2p_op : std::enable_shared_from_this<p2p_op> {
  bool send = false;
  int peer = 0;  // group rank; a receive's may be any_source
  int tag = 0;   // a receive's may be any_tag
  dtype type;
  std::size_t count = 0, bytes = 0;
  std::byte* data = nullptr;
  std::uint64_t seq = 0;   // a rendezvous send's number; a receive's: the message's it took
  int from = -1;           // a receive that took a rendezvous message: its sender
  std::size_t moved = 0;   // rendezvous bytes written (send) or arrived (receive)
  std::size_t expect = 0;  // a receive that took a rendezvous message: the message's bytes
  std::chrono::steady_clock::time_point posted = std::chrono::steady_clock::now();
  operation_state state;
  // What its poll needs: where it lives, how long it may wait, and what the wait has seen.
  std::shared_ptr<segment> seg;
  std::shared_ptr<p2p_engine> eng;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<const std::atomic<bool>> aborted;
  std::chrono::steady_clock::time_point deadline{}, look{};
  unsigned polls = 0;
  std::vector<std::uint64_t> cycle;  // the wait cycle seen at the previous look
};

/// A message that arrived before a receive took it.
struct p2p_arrived {
  int src = 0, tag = 0;
  dtype type;
  std::uint64_t count = 0, bytes = 0;
  bool rendezvous = false;
  std::uint64_t seq = 0;          // rendezvous: the sender's number
  std::vector<std::byte> payload;  // eager: the message
};

/// A control frame waiting for room in the ring to its peer (`cts` or `refuse`).
struct p2p_control {
  std::uint32_t kind;
  std::uint64_t seq;
  dtype type;
  std::uint64_t room;
};

/// One process's point-to-point state on one segment (see the file comment).
struct p2p_engine {
  explicit p2p_engine(toolkit::group_map group)
      : g(std::move(group)), sends(n()), streaming(n()), controls(n()), head(n()), tail(n()), seen_tail(n()),
        next_seq(n()) {}
  std::size_t n() const { return static_cast<std::size_t>(g.size()); }
  const toolkit::group_map g;  // the transport's
  detail::spin_mutex mu;  // short sections: the fast path takes it on every message
  std::vector<std::deque<std::shared_ptr<p2p_op>>> sends;      // per peer: not yet in the ring (or its rts not)
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<p2p_op>> announced;  // (peer, seq): rts written
  std::vector<std::deque<std::shared_ptr<p2p_op>>> streaming;  // per peer: cleared, pieces being written
  std::vector<std::deque<p2p_control>> controls;               // per peer
  std::deque<std::shared_ptr<p2p_op>> receives;                // posted, not matched
  std::deque<p2p_arrived> arrived;                             // arrived, not matched
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<p2p_op>> filling;  // (sender, seq): matched, data coming
  std::vector<std::uint64_t> head, tail;  // per peer (world rank): bytes written to it, read from it
  std::vector<std::uint64_t> seen_tail;   // per peer: its tail of the ring to it, as last read
  std::vector<std::uint64_t> next_seq;    // per peer: the next rendezvous number
  /// The operation this rank publishes it is blocked in (`control::p2p_wait`), for the peers'
  /// wait-cycle check: a wait (not a test) on the only pending operation, to a given peer.
  std::weak_ptr<p2p_op> published;
  bool is_published = false;
  std::uint32_t publications = 0;
};

/// Posts a send or receive (`shm::post_send`, `post_recv`): matched or queued, and every
/// pending operation moved as far as it can go now. Returns the operation's state, whose `poll`
/// moves them again and keeps the deadline, the abort and the peers' liveness.
TUTTI_DECL std::shared_ptr<operation_state> p2p_post_op(const std::shared_ptr<segment>& seg,
                                                        const std::shared_ptr<p2p_engine>& eng, const p2p_post& p,
                                                        bool send);

/// The blocking calls' fast path (`shm::try_send_now`, `try_recv_now`; the contract is
/// `p2p_fast_path`'s): an eager message to a peer with no send queued before it is written
/// into the ring, no operation made; a receive takes an eager message that fits, arrived or
/// arriving within `p2p_fast_spins` looks at the rings, straight into its buffer. False: the
/// posted path must run.
TUTTI_DECL bool p2p_send_now(segment& seg, p2p_engine& eng, const p2p_post& p);
TUTTI_DECL bool p2p_recv_now(segment& seg, p2p_engine& eng, const p2p_post& p, recv_status& got);
/// How many looks at its rings a blocking receive's fast path takes before it posts (with a
/// pause between them: some microseconds, well within a ping-pong's round trip).
inline constexpr int p2p_fast_spins = 1024;

/// Moves this process's pending point-to-point from a wait for something else (a collective's,
/// before it sleeps), so that a rendezvous send posted before a collective goes on while the
/// receiver waits for it, and reads what its rings hold unread (a sender may wait for the
/// room); skipped while another thread holds the engine.
TUTTI_DECL void p2p_drive(segment& seg, p2p_engine& eng) noexcept;

/// Lines for the flight record: this rank's sends and receives not yet complete.
TUTTI_DECL std::vector<std::string> p2p_pending(p2p_engine& eng);

}  // namespace tutti::detail::shm_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/matching.ipp"
#endif
