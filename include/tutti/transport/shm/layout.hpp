/// \file
/// The shared segment of `tutti::shm`: what lies where, identically computed by every rank.
///
///     [4 KiB header page][control block per rank][notices per rank]
///     [byte ring per ordered pair of ranks][point-to-point ring per ordered pair of ranks]
///     [window per rank][arena per rank]
///
/// A control block is a few cache lines, each with a single writer (the rank, except the
/// doorbell, which whoever wakes the rank bumps). Fingerprints are stored as words of atomics
/// (`toolkit::wire::to_words`), so readers and writers never race; a reader takes a consistent
/// one through the generation word next to it (a seqlock: odd while it is being written).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/shm/options.hpp"
#include "tutti/transport/toolkit/wire.hpp"

namespace tutti::detail::shm_impl {

inline constexpr std::uint64_t segment_magic = 0x7475747469736d33ull;  // "tuttism3"
inline constexpr std::size_t line = 64;
inline constexpr std::size_t fp_words = toolkit::wire::fingerprint_words;

enum class rank_state : std::uint32_t { running = 0, failed = 1 };

/// What a rank publishes it is blocked in (`wait_kind`), for its peers' checks.
enum class wait_kind : std::int32_t {
  none = 0,
  send = 1,    ///< a send waiting for room in its ring to the peer
  recv = 2,    ///< a receive waiting for data from the peer
  duplex = 3,  ///< a sendrecv: waits for either
  phase = 4,   ///< a step on the windows: waits for the peer's post
};

inline void store_fp(std::atomic<std::uint64_t>* w, const fingerprint& fp) noexcept {
  const auto words = toolkit::wire::to_words(fp);
  for (std::size_t i = 0; i < fp_words; ++i) w[i].store(words[i], std::memory_order_relaxed);
}
inline fingerprint load_fp(const std::atomic<std::uint64_t>* w) noexcept {
  std::uint64_t tmp[fp_words];
  for (std::size_t i = 0; i < fp_words; ++i) tmp[i] = w[i].load(std::memory_order_relaxed);
  return toolkit::wire::from_words(tmp);
}

/// One rank's control block.
struct control {
  alignas(line) std::atomic<std::uint32_t> state;  // rank_state; failed: its notice holds why
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> note_gen;               // seqlock of this rank's note (its last words)
  alignas(line) std::atomic<std::uint32_t> doorbell;  // bumped by whoever wakes this rank
  std::atomic<std::uint32_t> sleepers;               // > 0 while this rank may sleep on the bell
  // Native phases: 2g-1 while the fingerprint of phase g is written, 2g once g is posted.
  alignas(line) std::atomic<std::uint64_t> phase_gen;
  std::atomic<std::uint64_t> phase_fp[fp_words];     // fingerprint of the last posted phase
  alignas(line) std::atomic<std::uint64_t> wait_gen;  // seqlock of the next fields (odd: writing)
  std::atomic<std::uint64_t> wait_fp[fp_words];      // what this rank is blocked in, if anything
  alignas(line) std::atomic<std::int32_t> wait_peer;  // the world rank it waits for there, or -1
  std::atomic<std::int32_t> wait_how;                // wait_kind
  std::atomic<std::uint64_t> source[2];              // per phase parity: arena offset of the input, or none
  std::atomic<std::uint64_t> address[2];             // per phase parity: its address in the process, or 0
  alignas(line) std::atomic<std::uint64_t> probe_address;  // start-up: a word peers try to read
  std::atomic<std::int32_t> probe_result;            // 0: read every peer; errno of the first failure; -1: off; -2: too few cores
  std::atomic<std::uint32_t> startup_step;           // start-up barrier
  std::atomic<std::int32_t> probe_peer;              // the peer the first failure was on
  std::atomic<std::uint32_t> shrink_gen;             // shrink: how many times this rank entered it
  std::atomic<std::uint32_t> shrink_decided;         // shrink: the generation whose members follow
  std::atomic<std::uint64_t> shrink_members;         // shrink: bit r set: old rank r is in the new job
  std::atomic<std::uint32_t> probe_rate[2];          // start-up: MB/s of process_vm_readv and of memcpy
  // Point-to-point (matching.hpp): what this rank's blocking send or receive waits for, while it
  // is the only one pending; 0: nothing (publication << 32 | kind << 24 | world peer + 1).
  alignas(line) std::atomic<std::uint64_t> p2p_wait;
};
static_assert(sizeof(std::atomic<std::uint64_t>) * (fp_words + 1) <= line, "a phase's generation and fingerprint share one line");
static_assert(sizeof(control) == 7 * line);
inline constexpr std::uint64_t probe_magic = 0x7475747469636d61ull;  // "tutticma"
/// The bytes the start-up speed vote copies both ways (startup.hpp's probe_single_copy).
inline constexpr std::size_t probe_bytes = std::size_t{1} << 20;
inline constexpr std::uint64_t no_source = ~std::uint64_t{0};

/// A rank's notices: why it failed (written once, before its state turns failed) and its note
/// (last words; rewritten under `note_gen`). Each a 32-bit length and the text.
inline constexpr std::size_t notice_text_bytes = 4096 - 4;
struct notices {
  std::uint32_t failure_bytes;
  char failure[notice_text_bytes];
  std::uint32_t note_bytes;
  char note[notice_text_bytes];
};
static_assert(sizeof(notices) == 8192);

struct ring_ends {
  alignas(line) std::atomic<std::uint64_t> head;  // bytes published by the sender
  alignas(line) std::atomic<std::uint64_t> tail;  // bytes consumed by the receiver
};

/// Bytes of each point-to-point ring (matching.hpp), apart from the collectives' rings.
inline constexpr std::size_t p2p_ring_bytes = std::size_t{128} << 10;

/// Where everything lives in the segment (every rank computes the same).
struct layout {
  std::size_t controls, notices_at, rings, ring_stride, p2p_rings, windows, arenas, total;
  shm_options opt;
  int p;
  layout(int world, shm_options o);
  std::size_t ring(int src, int dst) const {  // ordered pair (src, dst), src != dst
    const int k = src * (p - 1) + (dst < src ? dst : dst - 1);
    return rings + static_cast<std::size_t>(k) * ring_stride;
  }
  std::size_t p2p_ring(int src, int dst) const {
    const int k = src * (p - 1) + (dst < src ? dst : dst - 1);
    return p2p_rings + static_cast<std::size_t>(k) * (sizeof(ring_ends) + p2p_ring_bytes);
  }
};

}  // namespace tutti::detail::shm_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/layout.ipp"
#endif
