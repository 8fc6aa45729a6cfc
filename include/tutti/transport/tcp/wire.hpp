/// \file
/// The tcp transport's wire, without Asio: the constants, the mesh hello a rank opens each
/// connection with, and the 64-byte frame in front of every payload and notice
/// (`toolkit::wire::frame`). The parsers are pure functions of the bytes received, called by the
/// transport and by the fuzz target tests/fuzz/tcp_frame.cpp alike (which includes this header
/// alone). A malformed input raises `net::malformed` (`stranger` for a wrong magic); none
/// of them allocates for a length it read before checking it against its cap.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/net/codec.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/toolkit/errors.hpp"
#include "tutti/transport/toolkit/wire.hpp"

namespace tutti::detail::tcp_impl {

inline constexpr std::uint64_t hello_magic = 0x6f6c6c6569747475ull;  // "uttiello"
/// 3: a pair of ranks has a connection for point-to-point after its streams (tcp/matching.hpp);
/// 2: the 64-byte frame carries a 32-bit magic and the fingerprint's fixed 52-byte encoding;
/// plus 1000 times the collective table's wire version (core/collective.hpp), so that builds
/// whose collectives travel under other values refuse each other at the hello.
inline constexpr std::uint32_t hello_version = 3 + 1000 * collective_wire_version;
/// A receive still without its header after this long tells the peer what it waits for.
inline constexpr std::chrono::milliseconds waiting_notice_after{20};
/// The longest a failing rank waits for its peers to acknowledge its failure notice (`tcp::fail`).
inline constexpr std::chrono::milliseconds notice_linger{1000};
inline constexpr std::size_t piece_bytes = std::size_t{256} << 10;  // recv_with hands pieces of this size

/// A rank's hello on a new mesh connection: magic u64, version u32, from, world, stream,
/// streams (i32 each), then the job id and the token (u32 length + bytes each).
struct mesh_hello {
  std::uint32_t version = 0;
  std::int32_t from = 0, world = 0, stream = 0, streams = 0;
  std::string_view job_id, token;  // point into the parsed bytes
  std::size_t size = 0;            // bytes it took
};
using net::max_job_id;  // TUTTI_JOB_ID; tuttirun's are far shorter
inline constexpr std::size_t hello_fixed = 8 + 4 + 4 * 4;
/// The longest hello: the acceptor never buffers more than this (plus one read) per connection.
inline constexpr std::size_t max_hello_bytes = hello_fixed + 4 + max_job_id + 4 + net::max_token;

TUTTI_DECL std::string hello_text(int from, int world, int stream, int streams, const std::string& job,
                                  const std::string& token);

/// A hello's length-prefixed field (u32 length + bytes) from `r` into `out`: false while
/// incomplete; `malformed` as soon as a length over `cap` has arrived.
TUTTI_DECL bool hello_field(net::reader& r, std::string_view& out, std::size_t cap, const char* what);

/// Parses the hello at the front of `in`: empty while incomplete; `malformed` for another magic,
/// or a job id or token longer than its cap (as soon as its length has arrived).
TUTTI_DECL std::optional<mesh_hello> parse_mesh_hello(std::string_view in);

/// A rank's hello on a connection of a group's own (`tcp::sub`): magic u64, version u32, from
/// (the world rank), stream (i32 each), the group's context u64, then the job id and the token.
inline constexpr std::uint64_t group_hello_magic = 0x7075726769747475ull;  // "uttigrup"
struct group_hello {
  std::uint32_t version = 0;
  std::int32_t from = 0, stream = 0;
  std::uint64_t context = 0;
  std::string_view job_id, token;
};
inline constexpr std::size_t group_hello_fixed = 8 + 4 + 4 + 4 + 8;
inline constexpr std::size_t max_group_hello_bytes = group_hello_fixed + 4 + max_job_id + 4 + net::max_token;

TUTTI_DECL std::string group_hello_text(int from, int stream, std::uint64_t context, const std::string& job,
                                        const std::string& token);

/// Parses a group hello: empty while incomplete; `malformed` for another magic or a field over
/// its cap.
TUTTI_DECL std::optional<group_hello> parse_group_hello(std::string_view in);

/// What a 64-byte frame says: a message (its header), or a notice (failure, stall, waiting, note)
/// and the length of the text that follows it, cut to `toolkit::max_notice_text`. A message's
/// byte count is never allocated for: the receiver reads into the buffer of the size it
/// expects, and any other count is a `mismatch_error` before a payload byte moves.
struct frame_head {
  toolkit::wire::kind kind = toolkit::wire::kind::message;
  header h;
  std::size_t text_bytes = 0;
};

/// Parses a frame; `malformed` for another magic, or a message of a collective that does not
/// exist (error messages name the collective, so it must be one).
TUTTI_DECL frame_head parse_frame_head(const toolkit::wire::frame& f);

/// One line on stderr for a connection the acceptor drops: the peer's address and why, never
/// the token. At most `max_logged` per start-up.
void log_refusal(int rank, const std::string& from, const std::string& why, int& logged);

}  // namespace tutti::detail::tcp_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/tcp/wire.ipp"
#endif
