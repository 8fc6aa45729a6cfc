/// \file
/// Definitions for tutti/transport/shm/shrink.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <bit>
#include <string>
#include <thread>

#include "tutti/core/error.hpp"
#include "tutti/transport/shm/shrink.hpp"

namespace tutti::detail::shm_impl {

TUTTI_DECL survivors agree_survivors(segment& seg, std::chrono::milliseconds timeout) {
  using namespace std::chrono;
  const int p = seg.lay.p, me = seg.world_rank;
  if (p > 64) throw usage_error("shm shrink: supports jobs of up to 64 ranks; this one has " + std::to_string(p));
  auto& mine = seg.ctl(me);
  const std::uint32_t g = mine.shrink_gen.load(std::memory_order_relaxed) + 1;
  mine.shrink_gen.store(g, std::memory_order_release);
  const auto deadline = steady_clock::now() + timeout;
  const auto bit = [](int r) { return std::uint64_t{1} << r; };
  // Who is in: this rank, and every rank alive that has entered shrink; wait for the others.
  std::uint64_t members = 0;
  for (;;) {
    members = bit(me);
    bool pending = false;
    for (int r = 0; r < p; ++r) {
      if (r == me || seg.exited(r)) continue;
      if (seg.ctl(r).shrink_gen.load(std::memory_order_acquire) >= g) members |= bit(r);
      else pending = true;
    }
    if (!pending || steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(milliseconds(1));
  }
  // The lowest member decides; if it dies first, the next one does.
  for (;;) {
    const int leader = std::countr_zero(members);
    if (leader == me) {
      mine.shrink_members.store(members, std::memory_order_relaxed);
      mine.shrink_decided.store(g, std::memory_order_release);
      break;
    }
    auto& l = seg.ctl(leader);
    if (l.shrink_decided.load(std::memory_order_acquire) == g) {
      members = l.shrink_members.load(std::memory_order_relaxed);
      break;
    }
    if (seg.exited(leader)) {
      members &= ~bit(leader);
      continue;
    }
    if (steady_clock::now() > deadline + timeout)
      throw timeout_error("shm shrink: rank " + std::to_string(me) + " timed out waiting for rank " +
                          std::to_string(leader) + " to decide who carries on");
    std::this_thread::sleep_for(milliseconds(1));
  }
  if (!(members & bit(me)))
    throw error(errc::aborted, "shm shrink: rank " + std::to_string(me) +
                                   " was left out of the new job: the others decided without it (it reached "
                                   "shrink after their deadline)");
  return {g, members};
}

}  // namespace tutti::detail::shm_impl
