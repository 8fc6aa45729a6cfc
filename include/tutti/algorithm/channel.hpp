/// \file
/// `tutti::channel`: what an algorithm sees of one collective call. It wraps the transport with
/// the call's fingerprint and deadline, speaks in typed views instead of bytes, and offers the
/// reduce-on-receive primitives algorithms are built from, and the memory seam: `copy`,
/// `combine` and `scratch`, the only way a schedule moves, reduces or keeps elements, in the
/// transport's memory kind. Custom algorithms use exactly this interface (see
/// examples/custom_algorithm.cpp).
///
/// Every message carries the call's fingerprint; zero-length messages are still sent, so ranks
/// that disagree are caught even when a count is 0.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

#include "tutti/core/counts.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/core/view.hpp"
#include "tutti/detail/background_copy.hpp"
#include "tutti/detail/buffer.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/memory_ops.hpp"

namespace tutti {

template <transport Transport>
class channel {
 public:
  using transport_type = Transport;
  /// Where the call's views live: the transport's memory kind.
  using memory = typename transport_traits<Transport>::memory;
  template <class T>
  using view_type = view<T, memory>;

  /// `aborted`: the communicator's abort flag, which every wait of this call checks (may be null);
  /// `waited_ns`: where its waits add up how long they lasted (`wait_context`; may be null).
  channel(Transport& t, const fingerprint& fp, std::string_view algorithm, std::chrono::milliseconds timeout,
          detail::scratch_pool& scratch, const std::atomic<bool>* aborted = nullptr,
          std::atomic<std::int64_t>* waited_ns = nullptr)
      : t_(t), h_{fp, 0}, wait_{timeout, algorithm, aborted, waited_ns}, scratch_(scratch) {}

  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }
  const fingerprint& fp() const noexcept { return h_.fp; }
  /// The fingerprint's algorithm: the one whose schedule runs on this channel (`automatic`
  /// chooses it after the call's fingerprint was made).
  void set_algorithm_id(std::uint32_t id) noexcept { h_.fp.algo = id; }
  std::string_view algorithm() const noexcept { return wait_.algorithm; }
  /// The deadline and names every blocking call of this collective uses.
  const wait_context& wait() const noexcept { return wait_; }
  Transport& transport() noexcept { return t_; }

  /// Blocks until `peer` has taken `data` (or it is buffered by the medium).
  template <class T>
  void send(int peer, view<const T, memory> data) {
    labelled([&] { t_.send(peer, own_hdr(data.size_bytes()), bytes(data), wait_); });
  }
  template <class T>
  void send(int peer, view<T, memory> data) {
    send(peer, view<const T, memory>(data));
  }

  /// Blocks until `data.size()` elements from `peer` have landed in `data`.
  template <class T>
  void recv(int peer, view<T, memory> data) {
    labelled([&] { t_.recv(peer, own_hdr(data.size_bytes()), reinterpret_cast<std::byte*>(data.data()), wait_); });
  }

  /// Sends `out` to `to` while receiving `in` from `from` (full duplex; `to` may equal `from`).
  template <class T>
  void sendrecv(int to, view<const T, memory> out, int from, view<T, memory> in) {
    labelled([&] {
      t_.sendrecv(to, hdr(out.size_bytes()), bytes(out), from, hdr(in.size_bytes()),
                  reinterpret_cast<std::byte*>(in.data()), wait_);
    });
  }
  template <class T>
  void sendrecv(int to, view<T, memory> out, int from, view<T, memory> in) {
    sendrecv(to, view<const T, memory>(out), from, in);
  }

  /// result[i] = op(mine[i], incoming[i]) with `mine.size()` elements from `from`. `result` may
  /// be `mine` (accumulate in place). On a `zero_copy_recv` transport the peer's bytes are
  /// reduced where they lie; otherwise they are staged in scratch slot 3.
  template <class T, class Op>
  void recv_reduce(int from, view<const T, memory> mine, view<T, memory> result, const Op& op) {
    const header h = hdr(mine.size_bytes());
    if constexpr (reduce_in_place<T>) {
      labelled([&] { t_.recv_with(from, h, reducer(mine, result, op), wait_); });
    } else {
      auto tmp = staging<T>(mine.size());
      labelled([&] { t_.recv(from, h, reinterpret_cast<std::byte*>(tmp.data()), wait_); });
      combine(result, mine, view<const T, memory>(tmp), op);
    }
  }

  /// `send(to, out)` overlapped with `recv_reduce(from, mine, result, op)`. `out` must not
  /// overlap `result`.
  template <class T, class Op>
  void sendrecv_reduce(int to, view<const T, memory> out, int from, view<const T, memory> mine,
                       view<T, memory> result, const Op& op) {
    const header hs = hdr(out.size_bytes()), hr = hdr(mine.size_bytes());
    if constexpr (reduce_in_place<T>) {
      labelled([&] { t_.sendrecv_with(to, hs, bytes(out), from, hr, reducer(mine, result, op), wait_); });
    } else {
      auto tmp = staging<T>(mine.size());
      labelled([&] { t_.sendrecv(to, hs, bytes(out), from, hr, reinterpret_cast<std::byte*>(tmp.data()), wait_); });
      combine(result, mine, view<const T, memory>(tmp), op);
    }
  }

  // ---- the memory seam ----------------------------------------------------------------------

  /// Copies `from` into the first `from.size()` elements of `to` (the same memory: nothing).
  template <class T>
  void copy(view<const T, memory> from, view<T, memory> to) {
    detail::copy_bytes(t_, to.data(), from.data(), from.size_bytes());
  }
  template <class T>
  void copy(view<T, memory> from, view<T, memory> to) {
    copy(view<const T, memory>(from), to);
  }

  /// Starts `copy(from, to)` beside what the caller does next (on host memory, from
  /// `overlap_copy_bytes`, on a thread of its own: a rank's own block moves while its peers'
  /// move through the transport); it is done once the returned handle is gone.
  /// Smaller copies, and device memory, are copied at once.
  template <class T>
  [[nodiscard]] detail::background_copy copy_beside(view<const T, memory> from, view<T, memory> to) {
    if constexpr (!own_memory<Transport>) {
      if (from.size_bytes() >= overlap_copy_bytes && static_cast<const void*>(from.data()) != to.data())
        return detail::background_copy(to.data(), from.data(), from.size_bytes());
    }
    copy(from, to);
    return {};
  }
  /// copy_beside moves copies of at least this many bytes to a thread (below it the thread's
  /// start costs more than the overlap saves).
  static constexpr std::size_t overlap_copy_bytes = std::size_t{4} << 20;

  /// out[i] = op(a[i], b[i]) for i < out.size(); `out` may be `a` or `b`.
  template <class T, class Op>
  void combine(view<T, memory> out, view<const T, memory> a, view<const T, memory> b, const Op& op) {
    detail::combine_elements(t_, out.data(), a.data(), b.data(), out.size(), op);
  }

  /// Library-owned memory for `n` elements of `T`, reused across calls. Slots 0-2 are free for
  /// algorithms; slot 3 is the staging area of `recv_reduce` on transports without zero copy.
  template <class T>
  view<T, memory> scratch(int slot, std::size_t n) {
    if (slot < 0 || slot > 2) throw usage_error("channel::scratch: slot " + std::to_string(slot) + " is outside 0..2");
    return raw_scratch<T>(slot, n);
  }

  // ---- blocks of the v-collectives ------------------------------------------------------------

  /// While the returned guard lives, a header that disagrees on a message of this call is
  /// reported as a disagreement about block `b` of a v-collective ("rank 1 passes counts[3] =
  /// 12, rank 0 passes counts[3] = 10"; for gather_v, scatter_v and all_to_all_v the block is
  /// the one between the two ranks, whatever `b`). Schedules of the v-collectives set it around
  /// each message that carries one block.
  class block_label {
   public:
    block_label(channel& ch, int b) : ch_(ch), prev_(ch.block_) { ch_.block_ = b; }
    block_label(const block_label&) = delete;
    block_label& operator=(const block_label&) = delete;
    ~block_label() { ch_.block_ = prev_; }

   private:
    channel& ch_;
    int prev_;
  };
  [[nodiscard]] block_label block(int b) { return block_label(*this, b); }

 private:
  friend class block_label;

  /// Reduce straight from the transport's memory: it offers zero copy and pieces hold whole
  /// elements (the element size divides 64).
  template <class T>
  static constexpr bool reduce_in_place = zero_copy_recv<Transport> && 64 % sizeof(T) == 0;

  template <class T>
  view<T, memory> staging(std::size_t n) {
    return raw_scratch<T>(3, n);
  }
  template <class T>
  view<T, memory> raw_scratch(int slot, std::size_t n) {
    if constexpr (requires { t_.scratch(slot, n * sizeof(T)); })
      return {reinterpret_cast<T*>(t_.scratch(slot, n * sizeof(T))), n};
    else
      return {reinterpret_cast<T*>(scratch_.slot[slot].reserve(n * sizeof(T))), n};
  }

  template <class T>
  static const std::byte* bytes(view<const T, memory> v) {
    return reinterpret_cast<const std::byte*>(v.data());
  }

  template <class T, class Op>
  auto reducer(view<const T, memory> mine, view<T, memory> result, const Op& op) {
    return [this, mine, result, &op](const std::byte* data, std::size_t offset, std::size_t n) {
      // Pieces start at multiples of 64 bytes of the payload, so for element sizes dividing 64
      // they hold whole elements, aligned as the sender's (or a 64-byte aligned slot).
      const std::size_t first = offset / sizeof(T);
      detail::combine_elements(t_, result.data() + first, mine.data() + first, reinterpret_cast<const T*>(data),
                               n / sizeof(T), op);
    };
  }

  header hdr(std::size_t bytes) const { return header{h_.fp, bytes}; }
  /// The header of one message sent or received on its own: the channel's, with its byte count
  /// (not a copy: a transport reads a header during its call only).
  const header& own_hdr(std::size_t bytes) noexcept {
    h_.bytes = bytes;
    return h_;
  }

  /// Runs a transport call; inside a block label, says a header mismatch in the call's terms.
  /// What the block does not say (another field differs; counts that differ elsewhere than in
  /// this block) goes on as it was: the communicator, which knows this rank's counts, names
  /// the index where the counts every rank passes differ (`detail::restate_counts`).
  template <class F>
  void labelled(F&& f) {
    if (block_ < 0) return f();
    try {
      f();
    } catch (const header_mismatch& e) {
      std::string said = describe_block(e);
      if (said.empty()) throw;
      throw mismatch_error(said);
    }
  }

  /// The block's sizes as the two ranks see them, or empty: nothing the header's text does not say.
  std::string describe_block(const header_mismatch& e) const {
    const fingerprint& mine = e.expected.fp;
    const fingerprint& theirs = e.got.fp;
    // Another collective, dtype, op, root or algorithm: the generic message says it best.
    fingerprint a = mine, b = theirs;
    a.count = b.count = 0;
    a.shape = b.shape = 0;
    const std::uint8_t es = mine.elem_size ? mine.elem_size : 1;
    if (a != b || e.expected.bytes % es || e.got.bytes % es) return {};
    const auto n_mine = std::to_string(e.expected.bytes / es), n_theirs = std::to_string(e.got.bytes / es);
    const std::string me = "rank " + std::to_string(e.me), peer = "rank " + std::to_string(e.peer);
    const std::string at = std::string(collective_name(mine.coll)) + "(" + std::string(wait_.algorithm) + "): ";
    const bool counts_differ = mine.count != theirs.count || mine.shape != theirs.shape;
    if (!is_collective(static_cast<std::uint8_t>(mine.coll))) return {};
    const collective_info& row = info(mine.coll);
    switch (row.where) {  // what the block's size is, by where the counts are passed
      case counts_at::every_rank: {
        const std::string idx = "counts[" + std::to_string(block_) + "]";
        if (e.expected.bytes != e.got.bytes)
          return at + me + " passes " + idx + " = " + n_mine + ", " + peer + " passes " + idx + " = " + n_theirs +
                 (counts_differ ? " (every rank passes the same counts)"
                                : " (their counts agree otherwise: does " + peer + "'s view match its count?)");
        return {};  // the counts differ elsewhere: the communicator says where
      }
      case counts_at::root:  // the root's count against the other rank's view
        if (row.layout.in == extent::own)
          return at + "the root, " + me + ", has counts[" + std::to_string(e.peer) + "] = " + n_mine + ", but " + peer +
                 "'s in has " + n_theirs + " elements";
        return at + me + "'s out has " + n_mine + " elements, but the root, " + peer + ", has counts[" +
               std::to_string(e.me) + "] = " + n_theirs;
      case counts_at::own_row:
        return at + me + " has recv_counts[" + std::to_string(e.peer) + "] = " + n_mine + ", but " + peer +
               " has send_counts[" + std::to_string(e.me) + "] = " + n_theirs;
      case counts_at::none: break;
    }
    return {};
  }

  Transport& t_;
  header h_;  // the call's fingerprint; the byte count of the last own_hdr
  wait_context wait_;
  detail::scratch_pool& scratch_;
  int block_ = -1;  // the v-collective block the current message carries (block_label), or -1
};

}  // namespace tutti
