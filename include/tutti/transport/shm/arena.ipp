/// \file
/// Definitions for tutti/transport/shm/arena.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <algorithm>
#include <iterator>
#include <mutex>
#include <string>

#include "tutti/core/error.hpp"
#include "tutti/transport/shm/arena.hpp"

namespace tutti::detail::shm_impl {

TUTTI_DECL std::byte* arena_allocate(segment& seg, std::size_t bytes) {
  bytes = std::max<std::size_t>((bytes + 63) & ~std::size_t{63}, 64);
  std::lock_guard lk(seg.arena_mu);
  for (auto it = seg.arena_free.begin(); it != seg.arena_free.end(); ++it)
    if (it->second >= bytes) {
      const std::size_t off = it->first, left = it->second - bytes;
      seg.arena_free.erase(it);
      if (left) seg.arena_free.emplace(off + bytes, left);
      seg.arena_used.emplace(off, bytes);
      return seg.arena(seg.world_rank) + off;
    }
  throw usage_error("shm::allocate: " + std::to_string(bytes) + " bytes do not fit in this rank's arena of " +
                    std::to_string(seg.lay.opt.arena_bytes) + " bytes (set TUTTI_SHM_ARENA_BYTES)");
}

TUTTI_DECL void arena_deallocate(segment& seg, std::byte* p) noexcept {
  std::lock_guard lk(seg.arena_mu);
  const auto off = static_cast<std::size_t>(p - seg.arena(seg.world_rank));
  auto used = seg.arena_used.find(off);
  if (used == seg.arena_used.end()) return;
  std::size_t start = off, bytes = used->second;
  seg.arena_used.erase(used);
  auto next = seg.arena_free.lower_bound(start);
  if (next != seg.arena_free.end() && next->first == start + bytes) {
    bytes += next->second;
    next = seg.arena_free.erase(next);
  }
  if (next != seg.arena_free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      bytes += prev->second;
      seg.arena_free.erase(prev);
    }
  }
  seg.arena_free.emplace(start, bytes);
}

TUTTI_DECL std::optional<std::uint64_t> arena_offset(const segment& seg, const void* p, std::size_t bytes) noexcept {
  if (!seg.arena_base) return std::nullopt;
  const auto* b = static_cast<const std::byte*>(p);
  const std::byte* lo = seg.arena(seg.world_rank);
  if (b < lo || b + bytes > lo + seg.lay.opt.arena_bytes) return std::nullopt;
  return static_cast<std::uint64_t>(b - lo);
}

}  // namespace tutti::detail::shm_impl
