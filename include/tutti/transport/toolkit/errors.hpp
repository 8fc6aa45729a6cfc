/// \file
/// The words of the transport contract: how every transport says where a wait was, that a
/// header disagreed, that a peer left a call behind, failed, went away or stayed silent. One
/// text per situation, so a message reads the same whichever transport raised it.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <exception>
#include <string_view>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"

namespace tutti::toolkit {

/// "0.2 s", "300 s": a deadline as error messages print it.
std::string seconds_text(std::chrono::milliseconds d);

/// "all_reduce(ring)": the call a message is about.
std::string where(const header& h, std::string_view algo);

/// "rank 3": a rank as messages name it.
inline std::string rank_name(int r) { return "rank " + std::to_string(r); }

/// What a receiver found in a header it checked (core/fingerprint.hpp).
using tutti::header_mismatch;

/// "6 elements (24 bytes)", or "24 bytes" where the element size is unknown or does not divide.
std::string amount_text(std::uint64_t bytes, std::uint8_t elem_size);

/// The check every receiver makes before touching a payload: the header that arrived from
/// `peer` must equal the one this rank expects, fingerprint and byte count; `header_mismatch`
/// naming both ranks and both values otherwise.
[[noreturn]] void throw_header_mismatch(const header& expected, int me, const header& got, int peer,
                                        std::string_view algo);
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

/// The `fingerprint_mismatch` for a peer whose fingerprint `theirs` differs from this rank's
/// `mine` (found blocked in it: see `left_behind`; or posted, or published): where, the first
/// difference, then `extra`.
[[noreturn]] void throw_left_behind(const header& h, std::string_view algo, const fingerprint& mine, int me,
                                    const fingerprint& theirs, int peer, std::string_view extra = {});

/// "all_reduce(ring): rank 0 timed out after 5 s waiting to receive from rank 1 (4096 bytes,
/// all_reduce #3 count=1024 dtype=float op=sum)"; `peer` is the peer's name, with whatever the
/// transport knows of it ("rank 1, which is itself waiting for rank 2").
std::string timeout_text(const header& h, std::string_view algo, std::string_view me,
                         std::chrono::milliseconds timeout, std::string_view doing, std::string_view peer);

/// "all_reduce(ring): rank 2 failed while rank 0 waited for it: <reason>".
std::string peer_failed_text(const header& h, std::string_view algo, std::string_view peer, std::string_view me,
                             std::string_view reason, std::string_view doing = "waited for it");

// ---- notice texts ----------------------------------------------------------------------------

/// The longest reason a failure notice or a note carries whole. Longer ones are cut where a
/// reader can tell (`notice_text`). Short enough for every transport to send it at once: one
/// write on a socket, an eager MPI message.
inline constexpr std::size_t max_notice_text = 3072;

/// `reason`, or, when longer than `limit`, its head cut at a word boundary with a marker that
/// says so: "... [cut: 1234 more bytes]".
std::string notice_text(std::string_view reason, std::size_t limit = max_notice_text);

// ---- failure notices -------------------------------------------------------------------------

/// What a failure notice says: the kind of the failure, the job rank where it began (-1: the
/// rank that sent the notice) and that rank's own account of it.
struct failure_cause {
  errc kind = errc::peer_lost;
  int origin = -1;
  std::string account;
};

/// The failure notice a rank whose communicator failed with `e` sends its peers (its
/// transport's `fail`): "[tutti mismatch_error] <account>" for a failure that began here,
/// "[tutti mismatch_error from 3] <account>" for one that reached this rank from job rank 3
/// (the origin's account, passed on as it was, so texts never nest). Cut to `limit`.
std::string failure_notice(const std::exception& e, std::size_t limit = max_notice_text);

/// What a failure notice from job rank `sender` says. A notice without the prefix (a user
/// transport's, a rank whose function threw) is a failure of `sender`: `peer_lost`.
failure_cause read_failure_notice(std::string_view notice, int sender);

/// Raises failure `c` on this rank with its own kind, naming its origin first: "rank 1 failed
/// with mismatch_error, so all_reduce(ring) on rank 0 fails too: <account>", with " (passed on
/// by rank 2)" when the notice came from another rank than the origin. `here`: the call and
/// this rank ("all_reduce(ring) on rank 0"); the names as this group says them. A peer's abort
/// is raised as `peer_lost` (`errc::aborted` is for this rank's own communicator).
[[noreturn]] void raise_failure(const failure_cause& c, std::string_view here, std::string_view origin_name,
                                std::string_view sender_name);

/// `raise_failure` for a notice read from group rank `peer` of `g` (any type with `job_rank`
/// and `job_name`, as toolkit::group_map).
template <class Group>
[[noreturn]] void raise_notice(std::string_view notice, const Group& g, int peer, std::string_view here) {
  const int sender = g.job_rank(peer);
  const failure_cause c = read_failure_notice(notice, sender);
  raise_failure(c, here, g.job_name(c.origin), c.origin == sender ? std::string() : g.job_name(sender));
}

/// `peer_lost(text)` whose origin is job rank `lost`: the rank that died, went away or returned
/// early, so that the ranks its survivors then fail name it first.
[[noreturn]] void throw_lost(const std::string& text, int lost);

}  // namespace tutti::toolkit

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/toolkit/errors.ipp"
#endif
