/// \file
/// The rendezvous store's protocol (see tutti/bootstrap/store.hpp): its limits, opcodes and
/// statuses, and the pure parsers of a client's hello, a request and a reply's head, which the
/// server, the client and the fuzz target `tests/fuzz/store_message.cpp` call alike.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/bootstrap/net/codec.hpp"
#include "tutti/detail/attributes.hpp"

namespace tutti::detail::store_impl {

using namespace tutti::detail::net;  // the codec is the store's own as much as the mesh's

inline constexpr std::uint64_t magic = 0x3154532d69747475ull;  // "utti-ST1" little-endian
/// 2: the hello carries the client's job id after its token.
inline constexpr std::uint32_t version = 2;
inline constexpr std::size_t max_key = 4096;
inline constexpr std::size_t max_value = std::size_t{64} << 20;
inline constexpr std::size_t max_keys = 4096;  // per wait
inline constexpr std::size_t max_frame = max_value + max_key + 64;
inline constexpr std::size_t hello_fixed = 8 + 4 + 4 + 4 + 4;  // magic version rank world token_len
/// The longest hello: the server never buffers more than this (plus one read) before it.
inline constexpr std::size_t max_hello_bytes = hello_fixed + max_token + 4 + max_job_id;
/// A client that connected waits this long for the welcome, whatever its own timeout: a tutti
/// store answers a hello at once, so a silence this long means another program holds the port.
inline constexpr std::chrono::seconds welcome_within{5};

enum class opcode : std::uint8_t { set = 1, get = 2, wait = 3, add = 4 };
enum class status : std::uint8_t { ok = 0, timeout = 1, refused = 2, failed = 3 };

/// A client's hello: magic u64, version u32, rank i32, world i32, token, job id (u32 length +
/// bytes each). The job id is the job the client belongs to, empty where it does not know it (a
/// joiner, a tool, the ranks of a job a shrink or a grow starts, which sign in anonymously).
struct client_hello {
  std::uint32_t version = 0;
  std::int32_t rank = -1, world = 0;
  std::string_view token, job_id;  // point into the parsed bytes
  std::size_t size = 0;            // bytes it took
};

/// Parses the hello at the front of `in`: empty while incomplete; `malformed` for another magic
/// (stranger), a token longer than `max_token` or a job id longer than `max_job_id`, as soon as
/// its length has arrived. A hello of another version ends after its token (as version 1 laid
/// it out), so that the server can read it whole and refuse it, naming the versions.
TUTTI_DECL std::optional<client_hello> parse_hello(std::string_view in);

/// One request: a frame (u32 length, then the body: opcode u8 and its fields).
struct request {
  opcode op = opcode::set;
  std::string_view key, value;          // set, add, get (key)
  std::int64_t delta = 0;               // add
  std::uint64_t timeout_ms = 0;         // get, wait
  std::vector<std::string_view> keys;   // wait (at most max_keys)
  std::size_t size = 0;                 // bytes it took, length included
};

/// Parses the request at the front of `in`: empty while incomplete; `malformed` for a frame
/// longer than `max_frame` (said by its first 4 bytes, before the rest is buffered), a field
/// running past the frame or past its bound, bytes left over, an unknown operation.
TUTTI_DECL std::optional<request> parse_request(std::string_view in);

/// `add` on a counter's text: the new value, or `malformed` when it would overflow 64 bits
/// (the counter keeps its value).
TUTTI_DECL std::string add_to(std::string_view counter, std::int64_t delta);

/// The head of the store's reply to a request: status u8, u32 payload length (at most
/// `max_value`: the largest value a client may set).
struct reply_head {
  status st = status::ok;
  std::uint32_t payload_bytes = 0;
};
inline constexpr std::size_t reply_head_bytes = 1 + 4;
TUTTI_DECL reply_head parse_reply_head(std::string_view head);

}  // namespace tutti::detail::store_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/bootstrap/store/wire.ipp"
#endif
