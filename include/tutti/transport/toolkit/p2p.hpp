/// \file
/// The texts of point-to-point matched by source and tag (`matched_p2p`), the same on every
/// transport that has it: the header its timeouts describe, the mismatch a message makes in a
/// receive, and a pending operation's line in the flight record; and the frame shm's and tcp's
/// point-to-point streams carry.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tutti/core/dtype.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/detail/attributes.hpp"

namespace tutti::toolkit {

/// The 64-byte frame of a point-to-point stream (shm's rings, tcp's own connection), followed
/// by its payload (`payload()` bytes; shm pads it to 64). shm/matching.hpp and tcp/matching.hpp
/// say what each kind means; `wait` and `failure` travel over tcp only.
namespace p2p_wire {

/// `cancel`: the sender gave a rendezvous message up; `withdrawn`: the receiver gave up one it
/// had cleared (`cts`), so the sender stops writing it and fails; `short_eager` (shm only): an
/// eager message of at most `short_bytes`, carried in the frame itself (from `seq` on).
enum kind : std::uint32_t {
  eager = 1, rts = 2, cts = 3, data = 4, refuse = 5, cancel = 6, wait = 7, failure = 8, withdrawn = 9,
  short_eager = 10
};
inline constexpr std::uint32_t magic = 0x32703270;  // "p2p2"

struct frame {
  std::uint32_t magic = p2p_wire::magic, kind = 0;
  std::int32_t tag = 0;      // eager, rts: the message's; wait: the group rank waited for
  std::uint32_t type_id = 0, type_size = 0, unused = 0;
  std::uint64_t count = 0;   // eager, rts: elements; refuse: the receive's room; wait: 1 send, 2 receive, 0 none
  std::uint64_t bytes = 0;   // eager, data, failure: the payload after the frame; rts: the message's
  std::uint64_t seq = 0;     // rts, cts, data, refuse, cancel, withdrawn: the sender's number of the message; wait: the
                             // messages (eager, rts) read from the rank waited for
  std::uint64_t offset = 0;  // data: where the piece goes in the message
  /// shm: the frame's place in its ring's stream plus one, stored last (release): a reader that
  /// finds it where it expects its next frame has the frame and its payload whole.
  std::uint64_t stamp = 0;
  std::size_t payload() const {
    return kind == eager || kind == data || kind == failure ? static_cast<std::size_t>(bytes) : 0;
  }
};
static_assert(sizeof(frame) == 64);
/// The most bytes a `short_eager` frame carries (in `seq` and `offset`).
inline constexpr std::size_t short_bytes = 16;
inline constexpr std::size_t short_at = offsetof(frame, seq);
inline constexpr std::size_t stamp_at = offsetof(frame, stamp);

}  // namespace p2p_wire

/// The header a send or receive's texts describe: send/recv, its dtype, count and tag (none
/// printed for `any_tag`).
header p2p_header(dtype type, std::size_t count, int tag, std::size_t bytes);

/// Whether a message of `sent_count` elements of `sent` fits a receive of `room` elements of
/// `buffer` (one dtype, no more elements): what `p2p_mismatch` explains when it does not.
inline bool p2p_fits(dtype sent, std::uint64_t sent_count, dtype buffer, std::size_t room) {
  return sent.id == buffer.id && sent.size == buffer.size && sent_count <= room;
}

/// What is wrong when rank `sender` sent `sent_count` elements of `sent` with `tag` into rank
/// `receiver`'s buffer of `room` elements of `buffer` (group ranks): another dtype, or more
/// elements than the buffer holds; empty when it fits (a shorter message is received).
std::string p2p_mismatch(int sender, int receiver, int tag, dtype sent, std::uint64_t sent_count, dtype buffer,
                         std::size_t room);

/// A pending operation's line for the flight record: "recv from rank 1 tag=5 (16 bytes),
/// posted 2.1 ms ago" (`peer`: its name, or "any rank").
std::string p2p_pending_line(bool send, std::string_view peer, int tag, std::size_t bytes,
                             std::chrono::steady_clock::duration age);

}  // namespace tutti::toolkit

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/toolkit/p2p.ipp"
#endif
