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

#include <atomic>
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
#include "tutti/transport/toolkit/host.hpp"

namespace tutti::detail::shm_impl {

/// Publishes what this rank is blocked in (`fp` empty: nothing).
inline void publish_waiting(segment& seg, const toolkit::group_map& g, const fingerprint* fp, int world_peer = -1,
                            wait_kind how = wait_kind::none) noexcept {
  auto& me = seg.ctl(seg.world_rank);
  const std::uint64_t gen = me.wait_gen.load(std::memory_order_relaxed);
  me.wait_gen.store(gen + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  fingerprint f = fp ? *fp : fingerprint{};
  if (fp) f.context = g.context();
  else f.coll = collective::send_recv;  // "not waiting in a collective"
  store_fp(me.wait_fp, f);
  me.wait_peer.store(fp ? world_peer : -1, std::memory_order_relaxed);
  me.wait_how.store(static_cast<std::int32_t>(fp ? how : wait_kind::none), std::memory_order_relaxed);
  me.wait_gen.store(gen + 2, std::memory_order_release);
}

/// What world rank r published it waits in, read consistently (empty: nothing, or it is being
/// rewritten right now).
struct published_wait {
  fingerprint fp;
  int peer;
  wait_kind how;
  std::uint64_t gen;
};
inline std::optional<published_wait> read_wait(const segment& seg, int world_r) noexcept {
  auto& c = seg.ctl(world_r);
  const std::uint64_t g1 = c.wait_gen.load(std::memory_order_acquire);
  if (g1 == 0 || (g1 & 1)) return std::nullopt;
  published_wait w{load_fp(c.wait_fp), c.wait_peer.load(std::memory_order_relaxed),
                   static_cast<wait_kind>(c.wait_how.load(std::memory_order_relaxed)), g1};
  std::atomic_thread_fence(std::memory_order_acquire);
  if (c.wait_gen.load(std::memory_order_relaxed) != g1 || w.peer < 0 || w.how == wait_kind::none) return std::nullopt;
  return w;
}

inline const char* waits_how(wait_kind how) {
  switch (how) {
    case wait_kind::send: return "waits to make room at";
    case wait_kind::recv: return "waits to receive from";
    case wait_kind::duplex: return "waits to exchange with";
    default: return "waits for";
  }
}

/// For a timeout: whether the world rank waited for is stopped, or itself blocked waiting for
/// another (and so on), so that the message names the rank that holds everyone up (a rank
/// stopped by SIGSTOP, a debugger, ...) and not only the first link of the chain.
TUTTI_COLD inline std::string blocked_chain(const segment& seg, const toolkit::group_map& g, int world_r) {
  std::string s;
  std::vector<bool> seen(seg.pids.size());
  seen.at(static_cast<std::size_t>(seg.world_rank)) = true;
  for (int r = world_r; r >= 0 && static_cast<std::size_t>(r) < seen.size();) {
    const bool stopped = toolkit::process_stopped(seg.pids[static_cast<std::size_t>(r)]);
    if (stopped) s += r == world_r ? " (its process is stopped)" : ", whose process is stopped";
    if (stopped || seen[static_cast<std::size_t>(r)]) break;
    seen[static_cast<std::size_t>(r)] = true;
    const auto w = read_wait(seg, r);
    if (!w) break;
    s += (r == world_r ? ", which is itself waiting for " : ", which waits for ") + g.world_name(w->peer);
    r = w->peer;
  }
  return s;
}

/// Raises `peer_lost` if group rank `peer` is gone, and `mismatch_error` if it is blocked in a
/// later call (or this one with other arguments) while what this rank waits for is still
/// missing after it looked (`ready()`): a peer that finished the call without the message or
/// room we need has left it behind.
template <class Ready>
void check_peer(const segment& seg, const toolkit::group_map& g, int peer, const header& h, const wait_context& w,
                Ready& ready) {
  const int wr = g.world(peer);
  if (std::string why = seg.gone(wr); !why.empty())
    throw peer_lost(toolkit::where(h, w.algorithm) + ": " + g.name(peer) + " " + why + " while " + g.name(g.rank()) +
                    " waited for it");
  if (h.fp.coll == collective::send_recv) return;
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
inline void check_cycle(const segment& seg, const toolkit::group_map& g, const header& h, const wait_context& w,
                        std::vector<std::uint64_t>& last) {
  std::vector<std::uint64_t> seen;
  std::string chain;
  std::vector<bool> visited(seg.pids.size());
  int r = seg.world_rank;
  // A wait is stuck when what it waits for cannot be in the ring right now: a send's ring to its
  // peer is full, a receive's ring from its peer is empty (a rank that published its wait and
  // has not run since may be waiting for what has already come: then it is not stuck).
  auto stuck = [&](int a, const published_wait& w) {
    const int src = w.how == wait_kind::send ? a : w.peer, dst = w.how == wait_kind::send ? w.peer : a;
    auto& e = seg.ends(src, dst);
    const std::uint64_t head = e.head.load(std::memory_order_acquire), tail = e.tail.load(std::memory_order_acquire);
    return w.how == wait_kind::send ? seg.lay.opt.ring_bytes - (head - tail) < 64 : head == tail;
  };
  for (;;) {
    const auto pw = read_wait(seg, r);
    if (!pw || (pw->how != wait_kind::send && pw->how != wait_kind::recv) || pw->peer == r || !stuck(r, *pw))
      return last.clear();
    if (visited[static_cast<std::size_t>(r)]) return last.clear();  // a cycle, but not through this rank
    visited[static_cast<std::size_t>(r)] = true;
    seen.push_back(static_cast<std::uint64_t>(r));
    seen.push_back(pw->gen);
    chain += (chain.empty() ? g.world_name(r) : ", which") + " " + waits_how(pw->how) + " " + g.world_name(pw->peer);
    if (pw->peer == seg.world_rank) break;
    r = pw->peer;
  }
  if (seen != last) {
    last = std::move(seen);
    return;
  }
  throw mismatch_error(toolkit::where(h, w.algorithm) + ": the ranks wait for each other in a cycle that nothing can "
                       "break: " + chain + " (each sends before the other receives, or each receives before the "
                       "other sends)");
}

}  // namespace tutti::detail::shm_impl
