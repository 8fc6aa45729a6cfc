/// \file
/// Definitions for tutti/transport/toolkit/errors.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <cstdio>
#include <exception>
#include <iterator>

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
  throw fingerprint_mismatch(where(h, algo) + ": " + detail::describe_difference(mine, me, theirs, peer) + std::string(extra),
                             mine, me, theirs, peer);
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

namespace {
constexpr std::string_view notice_kinds[] = {"", "timeout_error", "peer_lost", "mismatch_error", "config_error", "usage_error", "aborted"};
}  // namespace

TUTTI_COLD TUTTI_DECL std::string failure_notice(const std::exception& e, std::size_t limit) {
  const auto* t = dynamic_cast<const error*>(&e);
  if (!t) return notice_text(e.what(), limit);
  const auto k = static_cast<std::size_t>(t->code().value());
  std::string prefix = "[tutti " + std::string(k < std::size(notice_kinds) ? notice_kinds[k] : "peer_lost");
  const std::string* account = detail::error_origin::account(*t);
  if (account && t->origin() >= 0) prefix += " from " + std::to_string(t->origin());
  prefix += "] ";
  return prefix + notice_text(account ? *account : detail::own_text(e), limit > prefix.size() ? limit - prefix.size() : 0);
}

TUTTI_COLD TUTTI_DECL failure_cause read_failure_notice(std::string_view notice, int sender) {
  failure_cause c{errc::peer_lost, sender, std::string(notice)};
  constexpr std::string_view open = "[tutti ";
  const auto close = notice.find("] ");
  if (notice.substr(0, open.size()) != open || close == std::string_view::npos) return c;
  std::string_view tag = notice.substr(open.size(), close - open.size());
  int origin = sender;
  if (const auto from = tag.find(" from "); from != std::string_view::npos) {
    const std::string_view digits = tag.substr(from + 6);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos) return c;
    origin = std::stoi(std::string(digits));
    tag = tag.substr(0, from);
  }
  for (std::size_t k = 1; k < std::size(notice_kinds); ++k)
    if (tag == notice_kinds[k]) return {static_cast<errc>(k), origin, std::string(notice.substr(close + 2))};
  return c;
}

[[noreturn]] TUTTI_COLD TUTTI_DECL void raise_failure(const failure_cause& c, std::string_view here,
                                                      std::string_view origin_name, std::string_view sender_name) {
  std::string verb;
  switch (c.kind) {
    case errc::timeout: verb = " timed out"; break;
    case errc::aborted: verb = " aborted its communicator"; break;
    case errc::peer_lost: verb = " failed"; break;
    default: verb = " failed with " + std::string(notice_kinds[static_cast<std::size_t>(c.kind)]);
  }
  std::string text = std::string(origin_name) + verb + ", so " + std::string(here) + " fails too: " + c.account;
  if (!sender_name.empty()) text += " (passed on by " + std::string(sender_name) + ")";
  auto from_origin = [&](auto e) {
    detail::error_origin::set(e, c.origin, c.account);
    return e;
  };
  switch (c.kind) {
    case errc::timeout: throw from_origin(timeout_error(text));
    case errc::mismatch: throw from_origin(mismatch_error(text));
    case errc::config: throw from_origin(config_error(text));
    case errc::usage: throw from_origin(usage_error(text));
    // errc::aborted says this rank's own communicator was aborted; a peer's abort is, to this
    // rank, a peer gone (as a rank that died or left): peer_lost, whose text says it aborted.
    default: throw from_origin(peer_lost(text));
  }
}

[[noreturn]] TUTTI_COLD TUTTI_DECL void throw_lost(const std::string& text, int lost) {
  peer_lost e(text);
  detail::error_origin::set(e, lost, text);
  throw e;
}

}  // namespace tutti::toolkit
