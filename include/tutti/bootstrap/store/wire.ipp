/// \file
/// Definitions for tutti/bootstrap/store/wire.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <cstdlib>

#include "tutti/bootstrap/store/wire.hpp"

namespace tutti::detail::store_impl {

TUTTI_DECL std::optional<client_hello> parse_hello(std::string_view in) {
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
  if (h.version != version) return h;  // refused by its version: nothing more is read
  if (in.size() < h.size + 4) return std::nullopt;
  const auto jlen = reader{in.substr(h.size)}.num<std::uint32_t>();
  if (jlen > max_job_id) throw malformed("job id of " + std::to_string(jlen) + " bytes");
  if (in.size() < h.size + 4 + jlen) return std::nullopt;
  h.job_id = in.substr(h.size + 4, jlen);
  h.size += 4 + jlen;
  return h;
}

TUTTI_DECL std::optional<request> parse_request(std::string_view in) {
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

TUTTI_DECL std::string add_to(std::string_view counter, std::int64_t delta) {
  const std::string text(counter);
  long long now = text.empty() ? 0 : std::strtoll(text.c_str(), nullptr, 10);
  long long sum = 0;
  if (__builtin_add_overflow(now, delta, &sum))
    throw malformed("add of " + std::to_string(delta) + " to " + std::to_string(now) + " overflows");
  return std::to_string(sum);
}

TUTTI_DECL reply_head parse_reply_head(std::string_view head) {
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
