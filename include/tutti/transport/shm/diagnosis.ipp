/// \file
/// Definitions for tutti/transport/shm/diagnosis.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <atomic>
#include <utility>

#include "tutti/transport/shm/diagnosis.hpp"
#include "tutti/transport/toolkit/host.hpp"

namespace tutti::detail::shm_impl {

TUTTI_DECL void publish_waiting(segment& seg, const toolkit::group_map& g, const fingerprint* fp, int world_peer,
                                wait_kind how) noexcept {
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

TUTTI_DECL std::optional<published_wait> read_wait(const segment& seg, int world_r) noexcept {
  auto& c = seg.ctl(world_r);
  const std::uint64_t g1 = c.wait_gen.load(std::memory_order_acquire);
  if (g1 == 0 || (g1 & 1)) return std::nullopt;
  published_wait w{load_fp(c.wait_fp), c.wait_peer.load(std::memory_order_relaxed),
                   static_cast<wait_kind>(c.wait_how.load(std::memory_order_relaxed)), g1};
  std::atomic_thread_fence(std::memory_order_acquire);
  if (c.wait_gen.load(std::memory_order_relaxed) != g1 || w.peer < 0 || w.how == wait_kind::none) return std::nullopt;
  return w;
}

TUTTI_DECL const char* waits_how(wait_kind how) {
  switch (how) {
    case wait_kind::send: return "waits to make room at";
    case wait_kind::recv: return "waits to receive from";
    case wait_kind::duplex: return "waits to exchange with";
    default: return "waits for";
  }
}

TUTTI_COLD TUTTI_DECL std::string blocked_chain(const segment& seg, const toolkit::group_map& g, int world_r) {
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

TUTTI_DECL void check_cycle(const segment& seg, const toolkit::group_map& g, const header& h, const wait_context& w,
                            std::vector<std::uint64_t>& last) {
  std::vector<std::uint64_t> seen;
  std::vector<std::pair<int, fingerprint>> calls;  // each other rank of the cycle and the call it waits in
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
    if (r != seg.world_rank) calls.emplace_back(r, pw->fp);
    chain += (chain.empty() ? g.world_name(r) : ", which") + " " + waits_how(pw->how) + " " + g.world_name(pw->peer);
    if (pw->peer == seg.world_rank) break;
    r = pw->peer;
  }
  if (seen != last) {
    last = std::move(seen);
    return;
  }
  // Ranks of the cycle in calls that differ disagree, and each rank that waits for one of them
  // names the difference; this rank's own peer may agree with it, and it may see the cycle
  // before their notice comes: it names the difference too (with the cycle), as they do.
  fingerprint mine = h.fp;
  mine.context = g.context();
  if (mine.coll != collective::send_recv)
    for (const auto& [world_r, theirs] : calls)
      if (theirs.coll != collective::send_recv && theirs.context == mine.context && theirs != mine &&
          g.local(world_r) >= 0)
        toolkit::throw_left_behind(h, w.algorithm, mine, g.rank(), theirs, g.local(world_r),
                                   " (the ranks wait for each other in a cycle: " + chain + ")");
  throw mismatch_error(toolkit::where(h, w.algorithm) + ": the ranks wait for each other in a cycle that nothing can "
                       "break: " + chain + " (each sends before the other receives, or each receives before the "
                       "other sends)");
}

}  // namespace tutti::detail::shm_impl
