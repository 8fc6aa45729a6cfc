/// \file
/// What a waiting shm rank can see of its peers, so that it fails fast and names the rank at
/// fault instead of waiting for its deadline. Each rank publishes what it is blocked in (the
/// call's fingerprint, the world rank it waits for and how: a send waiting for room, a receive
/// waiting for data, a sendrecv, a step on the windows), seqlocked in its control block.
/// - A peer that died (its pidfd) or failed: `peer_lost` with its reason (or its last words).
/// - A peer blocked in a later call, or in this call with other arguments: `mismatch_error`.
/// - A cycle of ranks each blocked in a plain send or receive on the next (two ranks that both
///   send 400 KB before either receives): nothing can ever move, so `mismatch_error` naming the
///   cycle, as soon as it has been seen twice unchanged.
/// - At a timeout, the chain of ranks waiting for each other, down to a stopped process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/shm/segment.hpp"
#include "tutti/transport/toolkit/errors.hpp"
#include "tutti/transport/toolkit/group_map.hpp"

namespace tutti::detail::shm_impl {

/// Publishes what this rank is blocked in (`fp` empty: nothing).
TUTTI_DECL void publish_waiting(segment& seg, const toolkit::group_map& g, const fingerprint* fp, int world_peer = -1,
                                wait_kind how = wait_kind::none) noexcept;

/// What world rank r published it waits in, read consistently (empty: nothing, or it is being
/// rewritten right now).
struct published_wait {
  fingerprint fp;
  int peer;
  wait_kind how;
  std::uint64_t gen;
};
TUTTI_DECL std::optional<published_wait> read_wait(const segment& seg, int world_r) noexcept;

TUTTI_DECL const char* waits_how(wait_kind how);

/// For a timeout: whether the world rank waited for is stopped, or itself blocked waiting for
/// another (and so on), so that the message names the rank that holds everyone up (a rank
/// stopped by SIGSTOP, a debugger, ...) and not only the first link of the chain.
TUTTI_COLD TUTTI_DECL std::string blocked_chain(const segment& seg, const toolkit::group_map& g, int world_r);

/// Raises the peer's own error if group rank `peer` failed, `peer_lost` if it exited, and
/// `mismatch_error` if it is blocked in a later call or in this one with other arguments; each
/// only while what this rank waits for is still missing after it looked (`ready()`): a peer that
/// finished the call without the message or room we need has left it behind. Without `compare`,
/// it checks failure and exit only (see shm::wait_for).
template <class Ready>
void check_peer(const segment& seg, const toolkit::group_map& g, int peer, const header& h, const wait_context& w,
                Ready& ready, bool compare = true) {
  const int wr = g.world(peer);
  if (std::string why = seg.gone(wr); !why.empty()) {
    // A peer that failed or exited may have posted what we wait for just before (its last step
    // of this call, then a mistake in a later one, or the end of its program) after our last
    // look (this rank preempted in between): then this call completes, and the next one hears.
    if (ready()) return;
    if (auto notice = seg.failure_notice(wr))
      toolkit::raise_notice(*notice, g, peer, toolkit::where(h, w.algorithm) + " on " + g.name(g.rank()));
    toolkit::throw_lost(toolkit::where(h, w.algorithm) + ": " + g.name(peer) + " " + why + " while " + g.name(g.rank()) +
                            " waited for it",
                        g.job_rank(peer));
  }
  if (!compare || h.fp.coll == collective::send_recv) return;
  const auto theirs = read_wait(seg, wr);
  if (!theirs) return;
  fingerprint mine = h.fp;
  mine.context = g.context();
  if (toolkit::left_behind(mine, theirs->fp) && !ready())
    toolkit::throw_left_behind(h, w.algorithm, mine, g.rank(), theirs->fp, peer);
}

/// Raises `mismatch_error` if this rank is part of a cycle of plain sends and receives (see the
/// file comment) that `last` already held at the previous look: each rank of it published the
/// same wait both times, so none of them moved in between. `last` keeps the sighting.
TUTTI_DECL void check_cycle(const segment& seg, const toolkit::group_map& g, const header& h, const wait_context& w,
                            std::vector<std::uint64_t>& last);

}  // namespace tutti::detail::shm_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/diagnosis.ipp"
#endif
