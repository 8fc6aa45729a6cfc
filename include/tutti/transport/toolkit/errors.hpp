/// \file
/// The words of the transport contract: how every transport says where a wait was, that a
/// header disagreed, that a peer left a call behind, failed, went away or stayed silent. One
/// text per situation, so a message reads the same whichever transport raised it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"

namespace tutti::toolkit {

/// "0.2 s", "300 s": a deadline as error messages print it.
TUTTI_COLD inline std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

/// "all_reduce(ring)": the call a message is about.
TUTTI_COLD inline std::string where(const header& h, std::string_view algo) {
  return std::string(collective_name(h.fp.coll)) + "(" + std::string(algo) + ")";
}

/// "rank 3": a rank as messages name it.
inline std::string rank_name(int r) { return "rank " + std::to_string(r); }

/// What a receiver found in a header it checked (core/fingerprint.hpp).
using tutti::header_mismatch;

/// "6 elements (24 bytes)", or "24 bytes" where the element size is unknown or does not divide.
TUTTI_COLD inline std::string amount_text(std::uint64_t bytes, std::uint8_t elem_size) {
  if (elem_size == 0 || bytes % elem_size != 0) return std::to_string(bytes) + " bytes";
  const std::uint64_t n = bytes / elem_size;
  return std::to_string(n) + (n == 1 ? " element (" : " elements (") + std::to_string(bytes) + " bytes)";
}

/// The check every receiver makes before touching a payload: the header that arrived from
/// `peer` must equal the one this rank expects, fingerprint and byte count; `header_mismatch`
/// naming both ranks and both values otherwise.
[[noreturn]] TUTTI_COLD inline void throw_header_mismatch(const header& expected, int me, const header& got, int peer,
                                                         std::string_view algo) {
  if (expected.fp != got.fp)
    throw header_mismatch(where(expected, algo) + ": " + detail::describe_difference(expected.fp, me, got.fp, peer),
                          expected, got, me, peer);
  throw header_mismatch(where(expected, algo) + ": " + rank_name(me) + " expected " +
                            amount_text(expected.bytes, expected.fp.elem_size) + " from " + rank_name(peer) +
                            ", which sent " + amount_text(got.bytes, got.fp.elem_size),
                        expected, got, me, peer);
}
inline void check_header(const header& expected, int me, const header& got, int peer, std::string_view algo) {
  if (expected.fp != got.fp || expected.bytes != got.bytes) [[unlikely]]
    throw_header_mismatch(expected, me, got, peer, algo);
}

/// Whether a peer blocked in `theirs` has left this rank's call `mine` behind: it waits in a
/// later call of the same communicator, or in this call with other arguments. A peer that must
/// still exchange a message with this rank in `mine` cannot be past it (its part of the call
/// would be waiting for ours), so then the ranks disagree. Point to point is not sequenced.
constexpr bool left_behind(const fingerprint& mine, const fingerprint& theirs) noexcept {
  return mine.coll != collective::send_recv && theirs.coll != collective::send_recv &&
         theirs.context == mine.context && (theirs.seq > mine.seq || (theirs.seq == mine.seq && theirs != mine));
}

/// The `mismatch_error` for a peer found blocked in `theirs` (see `left_behind`).
[[noreturn]] TUTTI_COLD inline void throw_left_behind(const header& h, std::string_view algo, const fingerprint& mine, int me,
                                           const fingerprint& theirs, int peer, std::string_view extra = {}) {
  throw mismatch_error(where(h, algo) + ": " + detail::describe_difference(mine, me, theirs, peer) + std::string(extra));
}

/// "all_reduce(ring): rank 0 timed out after 5 s waiting to receive from rank 1 (4096 bytes,
/// all_reduce #3 count=1024 dtype=float op=sum)"; `peer` is the peer's name, with whatever the
/// transport knows of it ("rank 1, which is itself waiting for rank 2").
TUTTI_COLD inline std::string timeout_text(const header& h, std::string_view algo, std::string_view me,
                                std::chrono::milliseconds timeout, std::string_view doing, std::string_view peer) {
  return where(h, algo) + ": " + std::string(me) + " timed out after " + seconds_text(timeout) + " waiting " +
         std::string(doing) + " " + std::string(peer) + " (" + std::to_string(h.bytes) + " bytes, " +
         detail::fingerprint_summary(h.fp) + ")";
}

/// "all_reduce(ring): rank 2 failed while rank 0 waited for it: <reason>".
TUTTI_COLD inline std::string peer_failed_text(const header& h, std::string_view algo, std::string_view peer, std::string_view me,
                                    std::string_view reason, std::string_view doing = "waited for it") {
  return where(h, algo) + ": " + std::string(peer) + " failed while " + std::string(me) + " " + std::string(doing) +
         ": " + std::string(reason);
}

// ---- notice texts ----------------------------------------------------------------------------

/// The longest reason a failure notice or a note carries whole. Longer ones are cut where a
/// reader can tell (`notice_text`). Short enough for every transport to send it at once: one
/// write on a socket, an eager MPI message.
inline constexpr std::size_t max_notice_text = 3072;

/// `reason`, or, when longer than `limit`, its head cut at a word boundary with a marker that
/// says so: "... [cut: 1234 more bytes]".
TUTTI_COLD inline std::string notice_text(std::string_view reason, std::size_t limit = max_notice_text) {
  if (reason.size() <= limit) return std::string(reason);
  constexpr std::size_t marker = 40;  // room for " [cut: N more bytes]"
  std::size_t cut = limit > marker ? limit - marker : limit / 2;
  // Not inside a UTF-8 sequence, and at a space when there is one in the last stretch.
  while (cut > 0 && (static_cast<unsigned char>(reason[cut]) & 0xc0) == 0x80) --cut;
  if (const auto space = reason.rfind(' ', cut); space != std::string_view::npos && space + 80 > cut) cut = space;
  return std::string(reason.substr(0, cut)) + " [cut: " + std::to_string(reason.size() - cut) + " more bytes]";
}

}  // namespace tutti::toolkit
