/// \file
/// `tutti::cuda_ipc`'s collectives as plans: what one rank reads from whom and writes where,
/// once every rank's buffers are known to it (after the call's agreement). Every collective is
/// pulled: a rank writes only its own output, reading its peers' inputs (or outputs, in the
/// second phase of the two-shot all_reduce) where they lie, so no rank ever writes another's
/// memory. A plan has one or two phases, each one reduction (an output range = op over up to
/// `max_ranks` sources, in rank order, so every rank forms every element the same way) or a list
/// of copies; between phases, and before and after the plan, the ranks synchronise (device
/// events or in-kernel flags, `cuda_ipc.hpp`).
///
/// | collective          | phase 1 on rank r                                       | phase 2            |
/// |---------------------|---------------------------------------------------------|--------------------|
/// | broadcast           | r ≠ root: buf ← root's buf                              |                    |
/// | reduce              | root: buf = op over every rank's buf                    |                    |
/// | all_reduce, small   | out = op over every rank's in (one-shot; in place: over |                    |
/// |                     | the ranks' staging copies)                              |                    |
/// | all_reduce, large   | block r of out = op over block r of every rank's in     | block q of out ←   |
/// |                     | (two-shot: reduce-scatter ...)                          | block q of q's out |
/// | gather              | root: block q of out ← q's in                           |                    |
/// | all_gather          | block q of out ← q's in                                 |                    |
/// | scatter             | out ← block r of root's in                              |                    |
/// | all_to_all          | block q of out ← block r of q's in                      |                    |
/// | reduce_scatter      | out = op over block r of every rank's in                |                    |
/// | the v-collectives   | the same, at the blocks' offsets; where only the owner  |                    |
/// |                     | of a buffer knows an offset, its record carries it       |                    |
///
/// Pure functions of pointers and counts: tested on the CPU by running them on host memory
/// (tests/device/plans.cpp). Host code: compiles without CUDA.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tutti/core/counts.hpp"
#include "tutti/core/error.hpp"

namespace tutti::detail::device {

/// The most ranks a cuda_ipc group may have (the sources of one reduction, the flags a block
/// checks): a host's GPUs, or the threads sharing one.
inline constexpr int max_ranks = 64;

/// `bytes` from `src` (a peer's memory, or this rank's) to `dst` (this rank's).
struct segment {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  std::size_t bytes = 0;
};

/// One phase of a plan.
struct step {
  enum class kind { none, reduce, copy };
  kind k = kind::none;
  // reduce: dst[i] = op(src[0][i], src[1][i], ..., src[nsrc-1][i]) for i < count (elements)
  std::byte* dst = nullptr;
  std::array<const std::byte*, max_ranks> src{};
  int nsrc = 0;
  std::size_t count = 0;
  // copy
  std::vector<segment> copies;

  /// Whether this rank has anything to do in the phase.
  bool empty() const noexcept {
    return k == kind::none || (k == kind::reduce && count == 0) || (k == kind::copy && copies.empty());
  }
};

/// What one rank does in one call: its phases, and whether it first copies its input into its
/// staging buffer (the in-place one-shot all_reduce, whose output overwrites what peers read).
struct plan {
  std::array<step, 2> phase;
  int phases = 1;
  bool stage_input = false;
};

/// Every rank's buffers as this rank reaches them (peers' mapped into this process), and the
/// words each rank published for its peers (v-collectives: per peer, an offset and a count).
struct call_view {
  int rank = 0, size = 1;
  std::size_t elem = 1;                     ///< element size in bytes
  std::vector<const std::byte*> in;         ///< every rank's input (or in-place buffer)
  std::vector<std::byte*> out;              ///< every rank's output
  std::vector<const std::byte*> stage;      ///< every rank's staging buffer
  std::vector<std::vector<std::uint64_t>> words;  ///< words[q]: what rank q published (2 per peer)

  std::size_t at(std::size_t elements) const noexcept { return elements * elem; }
};

/// Block `b` of `count` elements cut in `p` blocks whose boundaries fall on `align` elements
/// (16 bytes, for vector loads, where the element size divides 16): [first, first + count).
struct block_range {
  std::size_t first = 0, count = 0;
};
inline block_range two_shot_block(std::size_t count, int p, int b, std::size_t align) {
  const std::size_t P = static_cast<std::size_t>(p);
  std::size_t per = (count + P - 1) / P;
  if (align > 1) per = (per + align - 1) / align * align;
  const std::size_t first = std::min(count, per * static_cast<std::size_t>(b));
  return {first, std::min(per, count - first)};
}

/// Elements per 16 bytes where the element size divides 16, else 1.
inline std::size_t vector_elems(std::size_t elem) noexcept { return elem <= 16 && 16 % elem == 0 ? 16 / elem : 1; }

namespace plans {

inline void copy_into(step& s, std::byte* dst, const std::byte* src, std::size_t bytes) {
  s.k = step::kind::copy;
  if (bytes == 0 || dst == src) return;
  s.copies.push_back({dst, src, bytes});
}

inline void reduce_over(step& s, std::byte* dst, std::size_t count) {
  s.k = step::kind::reduce;
  s.dst = dst;
  s.count = count;
  s.nsrc = 0;
}

/// root's `bytes` into every rank's buffer (in is out: the buffer).
inline plan broadcast(const call_view& v, std::size_t bytes, int root) {
  plan p;
  if (v.rank != root) plans::copy_into(p.phase[0], v.out[static_cast<std::size_t>(v.rank)], v.in[static_cast<std::size_t>(root)], bytes);
  return p;
}

/// At the root, `count` elements = op over every rank's buffer (in rank order).
inline plan reduce(const call_view& v, std::size_t count, int root) {
  plan p;
  if (v.rank != root) return p;
  step& s = p.phase[0];
  reduce_over(s, v.out[static_cast<std::size_t>(root)], count);
  for (int q = 0; q < v.size; ++q) s.src[static_cast<std::size_t>(s.nsrc++)] = v.in[static_cast<std::size_t>(q)];
  return p;
}

/// One-shot (every rank reduces the whole buffer from every rank's input, or, in place, from
/// every rank's staging copy) or two-shot (block r reduced here, then every other block copied
/// from its owner's output).
inline plan all_reduce(const call_view& v, std::size_t count, bool one_shot, bool in_place) {
  plan p;
  const auto r = static_cast<std::size_t>(v.rank);
  if (one_shot) {
    step& s = p.phase[0];
    reduce_over(s, v.out[r], count);
    for (int q = 0; q < v.size; ++q)
      s.src[static_cast<std::size_t>(s.nsrc++)] = in_place ? v.stage[static_cast<std::size_t>(q)] : v.in[static_cast<std::size_t>(q)];
    p.stage_input = in_place;
    return p;
  }
  p.phases = 2;
  const std::size_t align = vector_elems(v.elem);
  const block_range mine = two_shot_block(count, v.size, v.rank, align);
  step& rs = p.phase[0];
  reduce_over(rs, v.out[r] + v.at(mine.first), mine.count);
  for (int q = 0; q < v.size; ++q) rs.src[static_cast<std::size_t>(rs.nsrc++)] = v.in[static_cast<std::size_t>(q)] + v.at(mine.first);
  step& ag = p.phase[1];
  ag.k = step::kind::copy;
  for (int q = 0; q < v.size; ++q) {
    if (q == v.rank) continue;
    const block_range b = two_shot_block(count, v.size, q, align);
    copy_into(ag, v.out[r] + v.at(b.first), v.out[static_cast<std::size_t>(q)] + v.at(b.first), v.at(b.count));
  }
  return p;
}

/// At the root, block q of out ← rank q's in (`bytes` each).
inline plan gather(const call_view& v, std::size_t bytes, int root) {
  plan p;
  p.phase[0].k = step::kind::copy;
  if (v.rank != root) return p;
  for (int q = 0; q < v.size; ++q)
    copy_into(p.phase[0], v.out[static_cast<std::size_t>(root)] + bytes * static_cast<std::size_t>(q), v.in[static_cast<std::size_t>(q)], bytes);
  return p;
}

/// Block q of every out ← rank q's in.
inline plan all_gather(const call_view& v, std::size_t bytes) {
  plan p;
  p.phase[0].k = step::kind::copy;
  for (int q = 0; q < v.size; ++q)
    copy_into(p.phase[0], v.out[static_cast<std::size_t>(v.rank)] + bytes * static_cast<std::size_t>(q), v.in[static_cast<std::size_t>(q)], bytes);
  return p;
}

/// out ← block r of the root's in.
inline plan scatter(const call_view& v, std::size_t bytes, int root) {
  plan p;
  copy_into(p.phase[0], v.out[static_cast<std::size_t>(v.rank)], v.in[static_cast<std::size_t>(root)] + bytes * static_cast<std::size_t>(v.rank), bytes);
  return p;
}

/// Block q of out ← block r of rank q's in (`bytes` per block).
inline plan all_to_all(const call_view& v, std::size_t bytes) {
  plan p;
  p.phase[0].k = step::kind::copy;
  const auto r = static_cast<std::size_t>(v.rank);
  for (int q = 0; q < v.size; ++q)
    copy_into(p.phase[0], v.out[r] + bytes * static_cast<std::size_t>(q), v.in[static_cast<std::size_t>(q)] + bytes * r, bytes);
  return p;
}

/// out (`count` elements) = op over block r of every rank's in.
inline plan reduce_scatter(const call_view& v, std::size_t count) {
  plan p;
  step& s = p.phase[0];
  reduce_over(s, v.out[static_cast<std::size_t>(v.rank)], count);
  for (int q = 0; q < v.size; ++q)
    s.src[static_cast<std::size_t>(s.nsrc++)] = v.in[static_cast<std::size_t>(q)] + v.at(count * static_cast<std::size_t>(v.rank));
  return p;
}

/// Block q of every out (at offset(q)) ← rank q's in (count(q) elements).
inline plan all_gather_v(const call_view& v, const block_counts& b) {
  plan p;
  p.phase[0].k = step::kind::copy;
  for (int q = 0; q < v.size; ++q)
    copy_into(p.phase[0], v.out[static_cast<std::size_t>(v.rank)] + v.at(b.offset(q)), v.in[static_cast<std::size_t>(q)], v.at(b.count(q)));
  return p;
}

/// At the root, block q of out (at offset(q)) ← rank q's in (count(q) elements).
inline plan gather_v(const call_view& v, const block_counts& b, int root) {
  plan p;
  p.phase[0].k = step::kind::copy;
  if (v.rank != root) return p;
  for (int q = 0; q < v.size; ++q)
    copy_into(p.phase[0], v.out[static_cast<std::size_t>(root)] + v.at(b.offset(q)), v.in[static_cast<std::size_t>(q)], v.at(b.count(q)));
  return p;
}

/// out (`count` elements) ← the root's in at the offset the root published for this rank.
inline plan scatter_v(const call_view& v, std::size_t offset, std::size_t count, int root) {
  plan p;
  copy_into(p.phase[0], v.out[static_cast<std::size_t>(v.rank)], v.in[static_cast<std::size_t>(root)] + v.at(offset), v.at(count));
  return p;
}

/// Block q of out (at recv.offset(q), recv.count(q) elements) ← rank q's in at the offset rank q
/// published for this rank (`from_offsets[q]`).
inline plan all_to_all_v(const call_view& v, const block_counts& recv, std::span<const std::size_t> from_offsets) {
  plan p;
  p.phase[0].k = step::kind::copy;
  for (int q = 0; q < v.size; ++q)
    copy_into(p.phase[0], v.out[static_cast<std::size_t>(v.rank)] + v.at(recv.offset(q)),
              v.in[static_cast<std::size_t>(q)] + v.at(from_offsets[static_cast<std::size_t>(q)]), v.at(recv.count(q)));
  return p;
}

/// out (count(r) elements) = op over block r (at offset(r)) of every rank's in.
inline plan reduce_scatter_v(const call_view& v, const block_counts& b) {
  plan p;
  step& s = p.phase[0];
  reduce_over(s, v.out[static_cast<std::size_t>(v.rank)], b.count(v.rank));
  for (int q = 0; q < v.size; ++q) s.src[static_cast<std::size_t>(s.nsrc++)] = v.in[static_cast<std::size_t>(q)] + v.at(b.offset(v.rank));
  return p;
}

}  // namespace plans
}  // namespace tutti::detail::device
