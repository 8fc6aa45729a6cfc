/// \file
/// `tutti::algo::tree`: binomial trees rooted at the call's root (relative rank
/// vr = (rank − root) mod p; vr's parent is vr minus its lowest set bit). Latency-optimal for
/// small messages: ⌈lg p⌉ rounds.
///
/// Schedules and α-β cost (p ranks, n bytes per rank's buffer):
/// - broadcast: ⌈lg p⌉·(α + n·β)
/// - reduce: ⌈lg p⌉·(α + n·β + n·γ); inner nodes accumulate in scratch, leaving the user's buffer
///   untouched (only the root's buffer changes)
/// - gather / scatter: subtrees move as one message: ⌈lg p⌉·α + n(p−1)·β; a root ≠ 0 rotates once
/// - all_reduce = reduce to 0 + broadcast from 0; all_gather = gather to 0 + broadcast;
///   reduce_scatter = reduce to 0 (of a scratch copy) + scatter; barrier = empty gather + broadcast
#pragma once

#include <cstddef>
#include <string_view>

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/schedule.hpp"

namespace tutti::algo {

struct tree {
  static constexpr std::string_view name = "tree";

  template <class Ch, class T, class M>
  void broadcast(Ch& ch, view<T, M> buf, int root) const {
    const int p = ch.size(), vr = schedule::mod(ch.rank() - root, p);
    const int low = schedule::binomial_lowbit(vr, p);
    if (vr != 0) ch.recv(real(vr - low, root, p), buf);
    // Largest subtree first: it has the most work left to do.
    for (int mask = low >> 1; mask > 0; mask >>= 1)
      if (vr + mask < p) ch.send(real(vr + mask, root, p), view<const T, M>(buf));
  }

  template <class Ch, class T, class M, class Op>
  void reduce(Ch& ch, view<T, M> buf, int root, const Op& op) const {
    const int p = ch.size(), vr = schedule::mod(ch.rank() - root, p);
    const int low = schedule::binomial_lowbit(vr, p);
    view<T, M> acc = buf;
    bool first = true;
    for (int mask = 1; mask < low && vr + mask < p; mask <<= 1) {
      if (first && vr != 0) acc = ch.template scratch<T>(0, buf.size());  // keep buf intact
      ch.recv_reduce(real(vr + mask, root, p), view<const T, M>(first ? buf : acc), acc, op);
      first = false;
    }
    if (vr != 0) ch.send(real(vr - low, root, p), view<const T, M>(acc));
  }

  template <class Ch, class T, class M, class Op>
  void all_reduce(Ch& ch, view<T, M> buf, const Op& op) const {
    reduce(ch, buf, 0, op);
    broadcast(ch, buf, 0);
  }

  template <class Ch, class T, class M>
  void gather(Ch& ch, view<const T, M> in, view<T, M> out, int root) const {
    const int p = ch.size(), vr = schedule::mod(ch.rank() - root, p);
    const int low = schedule::binomial_lowbit(vr, p), sub = schedule::binomial_subtree(vr, p);
    const std::size_t blk = in.size();
    auto blocks = [blk](auto v, int first, int count) {
      return v.subview(static_cast<std::size_t>(first) * blk, static_cast<std::size_t>(count) * blk);
    };
    if (sub == 1 && vr != 0) {  // a leaf sends its input as it is
      ch.send(real(vr - low, root, p), in);
      return;
    }
    // Collect the subtree's blocks in relative order: straight into `out` when the root is 0.
    view<T, M> acc = (vr == 0 && root == 0) ? out : ch.template scratch<T>(0, static_cast<std::size_t>(sub) * blk);
    ch.copy(in, acc);
    for (int mask = 1; mask < low && vr + mask < p; mask <<= 1)
      ch.recv(real(vr + mask, root, p), blocks(acc, mask, schedule::binomial_subtree(vr + mask, p)));
    if (vr != 0) {
      ch.send(real(vr - low, root, p), view<const T, M>(blocks(acc, 0, sub)));
    } else if (root != 0) {  // relative block i belongs to rank (i + root) mod p
      rotate_copy(ch, view<const T, M>(acc), out, root, p, blk, /*to_real=*/true);
    }
  }

  template <class Ch, class T, class M>
  void scatter(Ch& ch, view<const T, M> in, view<T, M> out, int root) const {
    const int p = ch.size(), vr = schedule::mod(ch.rank() - root, p);
    const int low = schedule::binomial_lowbit(vr, p), sub = schedule::binomial_subtree(vr, p);
    const std::size_t blk = out.size();
    auto blocks = [blk](auto v, int first, int count) {
      return v.subview(static_cast<std::size_t>(first) * blk, static_cast<std::size_t>(count) * blk);
    };
    if (sub == 1 && vr != 0) {  // a leaf receives its block straight into out
      ch.recv(real(vr - low, root, p), out);
      return;
    }
    view<const T, M> src;
    if (vr == 0 && root == 0) {
      src = in;
    } else {
      auto tmp = ch.template scratch<T>(0, static_cast<std::size_t>(sub) * blk);
      if (vr == 0) rotate_copy(ch, in, tmp, root, p, blk, /*to_real=*/false);
      else ch.recv(real(vr - low, root, p), tmp);
      src = tmp;
    }
    for (int mask = low >> 1; mask > 0; mask >>= 1)
      if (vr + mask < p)
        ch.send(real(vr + mask, root, p), blocks(src, mask, schedule::binomial_subtree(vr + mask, p)));
    ch.copy(src.subview(0, out.size()), out);
  }

  template <class Ch, class T, class M>
  void all_gather(Ch& ch, view<const T, M> in, view<T, M> out) const {
    gather(ch, in, out, 0);
    broadcast(ch, out, 0);
  }

  template <class Ch, class T, class M, class Op>
  void reduce_scatter(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    // reduce() needs a writable buffer and leaves non-roots' buffers alone: one scratch copy.
    auto tmp = ch.template scratch<T>(1, in.size());
    ch.copy(in, tmp);
    reduce(ch, tmp, 0, op);
    scatter(ch, view<const T, M>(tmp), out, 0);
  }

  template <class Ch>
  void barrier(Ch& ch) const {
    gather(ch, typename Ch::template view_type<const char>{}, typename Ch::template view_type<char>{}, 0);
    broadcast(ch, typename Ch::template view_type<char>{}, 0);
  }

 private:
  static int real(int vr, int root, int p) { return schedule::mod(vr + root, p); }

  /// Relative order (block i is rank (i + root) mod p) <-> rank order, in two copies.
  template <class Ch, class T, class M>
  static void rotate_copy(Ch& ch, view<const T, M> src, view<T, M> dst, int root, int p, std::size_t blk, bool to_real) {
    if (blk == 0) return;
    const std::size_t head = static_cast<std::size_t>(p - root) * blk;  // relative [0, p-root)
    const std::size_t tail = static_cast<std::size_t>(root) * blk;
    if (to_real) {
      ch.copy(src.subview(0, head), dst.subview(tail, head));
      ch.copy(src.subview(head, tail), dst.subview(0, tail));
    } else {
      ch.copy(src.subview(tail, head), dst.subview(0, head));
      ch.copy(src.subview(0, tail), dst.subview(head, tail));
    }
  }
};

}  // namespace tutti::algo
