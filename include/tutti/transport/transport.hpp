/// \file
/// The transport concept: what an algorithm needs from whatever moves the bytes.
///
/// A transport is a value type for one group of ranks. It offers blocking point-to-point moves of
/// a header plus a payload, a full-duplex `sendrecv` (rings need it to avoid deadlock), and
/// `sub(members, context)`, a transport for a sub-group sharing the same links. Each call takes a
/// `wait_context`: the deadline and what to name in an error.
///
/// Contract every transport keeps:
/// - The receiver compares the arriving header with the expected one (`detail::check_header`)
///   and raises `mismatch_error` on any difference, before touching the payload.
/// - Payloads move straight from and to the given memory; staging exists only where the medium
///   requires it.
/// - No wait outlives the deadline: `timeout_error` names the peer, the collective, the
///   algorithm and the bytes.
///
/// Optional capability `zero_copy_recv`: `recv_with` / `sendrecv_with` hand the peer's bytes to a
/// consumer in place (a pointer into the sender's memory or a shared segment), so a reduction
/// can read them without a staging copy.
#pragma once

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/byte_consumer.hpp"

namespace tutti {

/// What a blocking transport call needs besides the bytes: how long to wait and what to say.
struct wait_context {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::string_view algorithm;  ///< for error messages
  /// Set by `communicator::abort()` (from any thread): every wait checks it whenever it is about
  /// to sleep, and at least every 20 ms, and raises `errc::aborted`. Null: not abortable.
  const std::atomic<bool>* aborted = nullptr;
};

/// The transport concept (see the file comment).
template <class T>
concept transport =
    std::copy_constructible<T> &&
    requires(T& t, const T& ct, int peer, const header& h, const std::byte* in, std::byte* out,
             const wait_context& w, std::span<const int> members, std::uint64_t context) {
      { ct.rank() } -> std::convertible_to<int>;
      { ct.size() } -> std::convertible_to<int>;
      t.send(peer, h, in, w);
      t.recv(peer, h, out, w);
      t.sendrecv(peer, h, in, peer, h, out, w);
      { ct.sub(members, context) } -> std::same_as<T>;
    };

/// Capability: the transport can hand a peer's bytes to a consumer in place.
template <class T>
concept zero_copy_recv =
    transport<T> && requires(T& t, int peer, const header& h, const std::byte* in,
                             const wait_context& w, byte_consumer consume) {
      t.recv_with(peer, h, consume, w);
      t.sendrecv_with(peer, h, in, peer, h, consume, w);
    };

namespace detail {
/// The check every receiver makes before touching a payload.
inline void check_header(const header& expected, int my_rank, const header& got, int peer,
                         std::string_view algo) {
  if (expected.fp != got.fp)
    throw mismatch_error(std::string(collective_name(expected.fp.coll)) + "(" +
                         std::string(algo) + "): " +
                         describe_difference(expected.fp, my_rank, got.fp, peer));
  if (expected.bytes != got.bytes)
    throw mismatch_error(std::string(collective_name(expected.fp.coll)) + "(" +
                         std::string(algo) + "): rank " + std::to_string(my_rank) +
                         " expected " + std::to_string(expected.bytes) + " bytes from rank " +
                         std::to_string(peer) + ", which sent " + std::to_string(got.bytes));
}

/// A sub-group's rank map: `picked` are ranks of a group whose rank r is `members[r]` in the
/// transport's own numbering; returns the sub-group's map and `me`'s rank in it (-1: not in it).
inline std::pair<std::vector<int>, int> pick_members(const std::vector<int>& members, int me,
                                                     std::span<const int> picked) {
  std::pair<std::vector<int>, int> out{{}, -1};
  for (int m : picked) {
    if (m == me) out.second = static_cast<int>(out.first.size());
    out.first.push_back(members[static_cast<std::size_t>(m)]);
  }
  return out;
}

/// "0.2 s", "300 s": a deadline as error messages print it.
inline std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

inline std::string where(const header& h, std::string_view algo) {
  return std::string(collective_name(h.fp.coll)) + "(" + std::string(algo) + ")";
}

/// How long one sleep of an abortable wait may last: `abort()` takes effect within it.
inline constexpr std::chrono::milliseconds abort_poll{20};

/// Raises `errc::aborted` if `w`'s communicator was aborted; waits call it before they sleep.
inline void check_aborted(const wait_context& w, const header& h, int my_rank, std::string_view doing, int peer) {
  if (w.aborted && w.aborted->load(std::memory_order_acquire))
    throw error(errc::aborted, where(h, w.algorithm) + ": rank " + std::to_string(my_rank) + " stopped waiting " +
                                   std::string(doing) + (peer >= 0 ? " rank " + std::to_string(peer) : std::string()) +
                                   ": the communicator was aborted (communicator::abort)");
}
}  // namespace detail

}  // namespace tutti
