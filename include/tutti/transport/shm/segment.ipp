/// \file
/// Definitions for tutti/transport/shm/segment.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tutti/detail/futex.hpp"
#include "tutti/transport/shm/segment.hpp"

namespace tutti::detail::shm_impl {

TUTTI_DECL segment::~segment() {
  if (base) ::munmap(base, lay.arenas);
  if (arena_base) ::munmap(arena_base, lay.total - lay.arenas);
}

TUTTI_DECL void segment::ring_bell(int world_r) const noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  control& c = ctl(world_r);
  if (c.sleepers.load(std::memory_order_relaxed) > 0) {
    c.doorbell.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&c.doorbell);
  }
}

TUTTI_DECL bool segment::exited(int world_r) const {
  const auto r = static_cast<std::size_t>(world_r);
  if (r < pidfds.size() && pidfds[r]) {
    pollfd pf{pidfds[r].get(), POLLIN, 0};
    return ::poll(&pf, 1, 0) > 0;
  }
  return r < pids.size() && pids[r] > 0 && ::kill(pids[r], 0) != 0 && errno == ESRCH;
}

TUTTI_DECL std::optional<std::string> segment::failure_notice(int world_r) const {
  if (ctl(world_r).state.load(std::memory_order_acquire) != static_cast<std::uint32_t>(rank_state::failed)) return {};
  const notices& n = notes(world_r);
  return std::string(n.failure, std::min<std::size_t>(n.failure_bytes, notice_text_bytes));
}

TUTTI_DECL std::string segment::gone(int world_r) const {
  if (auto notice = failure_notice(world_r)) return "failed: " + *notice;
  if (exited(world_r)) {
    const std::string words = note_of(world_r);
    return "exited or was killed (pid " + std::to_string(pids[static_cast<std::size_t>(world_r)]) + ")" +
           (words.empty() ? std::string() : " after its last words: " + words);
  }
  return {};
}

TUTTI_DECL void segment::write_failure(std::string_view what) noexcept {
  notices& n = notes(world_rank);
  const std::size_t len = std::min(what.size(), notice_text_bytes);
  std::memcpy(n.failure, what.data(), len);
  n.failure_bytes = static_cast<std::uint32_t>(len);
  ctl(world_rank).state.store(static_cast<std::uint32_t>(rank_state::failed), std::memory_order_release);
}

TUTTI_DECL void segment::write_note(std::string_view what) noexcept {
  control& c = ctl(world_rank);
  notices& n = notes(world_rank);
  const std::uint64_t g = c.note_gen.load(std::memory_order_relaxed);
  c.note_gen.store(g + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const std::size_t len = std::min(what.size(), notice_text_bytes);
  std::atomic_ref<std::uint32_t>(n.note_bytes).store(static_cast<std::uint32_t>(len), std::memory_order_relaxed);
  for (std::size_t i = 0; i < len; ++i) std::atomic_ref<char>(n.note[i]).store(what[i], std::memory_order_relaxed);
  c.note_gen.store(g + 2, std::memory_order_release);
}

TUTTI_DECL std::string segment::note_of(int world_r) const {
  control& c = ctl(world_r);
  notices& n = notes(world_r);
  for (int attempt = 0; attempt < 8; ++attempt) {
    const std::uint64_t g1 = c.note_gen.load(std::memory_order_acquire);
    if (g1 & 1) continue;
    const std::size_t len = std::min<std::size_t>(
        std::atomic_ref<std::uint32_t>(n.note_bytes).load(std::memory_order_relaxed), notice_text_bytes);
    std::string text(len, '\0');
    for (std::size_t i = 0; i < len; ++i) text[i] = std::atomic_ref<char>(n.note[i]).load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (c.note_gen.load(std::memory_order_relaxed) == g1) return text;
  }
  return {};
}

}  // namespace tutti::detail::shm_impl
