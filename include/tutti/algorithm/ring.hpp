/// \file
/// `tutti::algo::ring`: every rank talks to its two ring neighbours; bandwidth-optimal for large
/// messages. Each step's block is cut into pieces of about `chunk_bytes`, and each piece moves
/// (and is reduced) as soon as its predecessor piece has, so ranks work on different pieces at
/// once: the ring is a pipeline.
///
/// Schedules and α-β cost (p ranks, n bytes, α per message, β per byte, γ per reduced byte):
/// - all_reduce: reduce-scatter then all-gather, 2(p−1) steps:
///   2(p−1)·α·pieces + 2n(p−1)/p·β + n(p−1)/p·γ
/// - reduce_scatter, all_gather: the halves above: (p−1)·α·pieces + n(p−1)/p·β (+ γ)
/// - broadcast: a pipelined chain root → root+1 → … : (p−1+k−1)·α + n·β·(1 + (p−2)/k), k pieces
/// - reduce: the same chain, reversed, ending at the root; inner ranks accumulate in scratch
/// - barrier: p−1 rounds of empty messages to the next rank
/// - all_gather_v, reduce_scatter_v: the same rings with a count per rank, pieces cut from the
///   largest block: (p−1)·α·pieces + (total − own)·β (+ γ)
#pragma once

#include <cstddef>
#include <string_view>

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/schedule.hpp"

namespace tutti::algo {

struct ring {
  static constexpr std::string_view name = "ring";
  /// Pipelining unit: each step's block moves in pieces of about this many bytes.
  std::size_t chunk_bytes = std::size_t{1} << 20;

  template <class Ch, class T, class M, class Op>
  void all_reduce(Ch& ch, view<T, M> buf, const Op& op) const {
    const int p = ch.size(), r = ch.rank(), next = schedule::mod(r + 1, p),
              prev = schedule::mod(r - 1, p);
    const std::size_t n = buf.size();
    const std::size_t k = pieces_for<T>(schedule::block(n, p, 0).size());
    auto piece = [&](int b, std::size_t i) { return sub(buf, schedule::block(n, p, b), k, i); };
    // Reduce-scatter. Step s: push my partial of block r-s-1 to the next rank while the previous
    // rank's partial of block r-s-2 arrives and is folded into mine. After p-1 steps block r is
    // complete here.
    for (int s = 0; s + 1 < p; ++s) {
      const int sb = schedule::ring_rs_send_block(r, p, s), rb = schedule::ring_rs_recv_block(r, p, s);
      for (std::size_t i = 0; i < k; ++i) {
        auto in = piece(rb, i);
        ch.sendrecv_reduce(next, as_const(piece(sb, i)), prev, as_const(in), in, op);
      }
    }
    // All-gather. Step s: pass the complete block r-s on, receive the complete block r-s-1.
    for (int s = 0; s + 1 < p; ++s) {
      const int sb = schedule::ring_ag_send_block(r, p, s), rb = schedule::ring_ag_recv_block(r, p, s);
      for (std::size_t i = 0; i < k; ++i) ch.sendrecv(next, as_const(piece(sb, i)), prev, piece(rb, i));
    }
  }

  template <class Ch, class T, class M, class Op>
  void reduce_scatter(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    const int p = ch.size(), r = ch.rank(), next = schedule::mod(r + 1, p),
              prev = schedule::mod(r - 1, p);
    const std::size_t blk = out.size();
    const std::size_t k = pieces_for<T>(blk);
    // The user's input stays untouched: partials travel through two scratch blocks used in
    // turn (the next rank may still be reading the one written a step earlier).
    view<T, M> acc[2] = {ch.template scratch<T>(0, blk), ch.template scratch<T>(1, blk)};
    auto whole = [&](int b) { return in.subview(static_cast<std::size_t>(b) * blk, blk); };
    for (int s = 0; s + 1 < p; ++s) {
      const int sb = schedule::ring_rs_send_block(r, p, s), rb = schedule::ring_rs_recv_block(r, p, s);
      view<const T, M> src = s == 0 ? whole(sb) : as_const(acc[(s - 1) % 2]);
      view<T, M> dst = s + 2 == p ? out : acc[s % 2];  // the last step lands block r in `out`
      const schedule::range all{0, blk};
      for (std::size_t i = 0; i < k; ++i)
        ch.sendrecv_reduce(next, sub(src, all, k, i), prev, sub(whole(rb), all, k, i),
                           sub(dst, all, k, i), op);
    }
  }

  template <class Ch, class T, class M>
  void all_gather(Ch& ch, view<const T, M> in, view<T, M> out) const {
    const int p = ch.size(), r = ch.rank(), next = schedule::mod(r + 1, p),
              prev = schedule::mod(r - 1, p);
    const std::size_t blk = in.size();
    auto mine = out.subview(static_cast<std::size_t>(r) * blk, blk);
    ch.copy(in, mine);
    const std::size_t k = pieces_for<T>(blk);
    const std::size_t n = blk * static_cast<std::size_t>(p);
    auto piece = [&](int b, std::size_t i) { return sub(out, schedule::block(n, p, b), k, i); };
    for (int s = 0; s + 1 < p; ++s) {
      const int sb = schedule::ring_ag_send_block(r, p, s), rb = schedule::ring_ag_recv_block(r, p, s);
      for (std::size_t i = 0; i < k; ++i) ch.sendrecv(next, as_const(piece(sb, i)), prev, piece(rb, i));
    }
  }

  template <class Ch, class T, class M>
  void all_gather_v(Ch& ch, view<const T, M> in, view<T, M> out, const block_counts& b) const {
    const int p = ch.size(), r = ch.rank(), next = schedule::mod(r + 1, p), prev = schedule::mod(r - 1, p);
    ch.copy(in, out.subview(b.offset(r), b.count(r)));
    const std::size_t k = pieces_for<T>(b.largest);
    auto piece = [&](int blk, std::size_t i) { return sub(out, {b.offset(blk), b.offset(blk) + b.count(blk)}, k, i); };
    // Step s: pass block r-s on, receive block r-s-1 (one message a block when it is one piece,
    // so a block that disagrees is named by its count).
    for (int s = 0; s + 1 < p; ++s) {
      const int sb = schedule::ring_ag_send_block(r, p, s), rb = schedule::ring_ag_recv_block(r, p, s);
      auto label = ch.block(k == 1 ? rb : -1);
      for (std::size_t i = 0; i < k; ++i) ch.sendrecv(next, as_const(piece(sb, i)), prev, piece(rb, i));
    }
  }

  template <class Ch, class T, class M, class Op>
  void reduce_scatter_v(Ch& ch, view<const T, M> in, view<T, M> out, const block_counts& b, const Op& op) const {
    const int p = ch.size(), r = ch.rank(), next = schedule::mod(r + 1, p), prev = schedule::mod(r - 1, p);
    const std::size_t k = pieces_for<T>(b.largest);
    // As reduce_scatter: partials travel through two scratch blocks used in turn, sized for the
    // largest block; step s sends the partial of block r-s-1 and folds block r-s-2 into its own.
    view<T, M> acc[2] = {ch.template scratch<T>(0, b.largest), ch.template scratch<T>(1, b.largest)};
    auto whole = [&](int blk) { return in.subview(b.offset(blk), b.count(blk)); };
    for (int s = 0; s + 1 < p; ++s) {
      const int sb = schedule::ring_rs_send_block(r, p, s), rb = schedule::ring_rs_recv_block(r, p, s);
      view<const T, M> src = s == 0 ? whole(sb) : as_const(acc[(s - 1) % 2].subview(0, b.count(sb)));
      view<T, M> dst = s + 2 == p ? out : acc[s % 2].subview(0, b.count(rb));  // the last step lands block r in `out`
      const schedule::range send_all{0, b.count(sb)}, recv_all{0, b.count(rb)};
      auto label = ch.block(k == 1 ? rb : -1);
      for (std::size_t i = 0; i < k; ++i)
        ch.sendrecv_reduce(next, sub(src, send_all, k, i), prev, sub(whole(rb), recv_all, k, i),
                           sub(dst, recv_all, k, i), op);
    }
  }

  template <class Ch, class T, class M>
  void broadcast(Ch& ch, view<T, M> buf, int root) const {
    const int p = ch.size(), r = ch.rank();
    const int vr = schedule::mod(r - root, p), next = schedule::mod(r + 1, p),
              prev = schedule::mod(r - 1, p);
    const std::size_t k = pieces_for<T>(buf.size());
    const schedule::range all{0, buf.size()};
    auto piece = [&](std::size_t i) { return sub(buf, all, k, i); };
    if (vr == 0) {  // the root feeds the chain piece by piece
      for (std::size_t i = 0; i < k; ++i) ch.send(next, as_const(piece(i)));
    } else if (vr == p - 1) {  // the tail only receives
      for (std::size_t i = 0; i < k; ++i) ch.recv(prev, piece(i));
    } else {  // inner ranks forward piece i-1 while piece i arrives
      ch.recv(prev, piece(0));
      for (std::size_t i = 1; i < k; ++i) ch.sendrecv(next, as_const(piece(i - 1)), prev, piece(i));
      ch.send(next, as_const(piece(k - 1)));
    }
  }

  template <class Ch, class T, class M, class Op>
  void reduce(Ch& ch, view<T, M> buf, int root, const Op& op) const {
    const int p = ch.size(), r = ch.rank();
    // Chain position: root+1 starts, the root ends.
    const int q = schedule::mod(r - root - 1, p), next = schedule::mod(r + 1, p),
              prev = schedule::mod(r - 1, p);
    const std::size_t k = pieces_for<T>(buf.size());
    const schedule::range all{0, buf.size()};
    auto mine = [&](std::size_t i) { return as_const(sub(buf, all, k, i)); };
    if (q == 0) {
      for (std::size_t i = 0; i < k; ++i) ch.send(next, mine(i));
    } else if (q == p - 1) {  // the root folds the chain's result into its own buffer
      for (std::size_t i = 0; i < k; ++i) ch.recv_reduce(prev, mine(i), sub(buf, all, k, i), op);
    } else {  // inner ranks keep their input intact and accumulate in scratch
      auto acc = ch.template scratch<T>(0, buf.size());
      ch.recv_reduce(prev, mine(0), sub(acc, all, k, 0), op);
      for (std::size_t i = 1; i < k; ++i)
        ch.sendrecv_reduce(next, as_const(sub(acc, all, k, i - 1)), prev, mine(i),
                           sub(acc, all, k, i), op);
      ch.send(next, as_const(sub(acc, all, k, k - 1)));
    }
  }

  template <class Ch>
  void barrier(Ch& ch) const {
    const int p = ch.size(), r = ch.rank();
    typename Ch::template view_type<const char> none;
    typename Ch::template view_type<char> nothing;
    // After round s, rank r has heard (transitively) from ranks r-1 .. r-s-1.
    for (int s = 0; s + 1 < p; ++s) ch.sendrecv(schedule::mod(r + 1, p), none, schedule::mod(r - 1, p), nothing);
  }

 private:
  template <class T>
  std::size_t pieces_for(std::size_t largest_block) const {
    return schedule::pieces(largest_block, chunk_bytes / sizeof(T) ? chunk_bytes / sizeof(T) : 1);
  }
  /// Piece i of k of the element range r of v.
  template <class T, class M>
  static view<T, M> sub(view<T, M> v, schedule::range r, std::size_t k, std::size_t i) {
    const auto piece = schedule::block(r.size(), static_cast<int>(k), static_cast<int>(i));
    return v.subview(r.begin + piece.begin, piece.size());
  }
  template <class T, class M>
  static view<const T, M> as_const(view<T, M> v) {
    return v;
  }
};

}  // namespace tutti::algo
