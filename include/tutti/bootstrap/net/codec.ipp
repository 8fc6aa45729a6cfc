/// \file
/// Definitions for tutti/bootstrap/net/codec.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <algorithm>

#include "tutti/bootstrap/net/codec.hpp"

namespace tutti::detail::net {

TUTTI_DECL std::string_view reader::str(std::size_t limit) {
  const auto n = num<std::uint32_t>();
  if (!ok || n > limit || n > in.size()) {
    ok = false;
    in = {};
    return {};
  }
  auto s = in.substr(0, n);
  in.remove_prefix(n);
  return s;
}

TUTTI_DECL bool same_token(std::string_view theirs, std::string_view ours) {
  unsigned char diff = theirs.size() == ours.size() ? 0 : 1;
  const std::size_t n = std::min(theirs.size(), ours.size());
  for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(theirs[i] ^ ours[i]);
  // an opaque barrier: the compiler may not turn the loop back into an early exit
  asm volatile("" : "+r"(diff));
  return diff == 0;
}

TUTTI_DECL answer_head parse_answer_head(std::string_view head, std::uint64_t want_magic) {
  reader r{head};
  if (head.size() != answer_head_bytes) throw malformed("answer head of " + std::to_string(head.size()) + " bytes");
  if (r.num<std::uint64_t>() != want_magic) throw malformed("wrong magic", true);
  answer_head a;
  a.status = r.num<std::uint8_t>();
  a.text_bytes = r.num<std::uint32_t>();
  if (a.text_bytes > max_answer_text) throw malformed("answer text of " + std::to_string(a.text_bytes) + " bytes");
  return a;
}

}  // namespace tutti::detail::net
