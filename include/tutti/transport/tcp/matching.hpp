/// \file
/// Point-to-point matched by source and tag over tcp (`matched_p2p`), apart from the
/// collectives: one connection of its own per pair of ranks (the last of each pair's links,
/// after the `TUTTI_TCP_STREAMS` ones the collectives use, so a collective's receive never
/// meets a point-to-point frame) carries 64-byte frames (toolkit/p2p.hpp's `p2p_wire`), each
/// followed by its payload:
/// - `eager`: a message of at most `p2p_eager_bytes`, whole; its send completes once the
///   kernel has taken it, without a receive;
/// - `rts`: a larger message's envelope, numbered by its sender, answered by the receive that
///   takes it with `cts`, upon which the sender writes it in `data` pieces of `p2p_piece_bytes`
///   that the receiver reads straight into its buffer (or `refuse`, with the receive's dtype and
///   room: both sides fail with the same `mismatch_error`); `cancel` withdraws it when its
///   sender gives up;
/// - `wait`: what this rank waits for, for the wait-cycle check below; `failure`: why this
///   rank failed (`tcp::fail`), before it closes the connection.
/// Each process keeps the rest (`p2p_engine`, one per set of connections: the world's, each
/// group's): what it has still to write to each peer, what it is reading from each, the
/// receives posted and the messages arrived unmatched (eager ones read aside), matched as MPI
/// does, as over shm (shm/matching.hpp). Nothing runs in the background: whoever waits for or
/// tests a point-to-point request moves every pending one of its connections, and so does a
/// collective's wait of the same connections (`p2p_drive`).
///
/// Wait cycles: a rank that waits for its only pending operation, a receive not yet matched or
/// an announced rendezvous send, tells that peer so (`wait`, with how many messages it has read
/// from it, an eager one once its payload is in). Two ranks that wait for each other in the same direction (two such sends, or two
/// such receives), when each has read every message the other sent, can never go on: both raise
/// `mismatch_error` naming the pair at once. Longer cycles end at the deadline, naming the peer.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/detail/operation.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/toolkit/group_map.hpp"

namespace tutti::detail::tcp_impl {

struct connections;
struct p2p_engine;

/// A message of at most this many bytes goes eagerly (Open MPI's tcp eager limit; measured in
/// bench/RESULTS.md, "point-to-point").
inline constexpr std::size_t p2p_eager_bytes = std::size_t{64} << 10;
/// A rendezvous message is written in pieces of at most this many bytes, so that the answers to
/// other messages are not held back behind a large one.
inline constexpr std::size_t p2p_piece_bytes = std::size_t{256} << 10;

/// The point-to-point state of one set of connections in this process (see the file comment).
TUTTI_DECL std::shared_ptr<p2p_engine> p2p_make(const toolkit::group_map& g);

/// Posts a send or receive (`tcp::post_send`, `post_recv`): matched or queued, and every
/// pending operation moved as far as it goes now. Its state's `poll` moves them again and
/// keeps the deadline, the abort and the peers' connections.
TUTTI_DECL std::shared_ptr<operation_state> p2p_post_op(const std::shared_ptr<connections>& c, const p2p_post& p,
                                                        bool send);

/// Moves the pending point-to-point of `c` from a wait for something else (a collective's);
/// skipped while another thread holds the engine, or when nothing is pending. True when
/// something is (the wait then sleeps in short steps, so that it goes on moving).
TUTTI_DECL bool p2p_drive(connections& c) noexcept;

/// Lines for the flight record: this rank's sends and receives not yet complete.
TUTTI_DECL std::vector<std::string> p2p_pending(connections& c);

/// Tells every peer whose point-to-point stream is between frames why this rank failed
/// (`tcp::fail`, which then closes the connections); best effort.
TUTTI_DECL void p2p_fail(connections& c, std::string_view why) noexcept;

}  // namespace tutti::detail::tcp_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/tcp/matching.ipp"
#endif
