/// \file
/// `tutti::algo::direct`: every rank talks straight to the ranks it needs, no forwarding.
/// Linear schedules for rooted collectives, pairwise exchange (step s: send to rank + s, receive
/// from rank − s) for the all-to-all family. Fewest bytes per rank, p−1 messages per rank.
///
/// Schedules and α-β cost (p ranks, n bytes):
/// - all_to_all: pairwise, (p−1)·(α + n/p·β)
/// - gather / scatter: linear at the root, (p−1)·(α + n·β) at the root
/// - broadcast / reduce: linear, (p−1)·(α + n·β) at the root (+ γ)
/// - all_gather: pairwise, (p−1)·(α + n·β); reduce_scatter: pairwise, (p−1)·(α + n/p·(β + γ))
/// - all_reduce: pairwise reduce-scatter + pairwise all-gather, 2(p−1)·α + 2n(p−1)/p·β
/// - barrier: everyone reports to rank 0, rank 0 releases everyone
/// - scan / exscan: a chain 0 → 1 → … → p−1 (rank r combines what rank r−1 passes on with its
///   own, in rank order, and passes it on), in pieces of `chunk_bytes` so that the chain
///   pipelines: (p−1+k)·(α + n/k·(β + γ)) for k pieces
/// - the v-collectives: the same schedules with a count per rank (all_gather_v, all_to_all_v,
///   reduce_scatter_v pairwise; gather_v, scatter_v linear at the root); every message carries
///   one block, so its size is checked where it arrives against the receiver's count for it.
#pragma once

#include <cstddef>
#include <string_view>

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/schedule.hpp"

namespace tutti::algo {

struct direct {
  static constexpr std::string_view name = "direct";
  /// scan and exscan pass the prefix down the chain in pieces of at most this many bytes.
  std::size_t chunk_bytes = std::size_t{256} << 10;

  template <class Ch, class T, class M>
  void broadcast(Ch& ch, view<T, M> buf, int root) const {
    const int p = ch.size(), r = ch.rank();
    if (r != root) return ch.recv(root, buf);
    for (int i = 1; i < p; ++i) ch.send(schedule::mod(root + i, p), view<const T, M>(buf));
  }

  template <class Ch, class T, class M, class Op>
  void reduce(Ch& ch, view<T, M> buf, int root, const Op& op) const {
    const int p = ch.size(), r = ch.rank();
    if (r != root) return ch.send(root, view<const T, M>(buf));
    for (int i = 1; i < p; ++i) ch.recv_reduce(schedule::mod(root + i, p), view<const T, M>(buf), buf, op);
  }

  template <class Ch, class T, class M, class Op>
  void all_reduce(Ch& ch, view<T, M> buf, const Op& op) const {
    const int p = ch.size(), r = ch.rank();
    const std::size_t n = buf.size();
    auto blk = [&](int b) {
      const auto rg = schedule::block(n, p, b);
      return buf.subview(rg.begin, rg.size());
    };
    // Reduce-scatter: rank r collects everybody's copy of block r.
    for (int s = 1; s < p; ++s) {
      const int to = schedule::mod(r + s, p), from = schedule::mod(r - s, p);
      ch.sendrecv_reduce(to, view<const T, M>(blk(to)), from, view<const T, M>(blk(r)), blk(r), op);
    }
    // All-gather: hand block r to everybody.
    for (int s = 1; s < p; ++s) {
      const int to = schedule::mod(r + s, p), from = schedule::mod(r - s, p);
      ch.sendrecv(to, view<const T, M>(blk(r)), from, blk(from));
    }
  }

  template <class Ch, class T, class M>
  void gather(Ch& ch, view<const T, M> in, view<T, M> out, int root) const {
    const int p = ch.size(), r = ch.rank();
    if (r != root) return ch.send(root, in);
    auto own = ch.copy_beside(in, block(out, r, in.size()));  // while the others' blocks arrive
    for (int i = 1; i < p; ++i) {
      const int from = schedule::mod(root + i, p);
      ch.recv(from, block(out, from, in.size()));
    }
  }

  template <class Ch, class T, class M>
  void scatter(Ch& ch, view<const T, M> in, view<T, M> out, int root) const {
    const int p = ch.size(), r = ch.rank();
    if (r != root) return ch.recv(root, out);
    auto own = ch.copy_beside(block(in, r, out.size()), out);  // while the others' blocks leave
    for (int i = 1; i < p; ++i) {
      const int to = schedule::mod(root + i, p);
      ch.send(to, block(in, to, out.size()));
    }
  }

  template <class Ch, class T, class M>
  void all_gather(Ch& ch, view<const T, M> in, view<T, M> out) const {
    const int p = ch.size(), r = ch.rank();
    auto own = ch.copy_beside(in, block(out, r, in.size()));
    for (int s = 1; s < p; ++s)
      ch.sendrecv(schedule::mod(r + s, p), in, schedule::mod(r - s, p),
                  block(out, schedule::mod(r - s, p), in.size()));
  }

  template <class Ch, class T, class M>
  void all_to_all(Ch& ch, view<const T, M> in, view<T, M> out) const {
    const int p = ch.size(), r = ch.rank();
    const std::size_t blk = in.size() / static_cast<std::size_t>(p);
    auto own = ch.copy_beside(block(in, r, blk), block(out, r, blk));
    for (int s = 1; s < p; ++s) {
      const int to = schedule::mod(r + s, p), from = schedule::mod(r - s, p);
      ch.sendrecv(to, block(in, to, blk), from, block(out, from, blk));
    }
  }

  template <class Ch, class T, class M, class Op>
  void reduce_scatter(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    const int p = ch.size(), r = ch.rank();
    const std::size_t blk = out.size();
    for (int s = 1; s < p; ++s) {
      const int to = schedule::mod(r + s, p), from = schedule::mod(r - s, p);
      ch.sendrecv_reduce(to, block(in, to, blk), from,
                         s == 1 ? block(in, r, blk) : view<const T, M>(out), out, op);
    }
  }

  // ---- the v-collectives --------------------------------------------------------------------

  template <class Ch, class T, class M>
  void all_gather_v(Ch& ch, view<const T, M> in, view<T, M> out, const block_counts& b) const {
    const int p = ch.size(), r = ch.rank();
    ch.copy(in, block_of(out, b, r));
    for (int s = 1; s < p; ++s) {
      const int to = schedule::mod(r + s, p), from = schedule::mod(r - s, p);
      auto label = ch.block(from);
      ch.sendrecv(to, in, from, block_of(out, b, from));
    }
  }

  template <class Ch, class T, class M>
  void gather_v(Ch& ch, view<const T, M> in, view<T, M> out, const block_counts& b, int root) const {
    const int p = ch.size(), r = ch.rank();
    if (r != root) return ch.send(root, in);
    ch.copy(in, block_of(out, b, r));
    for (int i = 1; i < p; ++i) {
      const int from = schedule::mod(root + i, p);
      auto label = ch.block(from);
      ch.recv(from, block_of(out, b, from));
    }
  }

  template <class Ch, class T, class M>
  void scatter_v(Ch& ch, view<const T, M> in, const block_counts& b, view<T, M> out, int root) const {
    const int p = ch.size(), r = ch.rank();
    if (r != root) {
      auto label = ch.block(r);
      return ch.recv(root, out);
    }
    for (int i = 1; i < p; ++i) {
      const int to = schedule::mod(root + i, p);
      ch.send(to, block_of(in, b, to));
    }
    ch.copy(block_of(in, b, r), out);
  }

  template <class Ch, class T, class M>
  void all_to_all_v(Ch& ch, view<const T, M> in, const block_counts& send, view<T, M> out,
                    const block_counts& recv) const {
    const int p = ch.size(), r = ch.rank();
    ch.copy(block_of(in, send, r), block_of(out, recv, r));
    for (int s = 1; s < p; ++s) {
      const int to = schedule::mod(r + s, p), from = schedule::mod(r - s, p);
      auto label = ch.block(from);
      ch.sendrecv(to, block_of(in, send, to), from, block_of(out, recv, from));
    }
  }

  template <class Ch, class T, class M, class Op>
  void reduce_scatter_v(Ch& ch, view<const T, M> in, view<T, M> out, const block_counts& b, const Op& op) const {
    const int p = ch.size(), r = ch.rank();
    auto label = ch.block(r);
    for (int s = 1; s < p; ++s) {
      const int to = schedule::mod(r + s, p), from = schedule::mod(r - s, p);
      ch.sendrecv_reduce(to, block_of(in, b, to), from, s == 1 ? block_of(in, b, r) : view<const T, M>(out), out, op);
    }
  }

  // ---- prefix reductions --------------------------------------------------------------------

  /// Rank r receives the prefix of ranks 0..r−1 from r−1, piece by piece, and passes on
  /// op(prefix, its own): in rank order, so a non-commutative op is right.
  template <class Ch, class T, class M, class Op>
  void scan(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    const int p = ch.size(), r = ch.rank();
    const std::size_t n = in.size(), piece = piece_elems<T>();
    for (std::size_t k = 0, pieces = schedule::pieces(n, piece); k < pieces; ++k) {
      const auto rg = schedule::piece_of({0, n}, piece, k);
      const auto mine = in.subview(rg.begin, rg.size());
      const auto res = out.subview(rg.begin, rg.size());
      if (r == 0) {
        ch.copy(mine, res);
      } else {
        auto prefix = ch.template scratch<T>(0, rg.size());
        ch.recv(r - 1, prefix);
        ch.combine(res, view<const T, M>(prefix), mine, op);
      }
      if (r + 1 < p) ch.send(r + 1, view<const T, M>(res));
    }
  }

  /// As scan, but rank r keeps the prefix of ranks 0..r−1 (rank 0's `out` is left alone).
  template <class Ch, class T, class M, class Op>
  void exscan(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    const int p = ch.size(), r = ch.rank();
    const std::size_t n = in.size(), piece = piece_elems<T>();
    for (std::size_t k = 0, pieces = schedule::pieces(n, piece); k < pieces; ++k) {
      const auto rg = schedule::piece_of({0, n}, piece, k);
      const auto mine = in.subview(rg.begin, rg.size());
      if (r == 0) {
        ch.send(1, mine);
        continue;
      }
      auto prefix = ch.template scratch<T>(0, rg.size());
      ch.recv(r - 1, prefix);
      if (r + 1 < p) {  // what goes on, before `out` (which may be `in`) takes the prefix
        auto next = ch.template scratch<T>(1, rg.size());
        ch.combine(next, view<const T, M>(prefix), mine, op);
        ch.send(r + 1, view<const T, M>(next));
      }
      ch.copy(view<const T, M>(prefix), out.subview(rg.begin, rg.size()));
    }
  }

  template <class Ch>
  void barrier(Ch& ch) const {
    const int p = ch.size(), r = ch.rank();
    if (r != 0) {
      ch.send(0, none<Ch, const char>());
      ch.recv(0, none<Ch, char>());
      return;
    }
    for (int i = 1; i < p; ++i) ch.recv(i, none<Ch, char>());
    for (int i = 1; i < p; ++i) ch.send(i, none<Ch, const char>());
  }

 private:
  template <class T>
  std::size_t piece_elems() const noexcept {
    return chunk_bytes / sizeof(T) ? chunk_bytes / sizeof(T) : 1;
  }
  template <class T, class M>
  static view<T, M> block(view<T, M> v, int b, std::size_t blk) {
    return v.subview(static_cast<std::size_t>(b) * blk, blk);
  }
  /// Rank b's block of a v-collective's buffer.
  template <class T, class M>
  static view<T, M> block_of(view<T, M> v, const block_counts& c, int b) {
    return v.subview(c.offset(b), c.count(b));
  }
  /// An empty view in the channel's memory: a message that carries only its fingerprint.
  template <class Ch, class T>
  static typename Ch::template view_type<T> none() {
    return {};
  }
};


}  // namespace tutti::algo
