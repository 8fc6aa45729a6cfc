/// \file
/// What a transport can do, as named concepts: the `transport` contract every one keeps, and the
/// optional capabilities algorithms and the communicator use where present. Each transport states
/// what it models next to its definition (`static_assert(shared_window<shm>)`), and nothing in
/// tutti asks a transport for anything but through these concepts and `transport_traits`.
///
/// | concept              | what the transport offers                                         | used by          |
/// |----------------------|-------------------------------------------------------------------|------------------|
/// | `transport`          | rank, size, blocking send / recv / full-duplex sendrecv of a      | every schedule   |
/// |                      | header + payload, sub-groups sharing its links                    |                  |
/// | `zero_copy_recv`     | a peer's bytes handed to a consumer where they lie                | channel          |
/// | `shared_window`      | windows of peers' memory and per-rank phase counters              | shared_memory    |
/// | `posted_check`       | a check, at each step on the windows, of what no wait compared    | shared_memory    |
/// | `window_sources`     | peers read an input where it lies (arena, process_vm_readv)       | shared_memory    |
/// | `native_collectives` | the transport runs each collective itself (MPI's)                 | native           |
/// | `failure_notices`    | tells the peers this rank failed, and why                         | communicator     |
/// | `last_words`         | leaves a note (a usage error) peers quote if this rank goes away  | communicator     |
/// | `shrinkable`         | a new job of the ranks still alive                                | `shrink()`       |
/// | `growable`           | a larger job: these ranks and processes that join                 | `grow()`         |
/// | `shared_allocation`  | memory the peers can read where it lies                           | `allocate()`     |
/// | `from_environment`   | joins the job the environment describes                           | `from_env()`     |
/// | `own_memory`         | its own copy and reduce, for a memory kind the CPU may not touch  | channel          |
/// | `one_host_job`       | a group of ranks of one host, made from a name they agree on      | `tutti::mesh`    |
/// | `stream_ordered`     | enqueues a call's work on a device stream; a request completes it | communicator     |
/// | `host_exchange`      | an all-gather of host bytes beside its device memory              | groups, counts   |
/// | `collective_sub`     | sub-groups made by every rank of the group, members or not        | `new_group`      |
/// | `matched_p2p`        | point-to-point matched by source and tag, apart from collectives  | send, recv, i*   |
///
/// `transport_traits<T>` gives the tuning kind (which rows of automatic's tuned table apply) and
/// the memory kind; both come from the transport's own members where it declares them.
#pragma once

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/core/dtype.hpp"
#include "tutti/core/p2p.hpp"
#include "tutti/core/memory.hpp"
#include "tutti/detail/operation.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/byte_consumer.hpp"

namespace tutti {

/// What a blocking transport call needs besides the bytes: how long to wait and what to say.
struct wait_context {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::string_view algorithm;  ///< for error messages
  /// Set by `communicator::abort()` (from any thread): every wait checks it whenever it is about
  /// to sleep, and at least every `toolkit::abort_poll` (5 ms), and raises `errc::aborted`.
  /// Null: not abortable.
  const std::atomic<bool>* aborted = nullptr;
  /// Where a wait that did not find its data at the first look adds how long it lasted: index
  /// 1 + the peer waited for, 0 for no peer in particular (`communicator::stats()`; one writer,
  /// the thread running the call). Null: not counted.
  std::atomic<std::int64_t>* waited_ns = nullptr;
};

/// The transport contract: a copyable value for one group of ranks.
/// - `send(peer, h, data, w)`, `recv(peer, h, data, w)`: blocking moves of a header (fingerprint
///   and byte count) and `h.bytes` of payload; `sendrecv(to, hs, sdata, from, hr, rdata, w)` both
///   at once (full duplex: rings need it to avoid deadlock).
/// - `sub(members, context)`: the transport of a sub-group sharing these links; `members` are
///   ranks of this group in the new rank order.
/// - A receiver compares the arriving header with the one it expects before it touches the
///   payload, and raises `mismatch_error` naming both ranks and both values on any difference
///   (`toolkit::check_header`); every message is sent, zero-byte ones too.
/// - No wait outlives `w.timeout`: `timeout_error` names the peer, the collective, the algorithm
///   and the bytes; a peer that died or failed raises `peer_lost` naming it; `w.aborted` is
///   honoured within about 20 ms.
/// `tutti::testing::check_transport` (tutti/testing/conformance.hpp) checks all of it.
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

/// A send or receive posted on a transport that matches point-to-point itself (`matched_p2p`).
struct p2p_post {
  int peer = 0;  ///< a send's destination; a receive's source, or `any_source`
  int tag = 0;   ///< a receive's may be `any_tag`
  dtype type;
  std::size_t count = 0;      ///< elements sent, or the elements the receive buffer holds
  std::byte* data = nullptr;  ///< read only for a send
  std::size_t bytes = 0;
  /// How long a wait for it may last (counted from when the first wait or test of it begins).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// `communicator::abort`'s flag (shared: the request may outlive the call that posted it).
  std::shared_ptr<const std::atomic<bool>> aborted;
};

/// Point-to-point with matching and progress of its own, apart from the collectives' links: a
/// posted send or receive waits for nothing posted before it. `post_send(p)` and `post_recv(p)`
/// return the operation's state (detail/operation.hpp), completed once its message has moved
/// (a receive's `status` set first) or failed; its `poll` keeps the promises of a blocking wait
/// (the deadline, `timeout_error` naming the peer; `peer_lost` when the peer, or for
/// `any_source` every peer, is gone; `abort` within about 20 ms). Matching is MPI's: a receive
/// takes the earliest arrived message of its source (or any) and tag (or any), so messages of
/// one sender and tag arrive in the order sent; a message of another dtype, or longer than the
/// receive buffer, fails the receive with `mismatch_error` naming both ranks and both values.
/// `pending_p2p()` describes this rank's sends and receives not yet complete, one line each
/// ("recv from rank 1 tag=5 (4000 bytes), posted 2.1 ms ago"), for the flight recorder.
template <class T>
concept matched_p2p = transport<T> && requires(T& t, const T& ct, const p2p_post& p) {
  { t.post_send(p) } -> std::same_as<std::shared_ptr<detail::operation_state>>;
  { t.post_recv(p) } -> std::same_as<std::shared_ptr<detail::operation_state>>;
  { ct.pending_p2p() } -> std::same_as<std::vector<std::string>>;
};

/// A `matched_p2p` transport's fast path for the blocking calls, tried before a request is
/// posted: `try_send_now(p)` sends a message that can go at once (no send to that peer queued
/// before it, room in the transport's buffers) and returns true; `try_recv_now(p, got)` takes a
/// message that has arrived, or arrives within a short spin (a few microseconds), straight into
/// the buffer when it fits, sets `got` and returns true. Both return false where the posted path
/// must run (it then finds what they left: nothing is lost or reordered), and neither waits
/// past its spin, so the blocking call's deadline, abort and peers' failures are the posted
/// path's.
template <class T>
concept p2p_fast_path = matched_p2p<T> && requires(T& t, const p2p_post& p, recv_status& got) {
  { t.try_send_now(p) } -> std::same_as<bool>;
  { t.try_recv_now(p, got) } -> std::same_as<bool>;
};

/// The peer's bytes handed to a consumer in place (a pointer into the sender's memory or a shared
/// segment), in pieces that start at multiples of 64 bytes, so a reduction reads them without a
/// staging copy.
template <class T>
concept zero_copy_recv = transport<T> && requires(T& t, int peer, const header& h, const std::byte* in,
                                                  const wait_context& w, byte_consumer consume) {
  t.recv_with(peer, h, consume, w);
  t.sendrecv_with(peer, h, in, peer, h, consume, w);
};

/// Windows of every rank's memory that every rank loads from, and a phase counter per rank that
/// only its owner writes, published with the call's fingerprint (`algo::shared_memory`).
/// `has_window()` may be false at run time (a sub-group): schedules fall back to messages.
template <class T>
concept shared_window = transport<T> && requires(T& t, const T& ct, int r, std::uint64_t g, const fingerprint& fp,
                                                 bool compare, const wait_context& w) {
  { ct.has_window() } -> std::convertible_to<bool>;
  { ct.window(r) } -> std::same_as<std::byte*>;
  { ct.window_bytes() } -> std::convertible_to<std::size_t>;
  { ct.phase() } -> std::convertible_to<std::uint64_t>;
  t.post(g, fp);
  t.wait_phase(r, g, fp, compare, w);
  t.wait_all(g, fp, compare, w);
};

/// At the start of a step on the windows, a check of what no wait of the earlier steps compared
/// (a peer's fingerprint where this rank waited for nobody, messages left unread in the rings).
template <class T>
concept posted_check = shared_window<T> && requires(const T& ct, std::uint64_t g, const fingerprint& fp,
                                                    const wait_context& w) { ct.check_posted(g, fp, w); };

/// Peers read a phase's input where it lies instead of through the windows: in the owner's
/// arena (`allocate`), or in its process (`process_vm_readv`, where `single_copy()`).
template <class T>
concept window_sources =
    shared_window<T> && requires(T& t, const T& ct, int r, std::uint64_t g, const void* p, std::size_t n,
                                 bool single_copy, int stage, std::byte* dst) {
      { t.offer_source(g, p, n, single_copy) } -> std::same_as<bool>;
      { t.read_source(r, g, n, n, stage) } -> std::same_as<const std::byte*>;
      { t.copy_source(r, g, n, n, dst) } -> std::same_as<bool>;
      { ct.single_copy() } -> std::convertible_to<bool>;
      { t.staging(stage, n) } -> std::same_as<std::byte*>;
    };

/// The transport runs each collective itself (`algo::native`; `tutti::mpi`: MPI's own). Each call
/// blocks until this rank's part is done or the deadline passes (`timeout_error`; with
/// `blocking`, the transport may wait without one); in-place forms are recognised from the
/// pointers exactly as the communicator allows them. `native_agree` makes every rank's
/// fingerprint (and, for the v-collectives, each rank's own counts) agree before the call.
template <class T>
concept native_collectives =
    transport<T> && requires(T& t, const float* in, float* out, std::size_t n, int root, const fingerprint& fp,
                             const wait_context& w, bool blocking, const block_counts& b) {
      t.native_agree(fp, w, blocking);
      t.native_broadcast(out, n, root, fp, w, blocking);
      t.native_reduce(in, out, n, root, op::sum{}, fp, w, blocking);
      t.native_all_reduce(in, out, n, op::sum{}, fp, w, blocking);
      t.native_gather(in, out, n, root, fp, w, blocking);
      t.native_all_gather(in, out, n, fp, w, blocking);
      t.native_scatter(in, out, n, root, fp, w, blocking);
      t.native_all_to_all(in, out, n, fp, w, blocking);
      t.native_reduce_scatter(in, out, n, op::sum{}, fp, w, blocking);
      t.native_barrier(fp, w, blocking);
      t.native_all_gather_v(in, out, b, fp, w, blocking);
      t.native_gather_v(in, n, out, b, root, fp, w, blocking);
      t.native_scatter_v(in, b, out, n, root, fp, w, blocking);
      t.native_all_to_all_v(in, b, out, b, fp, w, blocking);
      t.native_reduce_scatter_v(in, out, b, op::sum{}, fp, w, blocking);
    };

/// The peers of a rank that fails learn why at once (`peer_lost` with the reason) instead of by
/// their deadline. Never blocks, never throws.
template <class T>
concept failure_notices = transport<T> && requires(T& t, std::string_view what) {
  { t.fail(what) } noexcept;
};

/// A rank leaves a note for its peers without failing (a `usage_error`: the communicator stays
/// usable): if it exits or stays away, peers waiting for it quote the note. Never blocks.
template <class T>
concept last_words = transport<T> && requires(T& t, std::string_view what) {
  { t.note(what) } noexcept;
};

/// After a failure, a new transport of the ranks still alive (`communicator::shrink`).
template <class T>
concept shrinkable = transport<T> && requires(const T& ct, std::chrono::milliseconds timeout, std::vector<int>* kept) {
  { ct.shrink(timeout, kept) } -> std::same_as<T>;
};

/// A larger world: this one's ranks and processes that join it (`communicator::grow`).
template <class T>
concept growable = transport<T> && requires(const T& ct, int joiners, std::chrono::milliseconds timeout) {
  { ct.grow(joiners, timeout) } -> std::same_as<T>;
};

/// Memory its peers read where it lies (`communicator::allocate`).
template <class T>
concept shared_allocation = transport<T> && requires(T& t, std::size_t n, std::byte* p) {
  { t.allocate(n) } -> std::same_as<std::byte*>;
  t.deallocate(p);
};

/// Joins the job the environment describes (`communicator::from_env`).
template <class T>
concept from_environment = transport<T> && requires {
  { T::from_env() } -> std::same_as<T>;
};

/// Connects ranks of one host only, and makes a group of them from a `job_env` whose `job_id`
/// they agree on (a mesh axis of ranks within hosts, inside a job of another transport).
template <class T>
concept one_host_job = transport<T> && T::one_host && requires(const job_env& j, const config& c) {
  { T::create(j, c) } -> std::same_as<T>;
};

/// Its own copy and reduce for the memory kind it declares (`memory_kind`), which the CPU may
/// not touch: the channel moves and reduces bytes only through them.
template <class T>
concept own_memory = transport<T> && requires(T& t, std::byte* d, const std::byte* s, std::size_t n, float* out,
                                              const float* a) {
  typename T::memory_kind;
  t.copy(d, s, n);
  t.combine(out, a, a, n, op::sum{});
  t.divide(out, n, 2);
};

/// Device work in stream order (`tutti::cuda_ipc`, `tutti::nccl`): each call's work goes on the
/// stream bound before it (`bind_stream(&s)`; null: the transport's own), and `completion(w)`
/// gives the state of a request that completes when the device has done everything enqueued
/// since (polled: no thread watches it), failing at `w`'s deadline with the peer it waited on.
/// `bind_stream` raises what an earlier asynchronous failure left (`errc::aborted`).
template <class T>
concept stream_ordered = transport<T> && requires(T& t, const typename T::stream_type* s, const wait_context& w) {
  t.bind_stream(s);
  { t.completion(w) } -> std::same_as<std::shared_ptr<detail::operation_state>>;
};

/// An all-gather of `bytes` host bytes per rank, checked against the fingerprint like a
/// message: what a transport of device memory offers for the communicator's host-side agreement
/// (groups, v-collective counts).
template <class T>
concept host_exchange = transport<T> && requires(T& t, const fingerprint& fp, const std::byte* mine, std::byte* all,
                                                 std::size_t bytes, const wait_context& w) {
  t.exchange(fp, mine, all, bytes, w);
};

/// Sub-groups that every rank of the group takes part in making (NCCL's `ncclCommSplit`):
/// `split_sub(members, member, context)` is called by every rank, and gives members their
/// transport (non-members nothing), instead of `sub` called by the members alone.
template <class T>
concept collective_sub = transport<T> && requires(const T& ct, std::span<const int> members, bool member,
                                                  std::uint64_t context) {
  { ct.split_sub(members, member, context) } -> std::same_as<std::optional<T>>;
};

namespace detail {
template <class T>
constexpr std::string_view tuning_kind_of() {
  if constexpr (requires { { T::tuning_kind } -> std::convertible_to<std::string_view>; }) return T::tuning_kind;
  else return {};
}
template <class T>
constexpr bool native_first_of() {
  if constexpr (requires { { T::native_first } -> std::convertible_to<bool>; }) return T::native_first;
  else return false;
}
template <class T>
struct memory_kind_of {
  using type = host_memory;
};
template <class T>
  requires requires { typename T::memory_kind; }
struct memory_kind_of<T> {
  using type = typename T::memory_kind;
};
}  // namespace detail

/// What the library knows of a transport type besides its capabilities.
template <class T>
struct transport_traits {
  /// The rows of automatic's tuned table that apply (`tuned_table.hpp`: "shm", "tcp", "inproc"):
  /// the transport's `static constexpr std::string_view tuning_kind`; empty: none (the rule).
  static constexpr std::string_view tuning_kind = detail::tuning_kind_of<T>();
  /// Where its views' memory lives: the transport's `memory_kind` type, else host memory.
  using memory = typename detail::memory_kind_of<T>::type;
  /// Whether `automatic` runs the transport's own collectives (`algo::native`) wherever they
  /// exist, before its table and rule (the device transports: their kernels, NCCL's
  /// collectives): the transport's `static constexpr bool native_first`.
  static constexpr bool native_first = detail::native_first_of<T>();
};

}  // namespace tutti
