/// \file
/// The rendezvous store's protocol (see tutti/bootstrap/store.hpp): its limits, opcodes and
/// statuses, and the pure parsers of a client's hello, a request and a reply's head, which the
/// server, the client and the fuzz target `tests/fuzz/store_message.cpp` call alike.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/bootstrap/net/codec.hpp"

namespace tutti::detail::store_impl {

using namespace tutti::detail::net;  // the codec is the store's own as much as the mesh's

inline constexpr std::uint64_t magic = 0x3154532d69747475ull;  // "utti-ST1" little-endian
inline constexpr std::uint32_t version = 1;
inline constexpr std::size_t max_key = 4096;
inline constexpr std::size_t max_value = std::size_t{64} << 20;
inline constexpr std::size_t max_keys = 4096;  // per wait
inline constexpr std::size_t max_frame = max_value + max_key + 64;
inline constexpr std::size_t hello_fixed = 8 + 4 + 4 + 4 + 4;  // magic version rank world token_len
/// A client that connected waits this long for the welcome, whatever its own timeout: a tutti
/// store answers a hello at once, so a silence this long means another program holds the port.
inline constexpr std::chrono::seconds welcome_within{5};

enum class opcode : std::uint8_t { set = 1, get = 2, wait = 3, add = 4 };
enum class status : std::uint8_t { ok = 0, timeout = 1, refused = 2, failed = 3 };

/// A client's hello: magic u64, version u32, rank i32, world i32, token (u32 length + bytes).
struct client_hello {
  std::uint32_t version = 0;
  std::int32_t rank = -1, world = 0;
  std::string_view token;  // points into the parsed bytes
  std::size_t size = 0;    // bytes it took
};

/// Parses the hello at the front of `in`: empty while incomplete; `malformed` for another magic
/// (stranger) or a token longer than `max_token`, as soon as the fixed part has arrived.
inline std::optional<client_hello> parse_hello(std::string_view in) {
  if (in.size() < hello_fixed) return std::nullopt;
  reader r{in};
  if (r.num<std::uint64_t>() != magic) throw malformed("not a tutti store client (wrong magic)", true);
  client_hello h;
  h.version = r.num<std::uint32_t>();
  h.rank = r.num<std::int32_t>();
  h.world = r.num<std::int32_t>();
  const auto tlen = r.num<std::uint32_t>();
  if (tlen > max_token) throw malformed("token of " + std::to_string(tlen) + " bytes");
  if (in.size() < hello_fixed + tlen) return std::nullopt;
  h.token = in.substr(hello_fixed, tlen);
  h.size = hello_fixed + tlen;
  return h;
}

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
inline std::optional<request> parse_request(std::string_view in) {
  if (in.size() < 4) return std::nullopt;
  reader lr{in};
  const auto len = lr.num<std::uint32_t>();
  if (len > max_frame) throw malformed("frame of " + std::to_string(len) + " bytes");
  if (in.size() < 4 + std::size_t{len}) return std::nullopt;
  reader r{in.substr(4, len)};
  request q;
  q.size = 4 + std::size_t{len};
  const auto o = r.num<std::uint8_t>();
  q.op = static_cast<opcode>(o);
  switch (q.op) {
    case opcode::set:
      q.key = r.str(max_key);
      q.value = r.str(max_value);
      if (!r.ok || !r.in.empty()) throw malformed("set");
      return q;
    case opcode::add:
      q.key = r.str(max_key);
      q.delta = r.num<std::int64_t>();
      if (!r.ok || !r.in.empty()) throw malformed("add");
      return q;
    case opcode::get:
    case opcode::wait: {
      q.timeout_ms = r.num<std::uint64_t>();
      if (q.op == opcode::get) {
        q.keys.push_back(r.str(max_key));
      } else {
        const auto n = r.num<std::uint32_t>();
        if (n > max_keys) throw malformed("wait for " + std::to_string(n) + " keys");
        for (std::uint32_t i = 0; i < n && r.ok; ++i) q.keys.push_back(r.str(max_key));
      }
      // 2^40 ms is 35 years: longer is no deadline anyone meant, and would overflow the clock.
      if (!r.ok || !r.in.empty() || q.timeout_ms > (std::uint64_t{1} << 40)) throw malformed("get/wait");
      if (q.op == opcode::get) q.key = q.keys[0];
      return q;
    }
  }
  throw malformed("unknown operation " + std::to_string(o));
}

/// `add` on a counter's text: the new value, or `malformed` when it would overflow 64 bits
/// (the counter keeps its value).
inline std::string add_to(std::string_view counter, std::int64_t delta) {
  const std::string text(counter);
  long long now = text.empty() ? 0 : std::strtoll(text.c_str(), nullptr, 10);
  long long sum = 0;
  if (__builtin_add_overflow(now, delta, &sum))
    throw malformed("add of " + std::to_string(delta) + " to " + std::to_string(now) + " overflows");
  return std::to_string(sum);
}

/// The head of the store's reply to a request: status u8, u32 payload length (at most
/// `max_value`: the largest value a client may set).
struct reply_head {
  status st = status::ok;
  std::uint32_t payload_bytes = 0;
};
inline constexpr std::size_t reply_head_bytes = 1 + 4;
inline reply_head parse_reply_head(std::string_view head) {
  if (head.size() != reply_head_bytes) throw malformed("reply head of " + std::to_string(head.size()) + " bytes");
  reader r{head};
  reply_head h;
  const auto st = r.num<std::uint8_t>();
  h.payload_bytes = r.num<std::uint32_t>();
  if (st > static_cast<std::uint8_t>(status::failed)) throw malformed("reply status " + std::to_string(st));
  if (h.payload_bytes > max_value) throw malformed("reply of " + std::to_string(h.payload_bytes) + " bytes");
  h.st = static_cast<status>(st);
  return h;
}

}  // namespace tutti::detail::store_impl
