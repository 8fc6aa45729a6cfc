/// \file
/// Definitions for tutti/transport/toolkit/errors.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <cstdio>

#include "tutti/transport/toolkit/errors.hpp"

namespace tutti::toolkit {

TUTTI_COLD TUTTI_DECL std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

TUTTI_COLD TUTTI_DECL std::string where(const header& h, std::string_view algo) {
  return std::string(collective_name(h.fp.coll)) + "(" + std::string(algo) + ")";
}

TUTTI_COLD TUTTI_DECL std::string amount_text(std::uint64_t bytes, std::uint8_t elem_size) {
  if (elem_size == 0 || bytes % elem_size != 0) return std::to_string(bytes) + " bytes";
  const std::uint64_t n = bytes / elem_size;
  return std::to_string(n) + (n == 1 ? " element (" : " elements (") + std::to_string(bytes) + " bytes)";
}

[[noreturn]] TUTTI_COLD TUTTI_DECL void throw_header_mismatch(const header& expected, int me, const header& got,
                                                              int peer, std::string_view algo) {
  if (expected.fp != got.fp)
    throw header_mismatch(where(expected, algo) + ": " + detail::describe_difference(expected.fp, me, got.fp, peer),
                          expected, got, me, peer);
  throw header_mismatch(where(expected, algo) + ": " + rank_name(me) + " expected " +
                            amount_text(expected.bytes, expected.fp.elem_size) + " from " + rank_name(peer) +
                            ", which sent " + amount_text(got.bytes, got.fp.elem_size),
                        expected, got, me, peer);
}

[[noreturn]] TUTTI_COLD TUTTI_DECL void throw_left_behind(const header& h, std::string_view algo,
                                                          const fingerprint& mine, int me, const fingerprint& theirs,
                                                          int peer, std::string_view extra) {
  throw mismatch_error(where(h, algo) + ": " + detail::describe_difference(mine, me, theirs, peer) + std::string(extra));
}

TUTTI_COLD TUTTI_DECL std::string timeout_text(const header& h, std::string_view algo, std::string_view me,
                                               std::chrono::milliseconds timeout, std::string_view doing,
                                               std::string_view peer) {
  return where(h, algo) + ": " + std::string(me) + " timed out after " + seconds_text(timeout) + " waiting " +
         std::string(doing) + " " + std::string(peer) + " (" + std::to_string(h.bytes) + " bytes, " +
         detail::fingerprint_summary(h.fp) + ")";
}

TUTTI_COLD TUTTI_DECL std::string peer_failed_text(const header& h, std::string_view algo, std::string_view peer,
                                                   std::string_view me, std::string_view reason,
                                                   std::string_view doing) {
  return where(h, algo) + ": " + std::string(peer) + " failed while " + std::string(me) + " " + std::string(doing) +
         ": " + std::string(reason);
}

TUTTI_COLD TUTTI_DECL std::string notice_text(std::string_view reason, std::size_t limit) {
  if (reason.size() <= limit) return std::string(reason);
  constexpr std::size_t marker = 40;  // room for " [cut: N more bytes]"
  std::size_t cut = limit > marker ? limit - marker : limit / 2;
  // Not inside a UTF-8 sequence, and at a space when there is one in the last stretch.
  while (cut > 0 && (static_cast<unsigned char>(reason[cut]) & 0xc0) == 0x80) --cut;
  if (const auto space = reason.rfind(' ', cut); space != std::string_view::npos && space + 80 > cut) cut = space;
  return std::string(reason.substr(0, cut)) + " [cut: " + std::to_string(reason.size() - cut) + " more bytes]";
}

}  // namespace tutti::toolkit
