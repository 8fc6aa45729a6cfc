/// \file
/// Schedule arithmetic: who sends which block to whom at step k, as plain constexpr functions of
/// (rank, size, count), tested on their own (tests/algorithm/schedule.cpp).
#pragma once

#include <bit>
#include <cstddef>

namespace tutti::schedule {

/// `a mod p` in [0, p) for any sign of `a`.
constexpr int mod(int a, int p) noexcept { return ((a % p) + p) % p; }

/// A half-open range of element indices.
struct range {
  std::size_t begin = 0, end = 0;
  constexpr std::size_t size() const noexcept { return end - begin; }
  friend constexpr bool operator==(range, range) = default;
};

/// Block `i` of `count` elements split into `parts` near-equal blocks; the first
/// `count % parts` blocks are one element longer.
constexpr range block(std::size_t count, int parts, int i) noexcept {
  const std::size_t p = static_cast<std::size_t>(parts), k = static_cast<std::size_t>(i);
  const std::size_t base = count / p, extra = count % p;
  const std::size_t begin = k * base + (k < extra ? k : extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

/// Blocks [first, last) of the same split, as one element range.
constexpr range blocks(std::size_t count, int parts, int first, int last) noexcept {
  return {block(count, parts, first).begin, block(count, parts, last - 1).end};
}

/// Number of pieces of at most `piece` elements that cover `n` elements; at least 1, so that an
/// empty block still sends one (empty, fingerprinted) message.
constexpr std::size_t pieces(std::size_t n, std::size_t piece) noexcept {
  if (piece == 0) piece = 1;
  return n == 0 ? 1 : (n + piece - 1) / piece;
}

/// Piece `k` of `r` cut into pieces of at most `piece` elements.
constexpr range piece_of(range r, std::size_t piece, std::size_t k) noexcept {
  if (piece == 0) piece = 1;
  const std::size_t b = r.begin + k * piece;
  const std::size_t e = b + piece < r.end ? b + piece : r.end;
  return {b < r.end ? b : r.end, e};
}

// ---- ring ------------------------------------------------------------------------------------

/// Ring reduce-scatter, step s in [0, p-1): rank r sends block (r - s - 1) and receives block
/// (r - s - 2), reducing it into its own copy. After p-1 steps rank r holds block r reduced.
constexpr int ring_rs_send_block(int r, int p, int s) noexcept { return mod(r - s - 1, p); }
constexpr int ring_rs_recv_block(int r, int p, int s) noexcept { return mod(r - s - 2, p); }

/// Ring all-gather, step s in [0, p-1): rank r sends block (r - s), receives block (r - s - 1).
constexpr int ring_ag_send_block(int r, int p, int s) noexcept { return mod(r - s, p); }
constexpr int ring_ag_recv_block(int r, int p, int s) noexcept { return mod(r - s - 1, p); }

// ---- binomial tree (relative ranks: vr = (rank - root) mod p) ---------------------------------

/// Lowest set bit of vr, or the first power of two >= p for the root (vr = 0).
constexpr int binomial_lowbit(int vr, int p) noexcept {
  return vr == 0 ? static_cast<int>(std::bit_ceil(static_cast<unsigned>(p))) : (vr & -vr);
}
/// Parent of vr in the binomial tree rooted at 0 (-1 for the root).
constexpr int binomial_parent(int vr) noexcept { return vr == 0 ? -1 : vr - (vr & -vr); }
/// Number of relative ranks in vr's subtree: [vr, vr + subtree).
constexpr int binomial_subtree(int vr, int p) noexcept {
  const int low = binomial_lowbit(vr, p);
  return low < p - vr ? low : p - vr;
}

// ---- recursive doubling with folding (MPICH) ---------------------------------------------------

/// Largest power of two <= p.
constexpr int pow2_floor(int p) noexcept {
  return static_cast<int>(std::bit_floor(static_cast<unsigned>(p)));
}
/// The p - 2^k "extra" ranks fold into partners: among the first 2·extra ranks, even ranks hand
/// their data to rank+1 and sit out. Returns the rank in the power-of-two group, or -1.
constexpr int fold_newrank(int r, int p) noexcept {
  const int extra = p - pow2_floor(p);
  if (r < 2 * extra) return (r % 2 == 0) ? -1 : r / 2;
  return r - extra;
}
/// Inverse of fold_newrank.
constexpr int fold_oldrank(int nr, int p) noexcept {
  const int extra = p - pow2_floor(p);
  return nr < extra ? 2 * nr + 1 : nr + extra;
}

}  // namespace tutti::schedule
