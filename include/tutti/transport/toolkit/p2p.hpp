/// \file
/// The texts of point-to-point matched by source and tag (`matched_p2p`), the same on every
/// transport that has it: the header its timeouts describe, the mismatch a message makes in a
/// receive, and a pending operation's line in the flight record.
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

/// The header a send or receive's texts describe: send/recv, its dtype, count and tag (none
/// printed for `any_tag`).
header p2p_header(dtype type, std::size_t count, int tag, std::size_t bytes);

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
