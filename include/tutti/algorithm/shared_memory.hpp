/// \file
/// `tutti::algo::shared_memory`: native schedules for transports whose ranks can load from each
/// other's memory (the `shared_window` capability: `tutti::shm`). Each rank owns a window of two
/// halves and a phase counter. A collective is a sequence of phases; in phase g a rank writes
/// into half g % 2 of its window, posts g, and reads what its peers posted at g. Every rank
/// finishes its reads of phase g before it posts g+1, and writes half g % 2 only once every peer
/// has posted g−1, so no call needs a closing barrier and consecutive chunks overlap.
///
/// | collective     | schedule per chunk (chunks sized to a window half)                    |
/// |----------------|-----------------------------------------------------------------------|
/// | all_reduce     | ≤ `one_shot_bytes`: one shot: copy in, post, every rank reduces every  |
/// |                | slot in rank order 0..p−1 (bitwise-identical results everywhere).      |
/// |                | larger: two shot: copy in, post; rank r reduces block r of every slot  |
/// |                | into its other half (and its output), post; everyone copies the other  |
/// |                | blocks out.                                                            |
/// |                | ≥ `single_copy_bytes` where peers' memory is readable (process_vm_readv) |
/// |                | and the start-up speed vote found the kernel copy at least half as fast |
/// |                | as a memcpy: no windows; see `all_reduce_single_copy`.                 |
/// | reduce_scatter | copy in, post; reduce own block from every slot                        |
/// | all_gather     | copy own block in, post; copy every block out                          |
/// | broadcast      | root copies in and posts; the others copy out (and the root sees      |
/// |                | every post of the last chunk before it returns: see confirm_root)      |
/// | reduce         | copy in, post; the root reduces every slot in rank order               |
/// | gather/scatter | copy in, post; the root (or every rank) copies out                     |
/// | all_to_all     | copy every block in, post; copy own block out of every slot            |
/// | barrier        | post, wait for every peer's post                                       |
///
/// all_gather, gather, scatter and all_to_all with blocks of at least `single_copy_block_bytes`,
/// where peers' memory is readable: no windows; each rank reads the blocks it needs straight from
/// their owners' buffers (see `single_copy_blocks`).
///
/// The v-collectives run the same schedules with a count per rank, chunked by the largest block;
/// gather_v, scatter_v and all_to_all_v first publish the counts only some ranks know (one phase)
/// and check them where they meet; all_gather_v, gather_v, scatter_v and all_to_all_v read
/// straight from the owners where the largest block reaches `single_copy_block_bytes`. Host
/// memory only (the windows are).
///
/// On a communicator without windows (a sub-group), each collective runs the point-to-point
/// schedule `automatic` would pick instead.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
// Without AVX2 only SSE2's streaming stores are used: <emmintrin.h> is ~5k lines where
// <immintrin.h> is ~47k (0.3 s and 80 MB of every user translation unit's compile).
#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/recursive_doubling.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/algorithm/schedule.hpp"
#include "tutti/algorithm/tree.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/op/kernels.hpp"
#include "tutti/transport/capabilities.hpp"

namespace tutti {

namespace algo {

struct shared_memory {
  static constexpr std::string_view name = "shared_memory";
  /// What it needs of a transport (its schedules run on host memory only).
  static constexpr std::string_view needs = "a transport with shared windows (tutti::shm)";
  /// Where the transport has a window, reduce, all_reduce and reduce_scatter(_v) fold every
  /// element in rank order, `slot 0 ∘ slot 1 ∘ …` (`reduce_from`): what `op::ordered` asks, so
  /// the communicator runs those calls here as they are (group/ordered_path.hpp).
  static constexpr bool folds_in_rank_order = true;
  /// all_reduce runs one shot while bytes·(p−1)² is at most this (and the message fits a window
  /// half): every rank reads all p slots, so the two-shot schedule wins sooner as p grows
  /// (measured here: up to 256 KiB at 2 ranks, 32 KiB at 4).
  std::size_t one_shot_bytes = std::size_t{256} << 10;
  /// Two-shot all_reduce moves the message in chunks of at most this many bytes (and a window
  /// half), small enough that a chunk's copies and reductions stay in cache.
  std::size_t chunk_bytes = std::size_t{512} << 10;
  /// Two-shot all_reduce reduces a rank's own block in pieces of this many bytes (each copied to
  /// the output while still in L1).
  std::size_t own_piece_bytes = std::size_t{16} << 10;
  /// all_reduce from this many bytes reads peers' inputs straight from their processes
  /// (process_vm_readv) where the transport's start-up probe allows it, instead of copying them
  /// through the windows (`single_copy = false`: never). Below it, the windows win: a kernel
  /// copy costs a system call and pins pages, and small blocks stay in cache anyway.
  bool single_copy = true;
  std::size_t single_copy_bytes = std::size_t{2} << 20;
  /// all_gather, gather, scatter and all_to_all read each block straight from its owner's
  /// buffer (process_vm_readv, where `single_copy` and the probe allow it) once a rank's block
  /// (one rank's share) is at least this large: one kernel copy per byte instead of a copy into
  /// a window and one out of it.
  std::size_t single_copy_block_bytes = std::size_t{128} << 10;

  template <class Ch, class T, class Op>
    requires shared_window<typename Ch::transport_type>
  void all_reduce(Ch& ch, view<T> buf, const Op& op) const {
    all_reduce(ch, view<const T>(buf), buf, op);
  }

  /// Out of place: reads `in` once (into the window) and writes `out` once.
  template <class Ch, class T, class Op>
    requires shared_window<typename Ch::transport_type>
  void all_reduce(Ch& ch, view<const T> in, view<T> out, const Op& op) const {
    if (!ch.transport().has_window()) {
      if (in.data() != out.data()) copy_out(out.data(), reinterpret_cast<const std::byte*>(in.data()), in.size_bytes());
      return recursive_doubling{}.all_reduce(ch, out, op);
    }
    phases<Ch> ph(ch);
    const std::size_t n = in.size(), bytes = in.size_bytes();
    const std::size_t peers = static_cast<std::size_t>(ch.size() - 1);
    if (bytes * peers * peers <= one_shot_bytes && bytes <= ph.half_bytes()) {
      const auto g = ph.begin();
      copy_in(ph.mine(g), in.data(), bytes);
      ph.post(g);
      ph.wait_all(g);
      reduce_slots<T>(ph, g, 0, out.data(), n, op);
      return;
    }
    const int p = ch.size(), me = ch.rank();
    if (single_copy && bytes >= single_copy_bytes && ph.single_copy_reduces()) return all_reduce_single_copy(ph, p, me, in, out, op);
    const std::size_t fit = std::min(ph.template elems<T>(1), std::max<std::size_t>(chunk_bytes / sizeof(T), 1));
    const std::size_t chunk = std::max<std::size_t>(fit / static_cast<std::size_t>(p), 1) * static_cast<std::size_t>(p);
    // Stream large out-of-place outputs past the cache (nothing re-reads them soon); in place,
    // the chunk's lines were just read into cache by the copy-in, so plain stores are cheaper.
    const bool stream = bytes >= stream_bytes && !detail::overlaps(in, view<const T>(out));
    // Rank r's chunk stays where it is when the peers can read it there, in its arena
    // (`comm.allocate`: zero copy). Safe in place too: block r of a chunk is read only by rank r,
    // and a rank overwrites the other blocks only after every rank has posted that it finished
    // reducing them.
    for_each_chunk(n, chunk, [&](std::size_t at, std::size_t m) {
      // Phase a: every rank's chunk in its arena or its slot. Rank r then reduces block r of all
      // of them into its other half, its own straight from its input.
      const auto a = ph.begin();
      const auto mine = schedule::block(m, p, me);
      if (!ph.offer_source(a, in.data() + at, m * sizeof(T), false)) {
        // The peers need every block but this rank's own, which it reads from its input.
        copy_in(ph.mine(a), in.data() + at, mine.begin * sizeof(T));
        copy_in(ph.mine(a) + mine.end * sizeof(T), in.data() + at + mine.end, (m - mine.end) * sizeof(T));
      }
      ph.post(a);
      ph.wait_all(a);
      const std::size_t offset = mine.begin * sizeof(T);
      T* result = reinterpret_cast<T*>(ph.mine(a + 1));
      T* own_out = out.data() + at + mine.begin;
      // A piece at a time, so each reduced piece is copied into this rank's output while it is
      // still in cache, not read back from the window after phase b.
      const std::size_t piece = std::max<std::size_t>(own_piece_bytes / sizeof(T), 1);
      for (std::size_t i = 0; i < mine.size(); i += piece) {
        const std::size_t k = std::min(piece, mine.size() - i);
        reduce_from<T>(ph, [&](int r) {
          if (r == me) return in.data() + at + mine.begin + i;
          return reinterpret_cast<const T*>(ph.input(r, a, offset + i * sizeof(T), k * sizeof(T), r == 0 ? 0 : 1));
        }, result + i, k, op);
        if (stream) stream_out(own_out + i, reinterpret_cast<const std::byte*>(result + i), k * sizeof(T));
        else copy_out(own_out + i, reinterpret_cast<const std::byte*>(result + i), k * sizeof(T));
      }
      // Phase b: the reduced blocks, each in its owner's other half; everyone copies the others out.
      ph.post(a + 1);
      ph.wait_all(a + 1);
      for (int r = 0; r < p; ++r) {
        if (r == me) continue;
        const auto blk = schedule::block(m, p, r);
        if (stream) stream_out(out.data() + at + blk.begin, ph.slot(r, a + 1), blk.size() * sizeof(T));
        else copy_out(out.data() + at + blk.begin, ph.slot(r, a + 1), blk.size() * sizeof(T));
      }
    });
  }

  /// In-place all_reduce of `parts` as one message of their elements side by side (a fused
  /// batch, `communicator::fuse`): the phases of `all_reduce` of the concatenation, one shot or
  /// two shot, with the copies into the windows gathering from the parts and the copies out of
  /// them (and of the reduced own block) scattering to the parts, so nothing is packed. Every
  /// element is reduced in the same rank order as there. False, having done nothing, where
  /// `all_reduce` would take another path (no window; single copy): the caller packs instead.
  template <class Ch, class T, class Op>
    requires shared_window<typename Ch::transport_type>
  bool all_reduce_parts(Ch& ch, std::span<const view<T>> parts, const Op& op) const {
    if (!ch.transport().has_window()) return false;
    phases<Ch> ph(ch);
    const gathered<T> g(parts);
    const std::size_t n = g.size(), bytes = n * sizeof(T);
    const std::size_t peers = static_cast<std::size_t>(ch.size() - 1);
    const int p = ch.size(), me = ch.rank();
    if (bytes * peers * peers <= one_shot_bytes && bytes <= ph.half_bytes()) {
      const auto a = ph.begin();
      g.gather(ph.mine(a), 0, n);
      ph.post(a);
      ph.wait_all(a);
      g.each(0, n, [&](T* d, std::size_t at, std::size_t k) { reduce_slots<T>(ph, a, at, d, k, op); });
      return true;
    }
    if (single_copy && bytes >= single_copy_bytes && ph.single_copy_reduces()) return false;
    const std::size_t fit = std::min(ph.template elems<T>(1), std::max<std::size_t>(chunk_bytes / sizeof(T), 1));
    const std::size_t chunk = std::max<std::size_t>(fit / static_cast<std::size_t>(p), 1) * static_cast<std::size_t>(p);
    const std::size_t piece = std::max<std::size_t>(own_piece_bytes / sizeof(T), 1);
    for_each_chunk(n, chunk, [&](std::size_t at, std::size_t m) {
      const auto a = ph.begin();
      const auto mine = schedule::block(m, p, me);
      ph.offer_source(a, nullptr, 0, false);  // says "in the slot": peers must not read a stale offer
      g.gather(ph.mine(a), at, mine.begin);
      g.gather(ph.mine(a) + mine.end * sizeof(T), at + mine.end, m - mine.end);
      ph.post(a);
      ph.wait_all(a);
      const std::size_t offset = mine.begin * sizeof(T);
      T* result = reinterpret_cast<T*>(ph.mine(a + 1));
      // The own block a run of one part at a time, each in pieces reduced and copied back while
      // still in cache.
      g.each(at + mine.begin, mine.size(), [&](T* own, std::size_t o, std::size_t len) {
        const std::size_t base = o - at - mine.begin;
        for (std::size_t i = 0; i < len; i += piece) {
          const std::size_t k = std::min(piece, len - i), e = base + i;
          reduce_from<T>(ph, [&](int r) {
            if (r == me) return static_cast<const T*>(own + i);
            return reinterpret_cast<const T*>(ph.input(r, a, offset + e * sizeof(T), k * sizeof(T), r == 0 ? 0 : 1));
          }, result + e, k, op);
          copy_out(own + i, reinterpret_cast<const std::byte*>(result + e), k * sizeof(T));
        }
      });
      ph.post(a + 1);
      ph.wait_all(a + 1);
      for (int r = 0; r < p; ++r) {
        if (r == me) continue;
        const auto blk = schedule::block(m, p, r);
        g.scatter(at + blk.begin, ph.slot(r, a + 1), blk.size());
      }
    });
    return true;
  }

  template <class Ch, class T, class Op>
    requires shared_window<typename Ch::transport_type>
  void reduce_scatter(Ch& ch, view<const T> in, view<T> out, const Op& op) const {
    if (!ch.transport().has_window()) return ring{}.reduce_scatter(ch, in, out, op);
    phases<Ch> ph(ch);
    const int p = ch.size(), me = ch.rank();
    const std::size_t blk = out.size(), chunk = ph.template elems<T>(p);
    for_each_chunk(blk, chunk, [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      pack_blocks(ph.mine(g), in, p, blk, at, m);
      ph.post(g);
      ph.wait_all(g);
      reduce_slots<T>(ph, g, static_cast<std::size_t>(me) * m, out.data() + at, m, op);
    });
  }

  template <class Ch, class T>
    requires shared_window<typename Ch::transport_type>
  void all_gather(Ch& ch, view<const T> in, view<T> out) const {
    if (!ch.transport().has_window()) return ring{}.all_gather(ch, in, out);
    phases<Ch> ph(ch);
    const int p = ch.size();
    const std::size_t blk = in.size(), chunk = ph.template elems<T>(1);
    if (reads_blocks(ph, in.size_bytes())) {
      const int me = ch.rank();
      return single_copy_blocks(ph, in, true, [&](auto& read) {
        for (int r = 0; r < p; ++r) read(r, 0, in.size_bytes(), out.data() + static_cast<std::size_t>(r) * blk);
      }, [&] { move_own(out.data() + static_cast<std::size_t>(me) * blk, in.data(), blk); });
    }
    for_each_chunk(blk, chunk, [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      copy_in(ph.mine(g), in.data() + at, m * sizeof(T));
      ph.post(g);
      ph.wait_all(g);
      for (int r = 0; r < p; ++r) copy_out(out.data() + static_cast<std::size_t>(r) * blk + at, ph.slot(r, g), m * sizeof(T));
    });
  }

  template <class Ch, class T>
    requires shared_window<typename Ch::transport_type>
  void broadcast(Ch& ch, view<T> buf, int root) const {
    if (!ch.transport().has_window()) return tree{}.broadcast(ch, buf, root);
    phases<Ch> ph(ch);
    const std::size_t n = buf.size(), chunk = ph.template elems<T>(1);
    for_each_chunk(n, chunk, [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      if (ch.rank() == root) copy_in(ph.mine(g), buf.data() + at, m * sizeof(T));
      ph.post(g);
      if (ch.rank() == root) return ph.confirm_root(g, at + m == n);
      ph.wait(root, g);
      copy_out(buf.data() + at, ph.slot(root, g), m * sizeof(T));
    });
  }

  template <class Ch, class T, class Op>
    requires shared_window<typename Ch::transport_type>
  void reduce(Ch& ch, view<T> buf, int root, const Op& op) const {
    if (!ch.transport().has_window()) return tree{}.reduce(ch, buf, root, op);
    phases<Ch> ph(ch);
    const std::size_t n = buf.size(), chunk = ph.template elems<T>(1);
    for_each_chunk(n, chunk, [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      copy_in(ph.mine(g), buf.data() + at, m * sizeof(T));
      ph.post(g);
      if (ch.rank() != root) return;
      ph.wait_all(g);
      reduce_slots<T>(ph, g, 0, buf.data() + at, m, op);
    });
  }

  template <class Ch, class T>
    requires shared_window<typename Ch::transport_type>
  void gather(Ch& ch, view<const T> in, view<T> out, int root) const {
    if (!ch.transport().has_window()) return tree{}.gather(ch, in, out, root);
    phases<Ch> ph(ch);
    const int p = ch.size();
    const std::size_t blk = in.size(), chunk = ph.template elems<T>(1);
    if (reads_blocks(ph, in.size_bytes())) {
      const bool root_here = ch.rank() == root;
      return single_copy_blocks(ph, in, true, [&](auto& read) {
        if (root_here)
          for (int r = 0; r < p; ++r) read(r, 0, in.size_bytes(), out.data() + static_cast<std::size_t>(r) * blk);
      }, [&] { if (root_here) move_own(out.data() + static_cast<std::size_t>(root) * blk, in.data(), blk); });
    }
    for_each_chunk(blk, chunk, [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      copy_in(ph.mine(g), in.data() + at, m * sizeof(T));
      ph.post(g);
      if (ch.rank() != root) return;
      ph.wait_all(g);
      for (int r = 0; r < p; ++r) copy_out(out.data() + static_cast<std::size_t>(r) * blk + at, ph.slot(r, g), m * sizeof(T));
    });
  }

  template <class Ch, class T>
    requires shared_window<typename Ch::transport_type>
  void scatter(Ch& ch, view<const T> in, view<T> out, int root) const {
    if (!ch.transport().has_window()) return tree{}.scatter(ch, in, out, root);
    phases<Ch> ph(ch);
    const int p = ch.size(), me = ch.rank();
    const std::size_t blk = out.size(), chunk = ph.template elems<T>(p);
    if (reads_blocks(ph, out.size_bytes())) {
      return single_copy_blocks(ph, in, me == root, [&](auto& read) {
        read(root, static_cast<std::size_t>(me) * out.size_bytes(), out.size_bytes(), out.data());
      }, [&] { if (me == root) move_own(out.data(), in.data() + static_cast<std::size_t>(me) * blk, blk); });
    }
    for_each_chunk(blk, chunk, [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      if (me == root)
        pack_blocks(ph.mine(g), in, p, blk, at, m);
      ph.post(g);
      if (me != root) ph.wait(root, g);
      else ph.confirm_root(g, at + m == blk);
      copy_out(out.data() + at, ph.slot(root, g) + static_cast<std::size_t>(me) * m * sizeof(T), m * sizeof(T));
    });
  }

  template <class Ch, class T>
    requires shared_window<typename Ch::transport_type>
  void all_to_all(Ch& ch, view<const T> in, view<T> out) const {
    if (!ch.transport().has_window()) return direct{}.all_to_all(ch, in, out);
    phases<Ch> ph(ch);
    const int p = ch.size(), me = ch.rank();
    const std::size_t blk = in.size() / static_cast<std::size_t>(p), chunk = ph.template elems<T>(p);
    if (reads_blocks(ph, blk * sizeof(T))) {
      const std::size_t bytes = blk * sizeof(T);
      return single_copy_blocks(ph, in, true, [&](auto& read) {
        for (int r = 0; r < p; ++r) read(r, static_cast<std::size_t>(me) * bytes, bytes, out.data() + static_cast<std::size_t>(r) * blk);
      }, [&] { move_own(out.data() + static_cast<std::size_t>(me) * blk, in.data() + static_cast<std::size_t>(me) * blk, blk); });
    }
    for_each_chunk(blk, chunk, [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      pack_blocks(ph.mine(g), in, p, blk, at, m);
      ph.post(g);
      ph.wait_all(g);
      for (int r = 0; r < p; ++r)
        copy_out(out.data() + static_cast<std::size_t>(r) * blk + at,
                 ph.slot(r, g) + static_cast<std::size_t>(me) * m * sizeof(T), m * sizeof(T));
    });
  }

  // ---- the v-collectives ------------------------------------------------------------------------
  // Chunks are cut from the largest block, so every rank runs the same phases. Where a rank does
  // not know every count (gather_v, scatter_v: the root's; all_to_all_v: each rank its own row),
  // a first phase publishes them in the slots (`share_counts`, `share_rows`), and each rank checks
  // the others' against its own: a disagreement names both ranks and both counts.

  template <class Ch, class T>
    requires shared_window<typename Ch::transport_type>
  void all_gather_v(Ch& ch, view<const T> in, view<T> out, const block_counts& b) const {
    if (!ch.transport().has_window()) return ring{}.all_gather_v(ch, in, out, b);
    phases<Ch> ph(ch);
    const int p = ch.size(), me = ch.rank();
    if (reads_blocks(ph, b.largest * sizeof(T)))
      return single_copy_blocks(ph, in, true, [&](auto& read) {
        for (int r = 0; r < p; ++r) read(r, 0, b.count(r) * sizeof(T), out.data() + b.offset(r));
      }, [&] { move_own(out.data() + b.offset(me), in.data(), b.count(me)); });
    for_each_chunk(b.largest, ph.template elems<T>(1), [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      copy_in(ph.mine(g), in.data() + at, part(b.count(me), at, m) * sizeof(T));
      ph.post(g);
      ph.wait_all(g);
      for (int r = 0; r < p; ++r)
        copy_out(out.data() + b.offset(r) + at, ph.slot(r, g), part(b.count(r), at, m) * sizeof(T));
    });
  }

  template <class Ch, class T, class Op>
    requires shared_window<typename Ch::transport_type>
  void reduce_scatter_v(Ch& ch, view<const T> in, view<T> out, const block_counts& b, const Op& op) const {
    if (!ch.transport().has_window()) return ring{}.reduce_scatter_v(ch, in, out, b, op);
    phases<Ch> ph(ch);
    const int p = ch.size(), me = ch.rank();
    for_each_chunk(b.largest, ph.template elems<T>(p), [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      for (int j = 0; j < p; ++j)
        copy_in(ph.mine(g) + static_cast<std::size_t>(j) * m * sizeof(T), in.data() + b.offset(j) + at,
                part(b.count(j), at, m) * sizeof(T));
      ph.post(g);
      ph.wait_all(g);
      reduce_slots<T>(ph, g, static_cast<std::size_t>(me) * m, out.data() + at, part(b.count(me), at, m), op);
    });
  }

  template <class Ch, class T>
    requires shared_window<typename Ch::transport_type>
  void gather_v(Ch& ch, view<const T> in, view<T> out, const block_counts& b, int root) const {
    if (!ch.transport().has_window() || !fits_table(ch, 1)) return direct{}.gather_v(ch, in, out, b, root);
    phases<Ch> ph(ch);
    const int p = ch.size(), me = ch.rank();
    const bool at_root = me == root;
    const auto counts = share_counts(ch, ph, root, b, in.size(), "in");
    const std::size_t largest = *std::max_element(counts.begin(), counts.end());
    if (reads_blocks(ph, largest * sizeof(T)))
      return single_copy_blocks(ph, in, true, [&](auto& read) {
        if (at_root)
          for (int r = 0; r < p; ++r) read(r, 0, b.count(r) * sizeof(T), out.data() + b.offset(r));
      }, [&] { if (at_root) move_own(out.data() + b.offset(me), in.data(), b.count(me)); });
    for_each_chunk(largest, ph.template elems<T>(1), [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      copy_in(ph.mine(g), in.data() + at, part(in.size(), at, m) * sizeof(T));
      ph.post(g);
      if (!at_root) return;
      ph.wait_all(g);
      for (int r = 0; r < p; ++r)
        copy_out(out.data() + b.offset(r) + at, ph.slot(r, g), part(b.count(r), at, m) * sizeof(T));
    });
  }

  template <class Ch, class T>
    requires shared_window<typename Ch::transport_type>
  void scatter_v(Ch& ch, view<const T> in, const block_counts& b, view<T> out, int root) const {
    if (!ch.transport().has_window() || !fits_table(ch, 1)) return direct{}.scatter_v(ch, in, b, out, root);
    phases<Ch> ph(ch);
    const int p = ch.size(), me = ch.rank();
    const auto counts = share_counts(ch, ph, root, b, out.size(), "out");
    std::size_t largest = 0, offset = 0;
    for (int r = 0; r < p; ++r) {
      if (r < me) offset += counts[static_cast<std::size_t>(r)];
      largest = std::max<std::size_t>(largest, counts[static_cast<std::size_t>(r)]);
    }
    if (reads_blocks(ph, largest * sizeof(T)))
      return single_copy_blocks(ph, in, me == root, [&](auto& read) {
        read(root, offset * sizeof(T), out.size_bytes(), out.data());
      }, [&] { if (me == root) move_own(out.data(), in.data() + offset, out.size()); });
    for_each_chunk(largest, ph.template elems<T>(p), [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      if (me == root)
        for (int j = 0; j < p; ++j)
          copy_in(ph.mine(g) + static_cast<std::size_t>(j) * m * sizeof(T), in.data() + b.offset(j) + at,
                  part(b.count(j), at, m) * sizeof(T));
      ph.post(g);
      if (me != root) ph.wait(root, g);
      else ph.confirm_root(g, at + m >= largest);
      copy_out(out.data() + at, ph.slot(root, g) + static_cast<std::size_t>(me) * m * sizeof(T),
               part(out.size(), at, m) * sizeof(T));
    });
  }

  template <class Ch, class T>
    requires shared_window<typename Ch::transport_type>
  void all_to_all_v(Ch& ch, view<const T> in, const block_counts& send, view<T> out, const block_counts& recv) const {
    if (!ch.transport().has_window() || !fits_table(ch, ch.size())) return direct{}.all_to_all_v(ch, in, send, out, recv);
    phases<Ch> ph(ch);
    const int p = ch.size(), me = ch.rank();
    const auto P = static_cast<std::size_t>(p);
    // rows[i * p + j]: rank i's send_counts[j]
    const auto rows = share_rows(ch, ph, send, recv);
    std::size_t largest = 0;
    for (std::size_t v : rows) largest = std::max(largest, v);
    auto offset_in = [&](int i) {  // where rank i's block for this rank starts in its input
      std::size_t at = 0;
      for (int j = 0; j < me; ++j) at += rows[static_cast<std::size_t>(i) * P + static_cast<std::size_t>(j)];
      return at;
    };
    if (reads_blocks(ph, largest * sizeof(T)))
      return single_copy_blocks(ph, in, true, [&](auto& read) {
        for (int r = 0; r < p; ++r) read(r, offset_in(r) * sizeof(T), recv.count(r) * sizeof(T), out.data() + recv.offset(r));
      }, [&] { move_own(out.data() + recv.offset(me), in.data() + send.offset(me), send.count(me)); });
    for_each_chunk(largest, ph.template elems<T>(p), [&](std::size_t at, std::size_t m) {
      const auto g = ph.begin();
      for (int j = 0; j < p; ++j)
        copy_in(ph.mine(g) + static_cast<std::size_t>(j) * m * sizeof(T), in.data() + send.offset(j) + at,
                part(send.count(j), at, m) * sizeof(T));
      ph.post(g);
      ph.wait_all(g);
      for (int r = 0; r < p; ++r)
        copy_out(out.data() + recv.offset(r) + at, ph.slot(r, g) + static_cast<std::size_t>(me) * m * sizeof(T),
                 part(recv.count(r), at, m) * sizeof(T));
    });
  }

  template <class Ch>
    requires shared_window<typename Ch::transport_type>
  void barrier(Ch& ch) const {
    if (!ch.transport().has_window()) return recursive_doubling{}.barrier(ch);
    phases<Ch> ph(ch);
    const auto g = ph.begin();
    ph.post(g);
    ph.wait_all(g);
  }

 private:
  /// Two-shot all_reduce without staging through the windows, where the transport can read
  /// peers' memory (process_vm_readv, probed at start-up). Phase a: every rank offers its input
  /// where it lies; rank r reduces block r of all inputs, in rank order, straight into its own
  /// output, reading each peer's part in cache-sized pieces. Phase b: every rank offers its output
  /// and reads the other blocks into its own. Phase c: nobody reads this rank's buffers once every
  /// peer has posted it, so the call may return. Each byte crosses between processes once per
  /// shot, by one kernel copy, instead of a copy into a window and a load out of it.
  template <class T, class Ph, class Op>
  void all_reduce_single_copy(Ph& ph, int p, int me, view<const T> in, view<T> out, const Op& op) const {
    const std::size_t n = in.size();
    const auto a = ph.begin();
    ph.offer_source(a, in.data(), in.size_bytes(), true);
    ph.post(a);
    ph.wait_all(a);
    const auto mine = schedule::block(n, p, me);
    const std::size_t piece = std::max<std::size_t>(chunk_bytes / sizeof(T), 1);
    // A peer's piece lands in staging buffer 0 (rank 0) or 1 (the others), each read just
    // before its combine; an op that folds itself takes all pieces at once, so each peer's gets
    // a place of its own in staging buffer 1.
    const bool apart = detail::has_own_fold<T>(op);
    std::byte* pieces = apart ? ph.staging(1, static_cast<std::size_t>(p) * piece * sizeof(T)) : nullptr;
    for (std::size_t at = mine.begin; at < mine.begin + mine.size(); at += piece) {
      const std::size_t m = std::min(piece, mine.begin + mine.size() - at);
      // In place, the first combine overwrites this rank's input: past rank 1, keep a copy.
      const T* own = in.data() + at;
      if (me >= 2 && detail::overlaps(in, view<const T>(out))) own = reinterpret_cast<const T*>(ph.stage(2, own, m * sizeof(T)));
      reduce_from<T>(ph, [&](int r) {
        if (r == me) return own;
        if (apart) {
          std::byte* to = pieces + static_cast<std::size_t>(r) * piece * sizeof(T);
          ph.copy_source(r, a, at * sizeof(T), m * sizeof(T), to);
          return reinterpret_cast<const T*>(to);
        }
        return reinterpret_cast<const T*>(ph.input(r, a, at * sizeof(T), m * sizeof(T), r == 0 ? 0 : 1));
      }, out.data() + at, m, op);
    }
    ph.offer_source(a + 1, out.data(), out.size_bytes(), true);
    ph.post(a + 1);
    ph.wait_all(a + 1);
    for (int r = 0; r < p; ++r) {
      if (r == me) continue;
      const auto blk = schedule::block(n, p, r);
      ph.copy_source(r, a + 1, blk.begin * sizeof(T), blk.size() * sizeof(T), reinterpret_cast<std::byte*>(out.data() + blk.begin));
    }
    ph.post(a + 2);
    ph.wait_all(a + 2);
  }

  /// Elements [at, at + m) of a block of `count`, clipped: how many of them it has.
  static std::size_t part(std::size_t count, std::size_t at, std::size_t m) {
    return count > at ? std::min(m, count - at) : 0;
  }

  /// Whether a table of `rows` rows of the group's size in 64-bit words fits in a window half.
  template <class Ch>
  static bool fits_table(Ch& ch, int rows) {
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(ch.size()) * 8 <= ch.transport().window_bytes() / 2;
  }

  /// gather_v's and scatter_v's first phase: the root publishes its counts, every other rank its
  /// own count (`own`, the size of its `what`); the root checks every rank's, each rank its own
  /// against the root's. Returns the root's counts on every rank.
  template <class Ch, class Ph>
  static std::vector<std::size_t> share_counts(Ch& ch, Ph& ph, int root, const block_counts& b, std::size_t own,
                                               const char* what) {
    const int p = ch.size(), me = ch.rank();
    const auto g = ph.begin();
    auto* mine = reinterpret_cast<std::uint64_t*>(ph.mine(g));
    if (me == root)
      for (int r = 0; r < p; ++r) mine[r] = b.count(r);
    else
      mine[0] = own;
    ph.post(g);
    std::vector<std::size_t> counts(static_cast<std::size_t>(p));
    auto at = [&] { return std::string(collective_name(ch.fp().coll)) + "(shared_memory): "; };  // for errors only
    if (me == root) {
      ph.wait_all(g);
      for (int r = 0; r < p; ++r) {
        counts[static_cast<std::size_t>(r)] = b.count(r);
        if (r == root) continue;
        const std::uint64_t theirs = reinterpret_cast<const std::uint64_t*>(ph.slot(r, g))[0];
        if (theirs != b.count(r))
          throw mismatch_error(at() + "the root, rank " + std::to_string(root) + ", has counts[" + std::to_string(r) +
                               "] = " + std::to_string(b.count(r)) + ", but rank " + std::to_string(r) + "'s " + what +
                               " has " + std::to_string(theirs) + " elements");
      }
      return counts;
    }
    ph.wait(root, g);
    const auto* table = reinterpret_cast<const std::uint64_t*>(ph.slot(root, g));
    for (int r = 0; r < p; ++r) counts[static_cast<std::size_t>(r)] = table[r];
    if (table[me] != own)
      throw mismatch_error(at() + "rank " + std::to_string(me) + "'s " + what + " has " + std::to_string(own) +
                           " elements, but the root, rank " + std::to_string(root) + ", has counts[" +
                           std::to_string(me) + "] = " + std::to_string(table[me]));
    return counts;
  }

  /// all_to_all_v's first phase: every rank publishes its send_counts; each checks every rank
  /// i's send_counts[me] against its own recv_counts[i]. Returns the p x p table (row i: rank
  /// i's send_counts), the same on every rank.
  template <class Ch, class Ph>
  static std::vector<std::size_t> share_rows(Ch& ch, Ph& ph, const block_counts& send, const block_counts& recv) {
    const int p = ch.size(), me = ch.rank();
    const auto P = static_cast<std::size_t>(p);
    const auto g = ph.begin();
    auto* mine = reinterpret_cast<std::uint64_t*>(ph.mine(g));
    for (int j = 0; j < p; ++j) mine[j] = send.count(j);
    ph.post(g);
    ph.wait_all(g);
    std::vector<std::size_t> rows(P * P);
    for (int i = 0; i < p; ++i) {
      const auto* row = reinterpret_cast<const std::uint64_t*>(ph.slot(i, g));
      for (int j = 0; j < p; ++j) rows[static_cast<std::size_t>(i) * P + static_cast<std::size_t>(j)] = row[j];
      if (i != me && row[me] != recv.count(i))
        throw mismatch_error("all_to_all_v(shared_memory): rank " + std::to_string(me) + " has recv_counts[" +
                             std::to_string(i) + "] = " + std::to_string(recv.count(i)) + ", but rank " +
                             std::to_string(i) + " has send_counts[" + std::to_string(me) + "] = " +
                             std::to_string(row[me]));
    }
    return rows;
  }

  /// Whether the block collectives read blocks of `block_bytes` straight from their owners.
  template <class Ph>
  bool reads_blocks(const Ph& ph, std::size_t block_bytes) const {
    return single_copy && block_bytes >= single_copy_block_bytes && ph.single_copy();
  }

  /// The block collectives without windows (see `single_copy_block_bytes`). Phase a: every rank
  /// that has an input offers it where it lies (`offers`), posts, and waits for every peer's
  /// post; `reads(read)` then copies what this rank needs, `read(r, offset, bytes, dst)` taking
  /// `bytes` at byte `offset` of rank r's input (never this rank's own: `own()` copies that).
  /// Phase b: nobody reads this rank's input once every peer has posted it, so it may return.
  /// Every rank posts and waits at both phases, so fingerprints are compared as in the windows.
  template <class Ph, class T, class Reads, class Own>
  void single_copy_blocks(Ph& ph, view<const T> in, bool offers, Reads reads, Own own) const {
    const int me = ph.rank();
    const auto a = ph.begin();
    if (offers) ph.offer_source(a, in.data(), in.size_bytes(), true);
    ph.post(a);
    ph.wait_all(a);
    auto read = [&](int r, std::size_t offset, std::size_t bytes, T* dst) {
      if (r != me) ph.copy_source(r, a, offset, bytes, reinterpret_cast<std::byte*>(dst));
    };
    reads(read);
    own();
    ph.post(a + 1);
    ph.wait_all(a + 1);
  }

  /// This rank's own block, from `src` to `dst` (which may overlap: in place).
  template <class T>
  static void move_own(T* dst, const T* src, std::size_t n) {
    if (n && dst != src) std::memmove(dst, src, n * sizeof(T));
  }

  /// One call's view of the windows: phase bookkeeping and slot addresses.
  template <class Ch>
  class phases {
   public:
    using transport_type = typename Ch::transport_type;
    explicit phases(Ch& ch) : ch_(ch), t_(ch.transport()), fp_(ch.fp()), w_(ch.wait()) {}

    int size() const { return ch_.size(); }
    int rank() const { return ch_.rank(); }
    std::size_t half_bytes() const { return t_.window_bytes() / 2; }
    /// Elements of T per slot when a slot holds `parts` equal parts (at least 1, 64-byte multiples).
    template <class T>
    std::size_t elems(int parts) const {
      std::size_t e = half_bytes() / static_cast<std::size_t>(parts) / sizeof(T);
      if (64 % sizeof(T) == 0 && e >= 64 / sizeof(T)) e -= e % (64 / sizeof(T));
      return e ? e : 1;
    }
    /// The next phase; waits until every peer has finished reading what this rank wrote two
    /// phases ago into the half it is about to reuse.
    std::uint64_t begin() {
      const std::uint64_t g = t_.phase() + 1;
      t_.wait_all(g - 1, fp_, /*compare=*/false, w_);
      // Phase g−1 may have been a step where this rank compared nobody's fingerprint (a reduce
      // leaf, ranks that disagree on the root), and an earlier point-to-point call may have
      // ended with messages nobody received: the transport checks both now (shm::check_posted).
      if constexpr (posted_check<transport_type>) t_.check_posted(g - 1, fp_, w_);
      return g;
    }
    void post(std::uint64_t g) { t_.post(g, fp_); }
    void wait(int r, std::uint64_t g) { t_.wait_phase(r, g, fp_, /*compare=*/true, w_); }
    void wait_all(std::uint64_t g) { t_.wait_all(g, fp_, /*compare=*/true, w_); }
    /// A root that only writes (broadcast, scatter) compares nobody's fingerprint; a rank that
    /// disagrees on the root would then leave the call unnoticed. So at its last step the root
    /// waits until every peer has posted it (they post on entry, before they wait for the
    /// root): no round trip, only the peers' arrival, and every rank that disagrees is caught
    /// in the call itself.
    void confirm_root(std::uint64_t g, bool last) {
      if (last) wait_all(g);
    }
    std::byte* mine(std::uint64_t g) const { return slot(ch_.rank(), g); }

    /// Offers this rank's input of phase g to the peers where it lies (an arena; or this process,
    /// read with process_vm_readv, when `single_copy`); false: copy it into the slot.
    bool offer_source(std::uint64_t g, const void* p, std::size_t bytes, bool single_copy) {
      if constexpr (window_sources<transport_type>) return t_.offer_source(g, p, bytes, single_copy);
      else return false;
    }
    /// Whether peers' memory can be read where it lies (process_vm_readv) on this communicator.
    bool single_copy() const {
      if constexpr (window_sources<transport_type>) return t_.single_copy();
      else return false;
    }
    /// Whether all_reduce should read that way too (a transport that does not say: where it can).
    bool single_copy_reduces() const {
      if constexpr (requires { t_.single_copy_reduces(); }) return t_.single_copy_reduces();
      else return single_copy();
    }
    /// The transport's staging buffer `stage` (0..2), at least `bytes` long.
    std::byte* staging(int stage, std::size_t bytes) { return t_.staging(stage, bytes); }
    /// A copy of `bytes` at `p` in the transport's staging buffer `stage` (0..2).
    const std::byte* stage(int stage, const void* p, std::size_t bytes) {
      std::byte* s = t_.staging(stage, bytes);
      copy_in(s, p, bytes);
      return s;
    }
    /// Copies `bytes` at byte `offset` of what rank r offered at phase g into `dst`.
    void copy_source(int r, std::uint64_t g, std::size_t offset, std::size_t bytes, std::byte* dst) {
      if constexpr (window_sources<transport_type>) {
        if (t_.copy_source(r, g, offset, bytes, dst)) return;
      }
      copy_out(dst, slot(r, g) + offset, bytes);
    }
    /// `bytes` at byte `offset` of rank r's input of phase g: where it offered it (read into the
    /// transport's staging buffer `stage` if need be), else its slot.
    const std::byte* input(int r, std::uint64_t g, std::size_t offset, std::size_t bytes, int stage) {
      if constexpr (window_sources<transport_type>) {
        if (const std::byte* s = t_.read_source(r, g, offset, bytes, stage)) return s;
      }
      return slot(r, g) + offset;
    }
    std::byte* slot(int r, std::uint64_t g) const { return t_.window(r) + (g % 2) * half_bytes(); }

   private:
    Ch& ch_;
    typename Ch::transport_type& t_;
    fingerprint fp_;
    wait_context w_;
  };

  /// Parts seen as one sequence of elements (all_reduce_parts).
  template <class T>
  class gathered {
   public:
    explicit gathered(std::span<const view<T>> parts) : parts_(parts) {
      starts_.reserve(parts.size() + 1);
      std::size_t n = 0;
      for (const auto& v : parts) {
        starts_.push_back(n);
        n += v.size();
      }
      starts_.push_back(n);
    }
    std::size_t size() const noexcept { return starts_.back(); }
    /// f(pointer, at, k) for each run [at, at + k) of elements [first, first + m) within one part.
    template <class F>
    void each(std::size_t first, std::size_t m, F f) const {
      if (m == 0) return;
      std::size_t i = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
      for (std::size_t at = first, end = first + m; at < end; ++i) {
        const std::size_t stop = std::min(end, starts_[i + 1]);
        if (stop > at) f(parts_[i].data() + (at - starts_[i]), at, stop - at);
        at = std::max(at, stop);
      }
    }
    /// Elements [first, first + m) into `dst`, side by side.
    void gather(std::byte* dst, std::size_t first, std::size_t m) const {
      each(first, m, [&](const T* p, std::size_t at, std::size_t k) { copy_in(dst + (at - first) * sizeof(T), p, k * sizeof(T)); });
    }
    /// `src`, m elements side by side, into elements [first, first + m).
    void scatter(std::size_t first, const std::byte* src, std::size_t m) const {
      each(first, m, [&](T* p, std::size_t at, std::size_t k) { copy_out(p, src + (at - first) * sizeof(T), k * sizeof(T)); });
    }

   private:
    std::span<const view<T>> parts_;
    std::vector<std::size_t> starts_;  // part i's first element; then the total
  };

  /// f(at, m) for consecutive chunks [at, at + m) of n elements; once (m = 0) when n is 0, so
  /// every rank runs the same phases whatever the count.
  template <class F>
  static void for_each_chunk(std::size_t n, std::size_t chunk, F f) {
    std::size_t at = 0;
    do {
      const std::size_t m = std::min(chunk, n - at);
      f(at, m);
      at += m;
    } while (at < n);
  }

  static void copy_in(std::byte* slot, const void* src, std::size_t bytes) {
    if (bytes) std::memcpy(slot, src, bytes);
  }

  /// Elements [at, at + m) of each of the p blocks (of `blk` elements) of `in`, side by side.
  template <class T>
  static void pack_blocks(std::byte* slot, view<const T> in, int p, std::size_t blk, std::size_t at, std::size_t m) {
    for (int j = 0; j < p; ++j)
      copy_in(slot + static_cast<std::size_t>(j) * m * sizeof(T), in.data() + static_cast<std::size_t>(j) * blk + at,
              m * sizeof(T));
  }
  static void copy_out(void* dst, const std::byte* slot, std::size_t bytes) {
    if (bytes) std::memcpy(dst, slot, bytes);
  }

  /// Outputs at least this large go out with non-temporal stores (glibc only streams above
  /// ~190 MiB here; writing through the cache would first read every output line).
  static constexpr std::size_t stream_bytes = std::size_t{8} << 20;

  static void stream_out(void* dst, const std::byte* src, std::size_t bytes) {
#if defined(__AVX2__) || defined(__SSE2__)
    auto* d = static_cast<std::byte*>(dst);
    std::size_t i = 0;
    // Head: up to the first 32-byte boundary of the destination.
    const std::size_t head = std::min(bytes, (32 - reinterpret_cast<std::uintptr_t>(d) % 32) % 32);
    if (head) std::memcpy(d, src, head);
    i = head;
#if defined(__AVX2__)
    for (; i + 32 <= bytes; i += 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
#else
    for (; i + 16 <= bytes; i += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
#endif
    if (i < bytes) std::memcpy(d + i, src + i, bytes - i);
    _mm_sfence();
#else
    copy_out(dst, src, bytes);
#endif
  }

  /// out[i] = slot_0[first + i] op slot_1[first + i] op ... in rank order (bitwise identical on
  /// every rank that reduces the same elements).
  template <class T, class Ph, class Op>
  static void reduce_slots(Ph& ph, std::uint64_t g, std::size_t first, T* out, std::size_t n, const Op& op) {
    reduce_from<T>(ph, [&](int r) { return reinterpret_cast<const T*>(ph.slot(r, g)) + first; }, out, n, op);
  }
  /// out = at(0) op at(1) op ... op at(p-1), elementwise over n (an op that folds itself, such
  /// as `op::reproducible_sum`, gets all p inputs at once: every at(r) must then stay valid
  /// until the fold, not only until the next call of `at`).
  template <class T, class Ph, class At, class Op>
  static void reduce_from(Ph& ph, At at, T* out, std::size_t n, const Op& op) {
    const int p = ph.size();
    if (p == 1) return copy_out(out, reinterpret_cast<const std::byte*>(at(0)), n * sizeof(T));
    if constexpr (std::is_same_v<Op, detail::erased_op> || detail::folds_itself<T, Op>) {
      if (detail::has_own_fold<T>(op)) {
        constexpr int most = 64;
        const T* small[most];
        std::vector<const T*> large(p > most ? static_cast<std::size_t>(p) : 0);
        const T** rows = p > most ? large.data() : small;
        for (int r = 0; r < p; ++r) rows[r] = at(r);
        return detail::fold_rows(out, rows, p, n, op);
      }
    }
    detail::combine(out, at(0), at(1), n, op);
    for (int r = 2; r < p; ++r) detail::combine(out, out, at(r), n, op);
  }
};

}  // namespace algo
}  // namespace tutti
