/// \file
/// `tutti::channel`: what an algorithm sees of one collective call. It wraps the transport with
/// the call's fingerprint and deadline, speaks in typed views instead of bytes, and offers the
/// reduce-on-receive primitives algorithms are built from. Custom algorithms use exactly this
/// interface (see examples/custom_algorithm.cpp).
///
/// Every message carries the call's fingerprint; zero-length messages are still sent, so ranks
/// that disagree are caught even when a count is 0.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string_view>

#include "tutti/core/fingerprint.hpp"
#include "tutti/core/view.hpp"
#include "tutti/detail/buffer.hpp"
#include "tutti/op/kernels.hpp"
#include "tutti/transport/transport.hpp"

namespace tutti {

template <transport Transport>
class channel {
 public:
  using transport_type = Transport;

  /// `aborted`: the communicator's abort flag, which every wait of this call checks (may be null).
  channel(Transport& t, const fingerprint& fp, std::string_view algorithm,
          std::chrono::milliseconds timeout, detail::scratch_pool& scratch,
          const std::atomic<bool>* aborted = nullptr)
      : t_(t), fp_(fp), wait_{timeout, algorithm, aborted}, scratch_(scratch) {}

  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }
  const fingerprint& fp() const noexcept { return fp_; }
  std::string_view algorithm() const noexcept { return wait_.algorithm; }
  /// The deadline and names every blocking call of this collective uses.
  const wait_context& wait() const noexcept { return wait_; }
  Transport& transport() noexcept { return t_; }

  /// Blocks until `peer` has taken `data` (or it is buffered by the medium).
  template <class T>
  void send(int peer, view<const T> data) {
    t_.send(peer, hdr(data.size_bytes()), bytes(data), wait_);
  }
  template <class T>
  void send(int peer, view<T> data) {
    send(peer, view<const T>(data));
  }

  /// Blocks until `data.size()` elements from `peer` have landed in `data`.
  template <class T>
  void recv(int peer, view<T> data) {
    t_.recv(peer, hdr(data.size_bytes()), reinterpret_cast<std::byte*>(data.data()), wait_);
  }

  /// Sends `out` to `to` while receiving `in` from `from` (full duplex; `to` may equal `from`).
  template <class T>
  void sendrecv(int to, view<const T> out, int from, view<T> in) {
    t_.sendrecv(to, hdr(out.size_bytes()), bytes(out), from, hdr(in.size_bytes()),
                reinterpret_cast<std::byte*>(in.data()), wait_);
  }
  template <class T>
  void sendrecv(int to, view<T> out, int from, view<T> in) {
    sendrecv(to, view<const T>(out), from, in);
  }

  /// result[i] = op(mine[i], incoming[i]) with `mine.size()` elements from `from`. `result` may
  /// be `mine` (accumulate in place). On a `zero_copy_recv` transport the peer's bytes are
  /// reduced where they lie; otherwise they are staged in scratch slot 3.
  template <class T, class Op>
  void recv_reduce(int from, view<const T> mine, view<T> result, const Op& op) {
    const header h = hdr(mine.size_bytes());
    if constexpr (reduce_in_place<T>) {
      t_.recv_with(from, h, reducer(mine, result, op), wait_);
    } else {
      auto tmp = staging<T>(mine.size());
      t_.recv(from, h, reinterpret_cast<std::byte*>(tmp.data()), wait_);
      detail::combine(result.data(), mine.data(), tmp.data(), mine.size(), op);
    }
  }

  /// `send(to, out)` overlapped with `recv_reduce(from, mine, result, op)`. `out` must not
  /// overlap `result`.
  template <class T, class Op>
  void sendrecv_reduce(int to, view<const T> out, int from, view<const T> mine, view<T> result,
                       const Op& op) {
    const header hs = hdr(out.size_bytes()), hr = hdr(mine.size_bytes());
    if constexpr (reduce_in_place<T>) {
      t_.sendrecv_with(to, hs, bytes(out), from, hr, reducer(mine, result, op), wait_);
    } else {
      auto tmp = staging<T>(mine.size());
      t_.sendrecv(to, hs, bytes(out), from, hr, reinterpret_cast<std::byte*>(tmp.data()), wait_);
      detail::combine(result.data(), mine.data(), tmp.data(), mine.size(), op);
    }
  }

  /// Library-owned memory for `n` elements of `T`, reused across calls. Slots 0-2 are free for
  /// algorithms; slot 3 is the staging area of `recv_reduce` on transports without zero copy.
  template <class T>
  view<T> scratch(int slot, std::size_t n) {
    if (slot < 0 || slot > 2) throw usage_error("channel::scratch: slot " + std::to_string(slot) + " is outside 0..2");
    return raw_scratch<T>(slot, n);
  }

 private:
  /// Reduce straight from the transport's memory: it offers zero copy and pieces hold whole
  /// elements (the element size divides 64).
  template <class T>
  static constexpr bool reduce_in_place = zero_copy_recv<Transport> && 64 % sizeof(T) == 0;

  template <class T>
  view<T> staging(std::size_t n) {
    return raw_scratch<T>(3, n);
  }
  template <class T>
  view<T> raw_scratch(int slot, std::size_t n) {
    return {reinterpret_cast<T*>(scratch_.slot[slot].reserve(n * sizeof(T))), n};
  }

  template <class T>
  static const std::byte* bytes(view<const T> v) {
    return reinterpret_cast<const std::byte*>(v.data());
  }

  template <class T, class Op>
  static auto reducer(view<const T> mine, view<T> result, const Op& op) {
    return [mine, result, &op](const std::byte* data, std::size_t offset, std::size_t n) {
      // Pieces start at multiples of 64 bytes of the payload, so for element sizes dividing 64
      // they hold whole elements, aligned as the sender's (or a 64-byte aligned slot).
      const std::size_t first = offset / sizeof(T);
      detail::combine(result.data() + first, mine.data() + first, reinterpret_cast<const T*>(data),
                      n / sizeof(T), op);
    };
  }

  header hdr(std::size_t bytes) const { return header{fp_, bytes}; }

  Transport& t_;
  fingerprint fp_;
  wait_context wait_;
  detail::scratch_pool& scratch_;
};

}  // namespace tutti
