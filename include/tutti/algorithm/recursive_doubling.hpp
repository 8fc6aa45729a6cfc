/// \file
/// `tutti::algo::recursive_doubling`: ranks pair up at distances 1, 2, 4, … (lg p rounds).
///
/// Schedules and α-β cost (p ranks, n bytes):
/// - all_reduce, small (< `halving_threshold_bytes`): exchange whole buffers with partner
///   rank ^ 2^k, combine in a fixed order (lower rank first, so every rank ends bitwise equal):
///   lg p·α + n·lg p·(β + γ)
/// - all_reduce, large: Rabenseifner, reduce-scatter by recursive halving then all-gather by
///   recursive doubling: 2 lg p·α + 2n(p−1)/p·β + n(p−1)/p·γ
/// - non-powers of two fold first (MPICH): of the first 2·(p − 2^⌊lg p⌋) ranks, each even rank
///   hands its buffer to the odd rank after it and receives the result at the end: + 2(α + nβ)
/// - all_gather: recursive doubling for powers of two, Bruck's dissemination otherwise (any p,
///   ⌈lg p⌉ rounds, then one local rotation): ⌈lg p⌉·α + n(p−1)/p·β
/// - barrier: dissemination, ⌈lg p⌉ rounds of empty messages
/// - scan / exscan (MPICH's): in round k rank r swaps its partial reduction (of a contiguous range
///   of ranks ending or starting at r) with rank r ^ 2^k, and folds what comes from below into its
///   result; ⌈lg p⌉·(α + n(β + 2γ)), any p, in rank order (non-commutative ops are right)
#pragma once

#include <cstddef>
#include <string_view>

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/schedule.hpp"

namespace tutti::algo {

struct recursive_doubling {
  static constexpr std::string_view name = "recursive_doubling";
  /// From this many bytes on, all_reduce uses recursive halving/doubling (Rabenseifner).
  std::size_t halving_threshold_bytes = std::size_t{64} << 10;

  template <class Ch, class T, class M, class Op>
  void all_reduce(Ch& ch, view<T, M> buf, const Op& op) const {
    const int p = ch.size(), r = ch.rank(), p2 = schedule::pow2_floor(p), extra = p - p2;
    const int nr = schedule::fold_newrank(r, p);
    const std::size_t n = buf.size();
    // Fold: even ranks among the first 2·extra hand their data to the next (odd) rank.
    if (r < 2 * extra) {
      if (r % 2 == 0) ch.send(r + 1, view<const T, M>(buf));
      else ch.recv_reduce(r - 1, view<const T, M>(buf), buf, op);
    }
    if (nr >= 0) {
      auto real = [p](int newrank) { return schedule::fold_oldrank(newrank, p); };
      if (buf.size_bytes() < halving_threshold_bytes || n < static_cast<std::size_t>(p2)) {
        auto theirs = ch.template scratch<T>(0, n);
        for (int mask = 1; mask < p2; mask <<= 1) {
          const int partner = nr ^ mask;
          ch.sendrecv(real(partner), view<const T, M>(buf), real(partner), theirs);
          if (partner < nr) ch.combine(buf, view<const T, M>(theirs), view<const T, M>(buf), op);
          else ch.combine(buf, view<const T, M>(buf), view<const T, M>(theirs), op);
        }
      } else {
        auto elems = [&](int first, int last) {
          const auto rg = schedule::blocks(n, p2, first, last);
          return buf.subview(rg.begin, rg.size());
        };
        // Recursive halving: keep the half of the current block range holding my block, send
        // the other half to the partner, fold the partner's copy of my half into mine.
        int lo = 0, hi = p2;
        for (int mask = p2 / 2; mask > 0; mask >>= 1) {
          const int mid = lo + mask;
          const bool upper = (nr & mask) != 0;
          const int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
          const int send_lo = upper ? lo : mid, send_hi = upper ? mid : hi;
          auto keep = elems(keep_lo, keep_hi);
          ch.sendrecv_reduce(real(nr ^ mask), view<const T, M>(elems(send_lo, send_hi)), real(nr ^ mask),
                             view<const T, M>(keep), keep, op);
          lo = keep_lo;
          hi = keep_hi;
        }
        // Recursive doubling: swap complete groups of blocks, doubling each round.
        for (int mask = 1; mask < p2; mask <<= 1) {
          const int mine = nr & ~(mask - 1), theirs = (nr ^ mask) & ~(mask - 1);
          ch.sendrecv(real(nr ^ mask), view<const T, M>(elems(mine, mine + mask)), real(nr ^ mask),
                      elems(theirs, theirs + mask));
        }
      }
    }
    // Unfold: the odd partners return the result.
    if (r < 2 * extra) {
      if (r % 2 == 1) ch.send(r - 1, view<const T, M>(buf));
      else ch.recv(r + 1, buf);
    }
  }

  template <class Ch, class T, class M>
  void all_gather(Ch& ch, view<const T, M> in, view<T, M> out) const {
    const int p = ch.size(), r = ch.rank();
    const std::size_t blk = in.size();
    auto blocks = [blk](auto v, int first, int count) {
      return v.subview(static_cast<std::size_t>(first) * blk, static_cast<std::size_t>(count) * blk);
    };
    if ((p & (p - 1)) == 0) {
      auto mine = blocks(out, r, 1);
      ch.copy(in, mine);
      for (int mask = 1; mask < p; mask <<= 1) {
        const int partner = r ^ mask, a = r & ~(mask - 1), b = partner & ~(mask - 1);
        ch.sendrecv(partner, view<const T, M>(blocks(out, a, mask)), partner, blocks(out, b, mask));
      }
      return;
    }
    // Bruck: tmp block i holds rank (r + i) mod p's block; round k doubles what we hold.
    auto tmp = ch.template scratch<T>(0, static_cast<std::size_t>(p) * blk);
    ch.copy(in, tmp);
    for (int dist = 1; dist < p; dist <<= 1) {
      const int count = dist < p - dist ? dist : p - dist;
      ch.sendrecv(schedule::mod(r - dist, p), view<const T, M>(blocks(tmp, 0, count)),
                  schedule::mod(r + dist, p), blocks(tmp, dist, count));
    }
    if (blk == 0) return;
    const std::size_t head = static_cast<std::size_t>(p - r) * blk, tail = static_cast<std::size_t>(r) * blk;
    ch.copy(tmp.subview(0, head), out.subview(tail, head));
    ch.copy(tmp.subview(head, tail), out.subview(0, tail));
  }

  /// Rank r's `partial` is op over a contiguous range of ranks containing r; in round k it swaps
  /// it with rank r ^ 2^k. What comes from below is folded in front of `partial` and of the
  /// result; what comes from above behind `partial` only.
  template <class Ch, class T, class M, class Op>
  void scan(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    prefix(ch, in, out, op, true);
  }
  /// As scan, without this rank's own input; rank 0's `out` is left alone.
  template <class Ch, class T, class M, class Op>
  void exscan(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    prefix(ch, in, out, op, false);
  }

  template <class Ch>
  void barrier(Ch& ch) const {
    const int p = ch.size(), r = ch.rank();
    for (int dist = 1; dist < p; dist <<= 1)
      ch.sendrecv(schedule::mod(r + dist, p), typename Ch::template view_type<const char>{}, schedule::mod(r - dist, p),
                  typename Ch::template view_type<char>{});
  }
 private:
  template <class Ch, class T, class M, class Op>
  static void prefix(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op, bool inclusive) {
    const int p = ch.size(), r = ch.rank();
    const std::size_t n = in.size();
    auto partial = ch.template scratch<T>(0, n);
    auto theirs = ch.template scratch<T>(1, n);
    ch.copy(in, partial);  // before `out` (which may be `in`) is written
    if (inclusive) ch.copy(in, out);
    bool have = inclusive;  // whether `out` holds a result yet (exscan: from the first lower partner on)
    for (int mask = 1; mask < p; mask <<= 1) {
      const int partner = r ^ mask;
      if (partner >= p) continue;
      ch.sendrecv(partner, view<const T, M>(partial), partner, theirs);
      if (partner < r) {
        ch.combine(partial, view<const T, M>(theirs), view<const T, M>(partial), op);
        if (have) ch.combine(out, view<const T, M>(theirs), view<const T, M>(out), op);
        else ch.copy(view<const T, M>(theirs), out);
        have = true;
      } else {
        ch.combine(partial, view<const T, M>(partial), view<const T, M>(theirs), op);
      }
    }
  }
};

}  // namespace tutti::algo
