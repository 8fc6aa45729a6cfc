/// \file
/// `tutti::communicator<Transport, Algorithm>`: a group of ranks, the transport that links them
/// and the algorithm that schedules their collectives. Every collective is a blocking call that
/// every rank of the group makes, in the same order, with agreeing arguments; disagreement raises
/// `mismatch_error` and a silent peer raises `timeout_error` or `peer_lost`.
///
/// The collectives themselves (and their non-blocking `i` twins) are members of its base
/// `collective_calls` (group/collectives.hpp); each runs through the one call path
/// (group/call_path.hpp). This file holds the communicator's state and everything else: its
/// lifetime, point to point, batches (`fuse`), groups, shrink and grow, `explain`.
///
/// A communicator is used by one thread at a time (different communicators, the world and its
/// groups, may be used from different threads at once). After a failure it is unusable (its
/// peers may be anywhere in the schedule); later calls raise `tutti::error` with `errc::aborted`
/// and the original message. That includes a `usage_error` from a call the peers take part in
/// (arguments that can never work, found before any traffic): the peers may already be in the
/// call, so, as in MPI, the call fails on every rank (each raises that `usage_error`, naming
/// this rank first) and none pairs its next call with a later one of this rank. A usage error
/// of a setting (`set_timeout`, `fuse`) breaks nothing. The peers learn of a failure at once
/// where the transport has `failure_notices` (its kind and where it began: `error::origin`).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__GLIBCXX__)
#include <cxxabi.h>  // abi::__forced_unwind
#endif

#include "tutti/algorithm/automatic.hpp"
#include "tutti/algorithm/channel.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/core/dtype.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/core/view.hpp"
#include "tutti/detail/buffer.hpp"
#include "tutti/detail/flight_recorder.hpp"
#include "tutti/group/collectives.hpp"
#include "tutti/group/nonblocking.hpp"
#include "tutti/group/observe.hpp"
#include "tutti/group/request.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/memory_ops.hpp"
#include "tutti/transport/toolkit/errors.hpp"

namespace tutti {

/// `n` elements of `T` in memory the transport shares with its peers (`communicator::allocate`);
/// collectives on it skip the copy into shared memory. Move-only; frees the memory when destroyed.
template <class T, class Transport>
class shared_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "tutti::shared_buffer<T>: T must be trivially copyable");

 public:
  shared_buffer(Transport t, std::size_t n)
      : t_(std::move(t)), data_(reinterpret_cast<T*>(t_.allocate(n * sizeof(T)))), size_(n) {
    std::memset(static_cast<void*>(data_), 0, n * sizeof(T));
  }
  shared_buffer(shared_buffer&& o) noexcept
      : t_(o.t_), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  shared_buffer& operator=(shared_buffer&& o) noexcept {
    if (this != &o) {
      release();
      t_ = o.t_;
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~shared_buffer() { release(); }

  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  T* begin() const noexcept { return data_; }
  T* end() const noexcept { return data_ + size_; }
  T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  void release() noexcept {
    if (data_) t_.deallocate(reinterpret_cast<std::byte*>(data_));
    data_ = nullptr;
  }
  Transport t_;
  T* data_;
  std::size_t size_;
};

namespace detail {
/// Whether tutti::compiled holds `communicator<Transport>`'s erased runs (`run_compiled`): set by
/// tutti/compiled.hpp in the separately compiled mode, for the transports it instantiates.
template <class Transport>
inline constexpr bool compiled_transport = false;
/// Whether a call of `c` runs erased on bytes (element size 1, the counts in bytes): the uniform
/// collectives that do not reduce; the others run on elements of the call's type's size.
constexpr bool moves_bytes(collective c) noexcept {
  return !info(c).reduces && info(c).counts != counts_kind::per_rank;
}
/// The element sizes tutti::compiled holds erased runs of, per collective: every size of 1, 2, 4
/// and 8 bytes for those that reduce or take per-rank counts; 1 (bytes) for the others.
constexpr bool compiled_size(collective c, std::size_t s) noexcept {
  return info(c).scheduled && (moves_bytes(c) ? s == 1 : (s == 1 || s == 2 || s == 4 || s == 8));
}

/// Whether `A` is one of the candidates of `automatic_of` `Auto`, and where among them.
template <class A, class Auto>
inline constexpr bool is_candidate = false;
template <class A, class... C>
inline constexpr bool is_candidate<A, algo::automatic_of<C...>> = (std::is_same_v<A, C> || ...);
template <class A, class Auto>
inline constexpr std::size_t candidate_index = 0;
template <class A, class... C>
inline constexpr std::size_t candidate_index<A, algo::automatic_of<C...>> = [] {
  constexpr bool is[] = {std::is_same_v<A, C>...};
  std::size_t i = 0;
  while (i < sizeof...(C) && !is[i]) ++i;
  return i;
}();

template <class A>
struct is_automatic : std::false_type {};
template <class... C>
struct is_automatic<algo::automatic_of<C...>> : std::true_type {};

/// A collective's trailing argument that is a stream of its `stream_ordered` transport (given in
/// the algorithm's place: `comm.all_reduce(v, op, stream)`), not an algorithm.
template <class Transport, class Arg>
concept stream_arg = stream_ordered<Transport> && std::same_as<Arg, typename Transport::stream_type>;
}  // namespace detail

template <transport Transport, algorithm Algorithm = algo::automatic>
class communicator : public collective_calls<communicator<Transport, Algorithm>, typename transport_traits<Transport>::memory> {
 public:
  using transport_type = Transport;
  using algorithm_type = Algorithm;
  /// Where this communicator's views live (`transport_traits<Transport>::memory`).
  using memory = typename transport_traits<Transport>::memory;

  /// Wraps a connected transport. Reads `TUTTI_TIMEOUT`, `TUTTI_ALGO` and `TUTTI_DEBUG`
  /// (`config_error` when malformed) unless a config is given.
  explicit communicator(Transport t, Algorithm a = {}) : communicator(std::move(t), std::move(a), config::from_env()) {}
  communicator(Transport t, Algorithm a, config cfg)
      : t_(std::move(t)), algo_(std::move(a)), cfg_(std::move(cfg)), recorder_(t_.rank(), t_.size(), 0),
        counters_(t_.size()) {
    make_plans();
    if (!detail::trace_dir().empty()) {
      observers_ = std::make_unique<detail::observers>();
      observers_->trace = true;
      observers_->trace_rank = t_.rank();
    }
  }

  // from_env, shrink and grow are templates so that an explicit instantiation of the class
  // (tutti::compiled) leaves them out where the transport lacks them: clang before 15
  // instantiates a non-template member whose constraint is false.

  /// Joins the job the environment describes (`Transport::from_env()`, e.g. `tutti::shm`).
  template <class T = Transport>
    requires from_environment<T>
  static communicator from_env() {
    return communicator(Transport::from_env());
  }

  /// A move waits for the operations posted on `o`; a batch open on `o` ends first (see `batch`).
  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;
  /// Ends an open batch, then waits for the operations still posted (their views must outlive
  /// them anyway).
  ~communicator() {
    open_batch_.end();
    engine_.drain();
    if (cfg_.debug >= log_level::info && counters_.active()) [[unlikely]] try {
        detail::log(log_level::info, cfg_, rank(), stats().text());
      } catch (...) {  // a destructor: the counters are not worth a terminate
      }
    if (observers_ && observers_->trace) detail::trace_flush();
  }

  /// A move waits for the operations posted on `o`; a batch open on `o` ends first (see `batch`).
  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }
  Transport& transport() noexcept { return t_; }
  const Algorithm& algorithm() const noexcept { return algo_; }

  /// Deadline for every blocking wait from now on (default `TUTTI_TIMEOUT`, else 300 s).
  template <class Rep, class Period>
  void set_timeout(std::chrono::duration<Rep, Period> d) {
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d);
    if (ms.count() <= 0) local_usage("set_timeout: the timeout must be positive");
    cfg_.timeout = ms;
  }
  std::chrono::milliseconds timeout() const noexcept { return cfg_.timeout; }
  /// The settings this communicator runs with (its deadline, `TUTTI_ALGO`, `TUTTI_DEBUG`).
  const config& settings() const noexcept { return cfg_; }

  /// Aborts this communicator and every group made from it (they share its links), like
  /// `ncclCommAbort`. Safe from any thread and from a signal handler: a blocking call in flight
  /// on another thread returns within about 20 ms with `tutti::error` (`errc::aborted`), and
  /// every later call raises it too. The peers learn of it as `peer_lost` naming this rank
  /// (promptly where the transport has failure notices: shm, tcp, mpi, inproc) or by their
  /// deadline. There is no way back: build a new communicator (see `shrink`).
  void abort() noexcept { aborted_->store(true, std::memory_order_release); }
  /// Whether `abort()` was called on this communicator or its family.
  bool aborted() const noexcept { return aborted_->load(std::memory_order_acquire); }

  /// After a failure (a lost rank, a timeout, an abort): a new communicator of the ranks still
  /// alive, renumbered in their old order, with this one's algorithm and settings; this one stays
  /// unusable. Every surviving rank of the world calls it; a rank that is alive but does not call
  /// it within the timeout (stopped, hung) is left out. `kept`, when given, gets the old ranks of
  /// the members in new rank order. On transports that can tell which processes are gone
  /// (`shrinkable`: `tutti::shm`); elsewhere start a new job (a fresh rendezvous).
  template <class T = Transport>
    requires shrinkable<T>
  communicator shrink(std::vector<int>* kept = nullptr) {
    const auto busy = ordered("shrink");
    if (context_ != 0) local_usage("shrink: call it on the world communicator, not on a group");
    communicator c(t_.shrink(cfg_.timeout, kept), algo_, cfg_);
    pass_observers(c);
    return c;
  }

  /// A larger communicator: this one's ranks, keeping their numbers, and `joiners` processes
  /// that join the job (started with `TUTTI_JOIN=1` and the job's store address and token; their
  /// `from_env()` returns the same larger communicator), numbered after them in the order they
  /// came. Every rank of the world calls it with the same `joiners` (checked first: a rank that
  /// passes another count gets `mismatch_error` on every rank); rank 0 waits up to the timeout
  /// for the joiners. This communicator stays usable. With this one's algorithm and settings.
  template <class T = Transport>
    requires growable<T>
  communicator grow(int joiners) {
    const auto busy = ordered("grow");
    if (context_ != 0) local_usage("grow: call it on the world communicator, not on a group");
    if (joiners < 1) usage("grow: joiners must be at least 1, not " + std::to_string(joiners));
    std::vector<int> counts(static_cast<std::size_t>(size()));
    const int mine[1] = {joiners};
    this->all_gather(view<const int>(mine, 1), view(counts));
    for (int r = 0; r < size(); ++r)
      if (counts[static_cast<std::size_t>(r)] != counts[0])
        throw mismatch_error("grow: rank 0 grows by " + std::to_string(counts[0]) + " joiner(s), rank " + std::to_string(r) +
                             " by " + std::to_string(counts[static_cast<std::size_t>(r)]));
    communicator c(t_.grow(joiners, cfg_.timeout), algo_, cfg_);
    pass_observers(c);
    return c;
  }

  /// This rank's flight recorder: its last operations on this communicator with their
  /// fingerprints, start times and outcomes, as printed on failure and on SIGUSR1; where the
  /// transport matches point-to-point itself, then its sends and receives still pending, with
  /// their peer and tag (in this text only, not yet in the printed record).
  std::string flight_record(std::size_t max = detail::flight_capacity) const {
    std::string text = recorder_.text(max);
    if constexpr (matched_p2p<Transport>)  // point-to-point apart from the recorder's calls
      for (const std::string& l : t_.pending_p2p()) text += "  pending point-to-point: " + l + "\n";
    return text;
  }

  /// This rank's counters on this communicator since it was made: calls, bytes and time per
  /// kind of operation, time spent waiting per peer, the slowest peer (`comm_stats`).
  /// `TUTTI_DEBUG=info` prints them when the communicator is destroyed. May be called from any
  /// thread, also while operations are posted.
  comm_stats stats() const { return counters_.snapshot(rank(), context_); }

  /// Hooks for the user's own tools (as torchcomms has): `f(const op_event&)` when each operation
  /// of this communicator starts, ends, or fails (then `on_error`'s, not `on_end`'s), on the
  /// thread that runs it. An empty function removes the hook. Groups made from this communicator
  /// afterwards start with its hooks. Setting one waits for the operations posted before.
  void on_start(op_hook f) { set_hook(&detail::observers::start, std::move(f)); }
  void on_end(op_hook f) { set_hook(&detail::observers::end, std::move(f)); }
  void on_error(op_hook f) { set_hook(&detail::observers::error, std::move(f)); }

  /// Every rank's `n` in rank order: the counts of a v-collective when each rank knows only its
  /// own (one all_gather of one 64-bit word per rank).
  std::vector<std::size_t> all_gather_counts(std::size_t n) {
    std::vector<std::uint64_t> all(size_t_size());
    const std::uint64_t mine = n;
    if constexpr (std::is_same_v<memory, host_memory>) {
      this->all_gather(view<const std::uint64_t>(&mine, 1), view<std::uint64_t>(all));
    } else {  // counts live on the host: the transport's host-side exchange
      const auto busy = ordered("all_gather");
      auto fp = next_fp(collective::all_gather, dtype_of<std::uint64_t>(), 1, -1, 0);
      all = host_words(fp, view<const std::uint64_t>(&mine, 1));
    }
    return std::vector<std::size_t>(all.begin(), all.end());
  }

  // ---- point to point ---------------------------------------------------------------------
  //
  // Where the transport matches point-to-point itself (`matched_p2p`: inproc, shm, mpi), sends and
  // receives are matched by source and tag as in MPI and progress apart from the collectives:
  // a posted `irecv` holds nothing back, `recv` takes `any_source` and `any_tag`, and a
  // message shorter than the receive buffer is received (`recv_status` says its count). On the
  // other transports a receive names its source and tag and takes the next message from that
  // source, which must have its tag, dtype and count; posted ones run in the collectives' queue.

  /// Sends `data` to `peer`; returns once the transport has taken it (with `matched_p2p`: a
  /// send of at most the transport's eager size at once; a larger one once its receive has
  /// taken it). The matching `recv` names this rank (or any) and the tag (or any), the same
  /// dtype, and at least as many elements.
  /// On a `stream_ordered` transport a stream may follow the tag: the transfer is enqueued on it
  /// and a request returned.
  template <viewable B, class S = algo::inherit>
  auto send(B&& data_buf, int peer, int tag = 0, const S& stream = {}) {
    static_assert(std::is_same_v<S, algo::inherit> || detail::stream_arg<Transport, S>,
                  "tutti: send's fourth argument is a stream of the communicator's transport");
    if constexpr (matched_p2p<Transport> && !detail::stream_arg<Transport, S>) {
      const auto data = readable(data_buf);
      using U = detail::element_of<B>;
      matched_blocking(true, const_cast<std::byte*>(reinterpret_cast<const std::byte*>(data.data())),
                       data.size_bytes(), dtype_of<U>(), data.size(), peer, tag, "send");
    } else {
      return with_stream(stream, [&](const auto&) {
        const auto busy = ordered("send");
        const auto data = readable(data_buf);
        using U = detail::element_of<B>;
        check_peer(peer, tag, "send", false);
        channel<Transport> ch = channel_for(p2p_fp(dtype_of<U>(), data.size(), tag), "p2p");
        recorded(ch, {detail::kind_send, data.size_bytes(), peer}, [&] { ch.send(peer, data); });
      });
    }
  }

  /// Receives into `data` a message from `peer` (or `any_source`) with `tag` (or `any_tag`);
  /// returns its source, tag and element count (a stream may follow, as for `send`: then a
  /// request). Without `matched_p2p`, the source and tag are named and the count is `data`'s.
  template <viewable B, class S = algo::inherit>
  auto recv(B&& data_buf, int peer, int tag = 0, const S& stream = {}) {
    static_assert(std::is_same_v<S, algo::inherit> || detail::stream_arg<Transport, S>,
                  "tutti: recv's fourth argument is a stream of the communicator's transport");
    const auto data = writable(data_buf);
    using T = detail::element_of<B>;
    if constexpr (matched_p2p<Transport> && !detail::stream_arg<Transport, S>) {
      return matched_blocking(false, reinterpret_cast<std::byte*>(data.data()), data.size_bytes(), dtype_of<T>(),
                              data.size(), peer, tag, "recv");
    } else {
      auto body = [&](const auto&) {
        const auto busy = ordered("recv");
        check_peer(peer, tag, "recv", true);
        channel<Transport> ch = channel_for(p2p_fp(dtype_of<T>(), data.size(), tag), "p2p");
        recorded(ch, {detail::kind_recv, data.size_bytes(), peer}, [&] { ch.recv(peer, data); });
      };
      if constexpr (detail::stream_arg<Transport, S>) {
        return with_stream(stream, body);
      } else {
        with_stream(stream, body);
        return recv_status{peer, tag, data.size()};
      }
    }
  }

  /// `send`, posted. With `matched_p2p` it starts at once and waits for nothing posted before
  /// it (MPI's `MPI_Isend`); inside a batch too (`fuse()`: they all start together, as torch's
  /// `batch_isend_irecv`). Elsewhere, outside a batch, point-to-point operations run like the
  /// others, one at a time in the order posted: a posted `recv` waits for its message before
  /// anything posted after it starts, so two ranks that both send first a message larger than
  /// the transport buffers wait on each other (the later one times out naming the peer);
  /// posted inside a batch (`fuse()`, like ncclGroupStart/End), a run of sends and receives
  /// goes as one group that never deadlocks (see `run_p2p`): `auto b = comm.fuse(); auto s =
  /// comm.isend(x, right); auto r = comm.irecv(y, left); b.post();`.
  template <viewable B>
  request isend(B&& data_buf, int peer, int tag = 0) {
    static_assert(detail::lasting<B>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto data = readable(data_buf);
    using U = detail::element_of<B>;
    auto* bytes = const_cast<std::byte*>(reinterpret_cast<const std::byte*>(data.data()));
    if constexpr (matched_p2p<Transport>) {
      return post_matched(true, bytes, data.size_bytes(), dtype_of<U>(), data.size(), peer, tag, "isend");
    } else {
      if (fusing_) return hold_p2p({true, peer, tag, p2p_fp(dtype_of<U>(), data.size(), tag), bytes, data.size_bytes()});
      return post([this, data, peer, tag] { send(data, peer, tag); });
    }
  }
  /// `recv`, posted (see `isend`); `request::status()` gives what it received once complete.
  template <viewable B>
  request irecv(B&& data_buf, int peer, int tag = 0) {
    static_assert(detail::lasting<B>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto data = writable(data_buf);
    using T = detail::element_of<B>;
    auto* bytes = reinterpret_cast<std::byte*>(data.data());
    if constexpr (matched_p2p<Transport>) {
      return post_matched(false, bytes, data.size_bytes(), dtype_of<T>(), data.size(), peer, tag, "irecv");
    } else {
      if (fusing_) return hold_p2p({false, peer, tag, p2p_fp(dtype_of<T>(), data.size(), tag), bytes, data.size_bytes()});
      return post([this, data, peer, tag] { recv(data, peer, tag); });
    }
  }

  /// Operations posted on this communicator and not yet complete.
  std::size_t pending() const noexcept { return engine_.pending(); }

  /// A batch of operations posted together (like ncclGroupStart/ncclGroupEnd), returned by
  /// `fuse()`: the in-place `iall_reduce`s of at most 256 KiB posted back to back while it is
  /// open, of the same element type, op and algorithm, move as one transfer of at most
  /// `max_bytes` (packed, reduced as one all_reduce, unpacked; their requests complete
  /// together). The results are bitwise those of the separate calls: operations where the
  /// order of a reduction could change a bit (floating-point sums and products of three or more
  /// ranks, user ops) are posted unfused (see `fuses_exactly`). The fused transfer's fingerprint
  /// carries every operation's count, so ranks whose batches differ get `mismatch_error`. Other
  /// operations posted meanwhile keep their place in the order. It ends with `post()` or its
  /// destructor; a blocking call posts what it holds first. Moving or destroying the
  /// communicator ends it too (its operations are posted, and the move waits for them, as for
  /// every posted operation): what it holds points to the communicator it was posted on.
  class batch {
   public:
    batch(batch&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {
      if (c_) c_->open_batch_.open = this;
    }
    batch& operator=(batch&&) = delete;
    ~batch() { post(); }
    /// Ends the batch: posts what it holds.
    void post() {
      if (communicator* c = std::exchange(c_, nullptr)) {
        c->open_batch_.open = nullptr;
        c->fusing_ = false;
        c->release_held();
      }
    }

   private:
    friend class communicator;
    explicit batch(communicator* c) noexcept : c_(c) { c->open_batch_.open = this; }
    communicator* c_;
  };
  /// Opens a batch (see `batch`); one at a time per communicator.
  [[nodiscard]] batch fuse(std::size_t max_bytes = std::size_t{4} << 20) {
    if (fusing_) local_usage("fuse: a batch is already open on this communicator");
    if (max_bytes == 0) local_usage("fuse: max_bytes must be positive");
    fusing_ = true;
    fusion_bytes_ = max_bytes;
    return batch(this);
  }

  // ---- groups -----------------------------------------------------------------------------

  /// A communicator of the listed ranks (new rank i is `ranks[i]`), sharing this one's links.
  /// Every rank of this communicator calls it with the same list, as torch's `new_group`;
  /// non-members get an empty optional. Different lists on different ranks: `mismatch_error`.
  std::optional<communicator> new_group(std::vector<int> ranks) {
    const auto busy = ordered("new_group");
    std::vector<char> seen(static_cast<std::size_t>(size()), 0);
    for (int r : ranks) {
      if (r < 0 || r >= size())
        usage("new_group: rank " + std::to_string(r) + " is outside 0.." + std::to_string(size() - 1));
      if (seen[static_cast<std::size_t>(r)]++) usage("new_group: rank " + std::to_string(r) + " is listed twice");
    }
    std::uint64_t h = 0x6e65775f67726f75ull;
    for (int r : ranks) h = detail::hash_combine(h, static_cast<std::uint64_t>(r));
    const std::uint64_t context = detail::hash_combine(context_, h ^ seq_);
    // Agree: every rank must have passed the same list.
    auto hashes = exchange(h);
    if (std::any_of(hashes.begin(), hashes.end(), [&](std::uint64_t x) { return x != hashes[0]; })) {
      // Every rank saw the disagreement: exchange the lists themselves, to name them.
      const auto longest = exchange(ranks.size());
      const std::size_t width = *std::max_element(longest.begin(), longest.end());
      std::vector<std::uint64_t> mine(width, ~std::uint64_t{0});
      for (std::size_t i = 0; i < ranks.size(); ++i) mine[i] = static_cast<std::uint64_t>(ranks[i]);
      const auto all = exchange(view<const std::uint64_t>(mine));
      auto list_of = [&](int r) {
        std::string s;
        for (std::size_t i = 0; i < width; ++i) {
          const auto v = all[static_cast<std::size_t>(r) * width + i];
          if (v != ~std::uint64_t{0}) s += (s.empty() ? "" : ", ") + std::to_string(v);
        }
        return "[" + s + "]";
      };
      int other = 0;
      while (other < size() && hashes[static_cast<std::size_t>(other)] == h) ++other;
      guarded([&] {
        throw mismatch_error("new_group: rank " + std::to_string(rank()) + " passed " + list_of(rank()) + ", rank " +
                             std::to_string(other) + " passed " + list_of(other) +
                             " (every rank must pass the same list)");
      });
    }
    const bool member = seen[static_cast<std::size_t>(rank())];
    if constexpr (collective_sub<Transport>) {
      std::optional<Transport> t;
      guarded([&] { t = t_.split_sub(std::span<const int>(ranks), member, context); });
      if (!member) return std::nullopt;
      return child_of(std::move(*t), context, algo_);
    } else {
      if (!member) return std::nullopt;
      return child(ranks, context);
    }
  }

  /// MPI_Comm_split: ranks with the same `color` form a group, ordered by (`key`, rank).
  /// A negative color opts out and gets an empty optional. Every rank calls it.
  std::optional<communicator> split(int color, int key) { return split(color, key, algo_); }

  /// `split` whose group runs algorithm `a` instead of this communicator's (a mesh axis with an
  /// algorithm of its own: `tutti::axis<"dp", tutti::algo::ring>`).
  template <tutti::algorithm A>
  std::optional<communicator<Transport, A>> split(int color, int key, A a) {
    const auto busy = ordered("split");
    const std::uint64_t mine = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(color)) << 32) |
                               static_cast<std::uint32_t>(key);
    const std::uint64_t base = seq_;
    auto all = exchange(mine);
    if (color < 0 && !collective_sub<Transport>) return std::nullopt;
    std::vector<std::pair<int, int>> members;  // (key, rank)
    for (int i = 0; i < size(); ++i) {
      const auto v = all[static_cast<std::size_t>(i)];
      if (color >= 0 && static_cast<std::int32_t>(v >> 32) == color)
        members.emplace_back(static_cast<std::int32_t>(v & 0xffffffffu), i);
    }
    std::sort(members.begin(), members.end());
    std::vector<int> ranks;
    for (auto& m : members) ranks.push_back(m.second);
    const std::uint64_t context = detail::hash_combine(context_, detail::hash_combine(base, static_cast<std::uint64_t>(color) + 0x73706c6974ull));
    if constexpr (collective_sub<Transport>) {  // every rank takes part, with its own group's members
      std::optional<Transport> t;
      guarded([&] { t = t_.split_sub(std::span<const int>(ranks), color >= 0, context); });
      if (color < 0) return std::nullopt;
      return child_of(std::move(*t), context, std::move(a));
    } else {
      return child(ranks, context, std::move(a));
    }
  }

  /// `n` elements (zeroed) in memory shared with the peers, on transports that have it
  /// (`shared_allocation`: `tutti::shm`): collectives whose input lies there skip the copy into
  /// shared memory.
  template <class T>
    requires shared_allocation<Transport>
  shared_buffer<T, Transport> allocate(std::size_t n) {
    return shared_buffer<T, Transport>(t_, n);
  }

  /// Which algorithm a collective `c` of `bytes` would run on this communicator, and why: the
  /// line `TUTTI_DEBUG=info` prints per call. `bytes` as the collective's `size_basis` says:
  /// the whole buffer (broadcast, reduce, all_reduce, the scans, reduce_scatter's input), one
  /// rank's block (gather, all_gather, scatter, all_to_all), the largest block (all_gather_v,
  /// reduce_scatter_v), 0 (barrier, and the v-collectives no rank knows every size of). Local:
  /// no communication.
  std::string explain(collective c, std::size_t bytes) const {
    if (!is_collective(static_cast<std::uint8_t>(c)) || !info(c).scheduled)
      throw usage_error("explain: " + std::string(collective_name(c)) + " is not a collective an algorithm schedules");
    if constexpr (detail::is_automatic<Algorithm>::value) {
      if (size() == 1) return std::string(collective_name(c)) + " on 1 rank: nothing to communicate";
      std::string why;
      const std::size_t i = algo_.choose(*plan_, c, bytes, &why);
      if (!plan_->runs[i][static_cast<std::size_t>(c)])
        return std::string(collective_name(c)) + " of " + std::to_string(bytes) + " bytes on " + std::to_string(size()) +
               " ranks: no candidate of this communicator's automatic has a schedule for it on this transport";
      return explain_text(c, bytes, Algorithm::names[i], why);
    } else {
      if (!with_collective(c, [](auto cc) { return algorithm_for<Algorithm, decltype(cc)::value, Transport>; }))
        return std::string(collective_name(c)) + ": " + std::string(Algorithm::name) +
               " (the communicator's algorithm) has no schedule for it on this transport";
      return std::string(collective_name(c)) + " of " + std::to_string(bytes) + " bytes on " + std::to_string(size()) +
             " ranks: " + std::string(Algorithm::name) + " (the communicator's algorithm; automatic would consult TUTTI_ALGO)";
    }
  }

  /// The context id of this communicator (0 for the world).
  std::uint64_t context() const noexcept { return context_; }

  /// Collective `C` of the table with the arguments `d` describes (see `call_desc`), run with
  /// `arg` (an algorithm, or a stream of a `stream_ordered` transport): what every collective
  /// member runs, for code that loops over the table (`for_each_collective`).
  template <collective C, class T, class Op = algo::no_op, class Arg = algo::inherit>
  auto call(const call_desc<T, memory, Op>& d, const Arg& arg = {});
  /// `call<C>(d, a)` posted to the progress engine (the `i` twins); `d`'s buffers and counts
  /// must outlive the request.
  template <collective C, class T, class Op = algo::no_op, class Algo = algo::inherit>
  request icall(const call_desc<T, memory, Op>& d, const Algo& a = {});

 private:
  template <tutti::transport, tutti::algorithm>
  friend class communicator;  // a split with another algorithm sets its group's context
  friend class collective_calls<communicator, memory>;
  template <class, class, class, class, class>
  friend struct detail::reduce_task;
  template <class, class, class, class, class>
  friend struct detail::fused_task;
  template <class>
  friend struct detail::p2p_task;
  template <class>
  friend struct detail::p2p_group_task;

  template <class T, class Op = algo::no_op>
  using desc = call_desc<T, memory, Op>;

  // ---- the call path (group/call_path.hpp) ----------------------------------------------------

  template <class Algo>
  using resolved = std::conditional_t<std::is_same_v<Algo, algo::inherit>, Algorithm, Algo>;
  template <class Algo, collective C>
  static constexpr bool supports = algorithm_for<resolved<Algo>, C, Transport>;

  /// iall_reduce in place: posted, or held for fusion in a batch.
  template <class Algo, class T, class Op>
  request post_all_reduce(const Algo& a, const desc<T, Op>& d);
  template <class T, class Op>
  static desc<T, Op> in_place_desc(view<T, memory> v, const Op& op) {
    return {view<const T, memory>(v), v, -1, {}, {}, op, true};
  }

  template <collective C, class A, class T, class Op>
  void run_call(const A& a, const desc<T, Op>& d);
  /// A call as `run<C>` takes it, after the checks: its fingerprint, the bytes automatic
  /// chooses by, the schedule's arguments; `alone`: a one-rank group's, done already.
  template <class T, class K, class Counts>
  struct checked_call {
    fingerprint fp;
    std::size_t basis;
    algo::call_args<T, memory, K, Counts> x;
    bool alone;
  };
  /// The checks and the fingerprint of a call of `C` (steps 2-4 of the call path): apart from
  /// the algorithm, so that calls of one collective with several algorithms share them.
  template <collective C, class T, class Op>
  auto checked(const desc<T, Op>& d);
  /// The schedule of `C` with the resolved algorithm (automatic: the one it chooses).
  template <collective C, class A, class X>
  void run(const A& a, const fingerprint& fp, std::size_t bytes, const X& x);
  /// A call of a rank-ordered op (`detail::rank_ordered_op`: `op::ordered`,
  /// `op::reproducible_sum`) of a reducing collective, after the checks (group/ordered_path.hpp):
  /// every rank's values moved raw by `run_moving`, folded where they are reduced, in rank order.
  template <collective C, class A, class T, class K, class Counts>
  void run_ordered(const A& a, const fingerprint& fp, std::size_t bytes, const algo::call_args<T, memory, K, Counts>& x);
  /// `run<C>` of a collective that moves bytes, with `a` where it has `C` on the transport, else
  /// with `algo::direct`.
  template <collective C, class A, class X>
  void run_moving(const A& a, const fingerprint& fp, std::size_t bytes, const X& x);
  /// One rank's call of a rank-ordered op `K`: its own values are the multiset, and an op that
  /// folds itself folds them as any other (reproducible_sum's -0.0 is +0.0 at every rank count).
  template <class K, class T>
  static void fold_alone(view<T, memory> v) {
    if constexpr (detail::folds_itself<T, K>) {
      const T* row = v.data();
      K::fold(v.data(), &row, 1, v.size());
    }
  }
  /// run_ordered's all_reduce and reduce gather whole buffers (one collective) while p·n is at
  /// most this many bytes; above it, the blocks of a reduce-scatter.
  static constexpr std::size_t ordered_gather_bytes = std::size_t{64} << 10;
  /// Runs a schedule of tutti's on erased elements (`detail::elem<S>`, `detail::erased_op`):
  /// compiled once per element size, not per element type and op. `candidate`: automatic's
  /// choice (ignored for a concrete algorithm).
  template <collective C, std::size_t S, class A>
  void run_erased(const A& a, std::size_t candidate, const fingerprint& fp,
                  const algo::call_args<detail::elem<S>, memory, detail::erased_op, algo::counts_for<C>>& x);
  /// `run_erased<C, S>` with the communicator's own algorithm, for any scheduled collective `c`
  /// at element size `s` (`detail::compiled_size`), as one function (`args`: the call's
  /// `call_args<elem<s>, ...>`): what tutti::compiled compiles once for the communicators it
  /// instantiates (tutti/compiled.hpp), so that a program built against it does not.
  /// `own`: null, or the call's own algorithm (`comm.all_reduce(v, op, algo::ring{...})`), of
  /// the type of `a`'s candidate number `candidate`, run with its own settings.
  void run_compiled(const algorithm_type& a, const void* own, collective c, std::size_t s, std::size_t candidate,
                    const fingerprint& fp, const void* args);
  /// `run_compiled`'s entries, one per scheduled collective (by value) and element size 1, 2, 4,
  /// 8 (null where `detail::compiled_size` is false): a table, so that a call finds its run in
  /// one load rather than by comparing rows. (Member templates, not template lambdas: nvcc's front
  /// end miscompiles those in an out-of-class member definition.)
  using compiled_entry = void (communicator::*)(const algorithm_type&, const void*, std::size_t, const fingerprint&,
                                                const void*);
  template <collective C, std::size_t S>
  void run_compiled_at(const algorithm_type& a, const void* own, std::size_t candidate, const fingerprint& fp,
                       const void* args);
  template <std::size_t I, std::size_t S>
  static constexpr compiled_entry compiled_entry_of() {
    if constexpr (detail::compiled_size(static_cast<collective>(I), S))
      return &communicator::run_compiled_at<static_cast<collective>(I), S>;
    else
      return nullptr;
  }
  template <std::size_t... I>
  static constexpr std::array<std::array<compiled_entry, 4>, sizeof...(I)> compiled_table(std::index_sequence<I...>) {
    return {{{compiled_entry_of<I, 1>(), compiled_entry_of<I, 2>(), compiled_entry_of<I, 4>(),
              compiled_entry_of<I, 8>()}...}};
  }
  /// Whether `run<C>` with algorithm `A` at element size `S` goes through `run_compiled`: the
  /// communicator's `automatic`, or a call's algorithm that is one of its candidates.
  template <class A, collective C, std::size_t S>
  static constexpr bool compiled_here() {
    return detail::compiled_transport<Transport> && std::is_same_v<Algorithm, algo::automatic> &&
           (std::is_same_v<A, Algorithm> || detail::is_candidate<A, Algorithm>) &&
           detail::compiled_size(C, S);
  }
  template <collective C, class A, class X>
  void execute(const A& a, const fingerprint& fp, const X& x);
  template <collective C, class A, class Ch, class X>
  static void schedule(const A& a, Ch& ch, const X& x);

  /// Whether a call of `C` reaches schedules on erased elements: host memory, and not a
  /// transport's own collectives (`algo::native` needs the types to map them).
  template <class A, collective C>
  static constexpr bool runs_erased() {
    if constexpr (!std::is_same_v<memory, host_memory> || own_memory<Transport> || detail::needs_types<A>())
      return false;
    else
      return algorithm_for<A, C, Transport> &&
             schedule_probe_erased<A, C, channel<Transport>>();
  }

  TUTTI_COLD std::string explain_text(collective c, std::size_t bytes, std::string_view name, const std::string& why) const {
    return std::string(collective_name(c)) + " of " + std::to_string(bytes) + " bytes on " + std::to_string(size()) +
           " ranks: " + std::string(name) + " (" + why + ")";
  }

  /// The plan of automatic_of type `A` (this communicator's own algorithm's, or the default's).
  template <class A>
  const typename A::plan& plan_for() const;
  /// The candidate of automatic_of `A` that a call of `c` with `bytes` (its size basis) runs.
  /// The communicator's own automatic remembers its last answer (`last_choice_`: a loop's calls
  /// repeat their collective and size, and its plan does not change); with TUTTI_DEBUG=info
  /// every choice is made afresh and logged with its reason.
  template <class A>
  std::size_t choice(const A& a, collective c, std::size_t bytes);
  /// Parses TUTTI_ALGO once (`config_error` at construction when malformed).
  void make_plans();

  // ---- the progress engine --------------------------------------------------------------------

  /// A call of this communicator in progress on this thread (see `ordered`). A second thread
  /// that calls meanwhile gets `usage_error` naming both calls, and the communicator breaks
  /// once the first call ends (on the first thread, which alone may touch the transport), so
  /// the peers raise that usage error too. Costs a few plain loads and stores: two threads that
  /// enter within nanoseconds of each other may pass unseen (then the peers see the calls out
  /// of order, a mismatch_error).
  class in_use {
   public:
    in_use(communicator& c, const char* call) : c_(c) {
      const auto me = std::this_thread::get_id();
      const auto owner = c.use_.owner.load(std::memory_order_relaxed);
      if (owner != me) {
        if (owner != std::thread::id{}) [[unlikely]]
          c.concurrent_use(call);
        c.use_.owner.store(me, std::memory_order_relaxed);
        c.use_.call.store(call, std::memory_order_relaxed);
      }
      ++c.use_.depth;
    }
    in_use(const in_use&) = delete;
    in_use& operator=(const in_use&) = delete;
    ~in_use() {
      if (--c_.use_.depth > 0) return;
      c_.use_.owner.store(std::thread::id{}, std::memory_order_relaxed);
      if (c_.use_.intruder.load(std::memory_order_relaxed)) [[unlikely]]
        c_.after_concurrent_use();
    }

   private:
    communicator& c_;
  };

  /// A blocking call (`call` names it) waits for the operations posted before it (it is
  /// ordered after them), then holds the communicator for its thread until it returns.
  [[nodiscard]] in_use ordered(const char* call) {
    if (!held_.empty()) release_held();
    if (engine_.busy()) engine_.drain();
    return in_use(*this, call);
  }
  /// Another thread is in a call (see `in_use`): raises usage_error here, touching nothing.
  [[noreturn]] TUTTI_COLD void concurrent_use(const char* call) {
    use_.intruder.store(call, std::memory_order_relaxed);
    const char* other = use_.call.load(std::memory_order_relaxed);
    throw usage_error(std::string(call) + " on rank " + std::to_string(rank()) + ": another thread is in " +
                      (other ? other : "a call") +
                      " on this communicator; a communicator is used by one thread at a time (give each thread "
                      "a group of its own: split or new_group)");
  }
  /// The first thread's call has ended: break the communicator, telling the peers.
  TUTTI_COLD void after_concurrent_use() noexcept {
    const char* call = use_.call.load(std::memory_order_relaxed);
    const char* other = use_.intruder.exchange(nullptr, std::memory_order_relaxed);
    if (!broken_.empty()) return;
    try {
      break_with(usage_error(std::string(call ? call : "a call") + " on rank " + std::to_string(rank()) +
                             " ran while another thread called " + other +
                             " on the same communicator; a communicator is used by one thread at a time"));
    } catch (...) {  // no memory for the text: the peers learn of it at their deadline
    }
  }

  using task_ptr = detail::task_ptr;
  using held_op = detail::held_op<communicator>;
  static constexpr std::size_t fusion_piece_bytes = std::size_t{256} << 10;

  /// Whether a fused all_reduce gives every element bitwise what the separate calls give: the
  /// fused transfer may take another algorithm, or cut the buffer elsewhere, so each element's
  /// reduction may be formed in another order. Exact where order cannot matter: min and max,
  /// the bitwise ops, integers (wrapping sum and product are associative), and two ranks (one
  /// combination per element, and IEEE addition and multiplication commute). Floating-point
  /// sums and products (and avg) of three or more ranks are posted unfused, as are user ops.
  template <class T, class Op>
  bool fuses_exactly() const {
    if constexpr (!std::is_same_v<memory, host_memory>)
      return false;  // the packed buffer is host memory
    else if constexpr (detail::rank_ordered_op<Op>)
      return true;  // folded elementwise in rank order, however the buffer is cut
    else if constexpr (std::is_same_v<Op, op::min> || std::is_same_v<Op, op::max> || std::is_same_v<Op, op::band> ||
                       std::is_same_v<Op, op::bor> || std::is_same_v<Op, op::bxor>)
      return true;
    else if constexpr (std::is_same_v<Op, op::sum> || std::is_same_v<Op, op::prod> || std::is_same_v<Op, op::avg>)
      return std::is_integral_v<T> || size() <= 2;
    else
      return false;
  }

  /// Posts `t`, or holds it while a batch is open.
  void submit(task_ptr t) {
    if (fusing_) hold({std::move(t)});
    else enqueue(std::move(t));
  }
  /// Keeps `o` until the batch ends; its request refuses to be waited on meanwhile.
  void hold(held_op o) {
    o.t->state->held.store(true, std::memory_order_relaxed);
    held_.push_back(std::move(o));
  }
  /// Posts `t` to the engine (made on the first post, counting in the flight recorder what
  /// waits to start).
  void enqueue(task_ptr t) { engine_.get(recorder_.waiting()).post(std::move(t)); }
  template <class F>
  request post(F f) {
    auto t = std::make_unique<detail::posted_task<F>>(std::move(f));
    auto state = t->state;
    submit(std::move(t));
    return request(std::move(state));
  }

  /// Posts what a batch holds, in order: runs of fusable all_reduces of one kind as one task,
  /// runs of sends and receives as one group.
  void release_held() {
    auto held = std::move(held_);
    held_.clear();
    for (held_op& h : held) h.t->state->held.store(false, std::memory_order_relaxed);
    for (std::size_t i = 0; i < held.size();) {
      std::size_t j = i + 1, bytes = held[i].bytes;
      if (held[i].kind)
        while (j < held.size() && held[j].kind == held[i].kind && bytes + held[j].bytes <= fusion_bytes_) bytes += held[j++].bytes;
      else if (held[i].p2p)
        while (j < held.size() && held[j].p2p) ++j;
      const std::size_t n = j - i;
      std::vector<task_ptr> run;
      for (std::size_t k = i; k < j; ++k) run.push_back(std::move(held[k].t));
      if (n == 1) enqueue(std::move(run.front()));
      else if (held[i].p2p) enqueue(std::make_unique<detail::p2p_group_task<communicator>>(this, std::move(run)));
      else enqueue(held[i].fuse(this, std::move(run)));
      i = j;
    }
  }

  /// A send or receive through the transport's own matching (`matched_p2p`), checked and
  /// started at once, apart from the collectives' queue. A communicator broken by an earlier
  /// failure, or aborted, refuses it as it refuses any call.
  request post_matched(bool send, std::byte* data, std::size_t bytes, dtype d, std::size_t count, int peer, int tag,
                       const char* call) {
    check_peer(peer, tag, call, !send);
    // Posted operations may be running on the engine's thread, which owns the failure state
    // meanwhile: the transport's wait then sees an abort, and what the transport refuses is the
    // caller's alone. Otherwise a call like the others: refused on a broken communicator, and
    // breaking it when the transport refuses (a tag beyond MPI's bound).
    if (engine_.busy()) return post_matched_unchecked(send, data, bytes, d, count, peer, tag);
    request r;
    guarded([&] { r = post_matched_unchecked(send, data, bytes, d, count, peer, tag); });
    return r;
  }
  /// A send or receive as the transport takes it, without its deadline and abort flag.
  static p2p_post p2p_of(std::byte* data, std::size_t bytes, dtype d, std::size_t count, int peer, int tag) {
    p2p_post p;
    p.peer = peer;
    p.tag = tag;
    p.type = d;
    p.count = count;
    p.data = data;
    p.bytes = bytes;
    return p;
  }
  request post_matched_unchecked(bool send, std::byte* data, std::size_t bytes, dtype d, std::size_t count, int peer,
                                 int tag) {
    return post_matched_unchecked(send, p2p_of(data, bytes, d, count, peer, tag));
  }
  request post_matched_unchecked(bool send, p2p_post p) {
    p.timeout = cfg_.timeout;
    p.aborted = aborted_;
    if constexpr (matched_p2p<Transport>)  // (explicit instantiations compile every member)
      return request(send ? t_.post_send(p) : t_.post_recv(p));
    else
      return request();
  }

  /// A blocking send or receive through the transport's own matching: posted and waited for.
  /// With no posted operation running, it is a call like the others (in the flight recorder and
  /// the counters, shown to the hooks; a failure breaks the communicator and tells the peers);
  /// beside posted operations, which own that state on the engine's thread meanwhile, its
  /// failure is its own, as a posted one's.
  recv_status matched_blocking(bool send, std::byte* data, std::size_t bytes, dtype d, std::size_t count, int peer,
                               int tag, const char* call) {
    check_peer(peer, tag, call, !send);
    if (!held_.empty()) release_held();
    recv_status got;
    // What can move at once moves without a request (`p2p_fast_path`).
    const p2p_post fast = p2p_of(data, bytes, d, count, peer, tag);
    bool tried = false;  // a send's fast path, tried already
    const auto run = [&] {
      if constexpr (p2p_fast_path<Transport>)
        if (!tried && (send ? t_.try_send_now(fast) : t_.try_recv_now(fast, got))) return;
      request r = post_matched_unchecked(send, fast);
      r.wait();
      got = r.status();
    };
    if (engine_.busy()) {
      run();
      return got;
    }
    const auto record = [&](auto&& body) {
      channel<Transport> ch = channel_for(p2p_fp(d, count, tag == any_tag ? 0 : tag), "p2p");
      recorded(ch, {send ? detail::kind_send : detail::kind_recv, bytes, peer == any_source ? -1 : peer}, body);
    };
    // A send that goes at once is recorded once it went: the recorder's clock reads (two, some
    // 20 ns each) are then off the message's way to its receiver.
    if constexpr (p2p_fast_path<Transport>)
      if (send && broken_.empty() && !aborted()) {
        tried = true;
        if (t_.try_send_now(fast)) {
          record([] {});
          return got;
        }
      }
    record(run);
    return got;
  }

  request hold_p2p(const detail::p2p_op& o) {
    auto t = std::make_unique<detail::p2p_task<communicator>>(this, o);
    auto state = t->state;
    hold({std::move(t), nullptr, 0, nullptr, true});
    return request(std::move(state));
  }

  /// Runs a group of sends and receives without deadlock, whatever their order and peers, as
  /// long as every rank's messages match: in steps k = 1 .. size-1, every rank sends what goes
  /// to rank + k while it receives what comes from rank - k, the i-th send and the i-th
  /// receive of the step as one full-duplex sendrecv. At step k, rank r's i-th send is the
  /// i-th receive of rank r + k in that same step (each pair's messages keep their order), so
  /// every rank's i-th operation needs only its neighbours' i-th: all complete, step by step.
  void run_p2p(std::span<const detail::p2p_op> ops) {
    for (const detail::p2p_op& o : ops) check_peer(o.peer, o.tag, o.send ? "isend" : "irecv", !o.send);
    const int n = size(), r = rank();
    std::vector<const detail::p2p_op*> out, in;
    for (int k = 1; k < n; ++k) {
      const int to = (r + k) % n, from = (r - k + n) % n;
      out.clear();
      in.clear();
      for (const detail::p2p_op& o : ops) {
        if (o.send && o.peer == to) out.push_back(&o);
        if (!o.send && o.peer == from) in.push_back(&o);
      }
      for (std::size_t i = 0; i < std::max(out.size(), in.size()); ++i) {
        const detail::p2p_op* s = i < out.size() ? out[i] : nullptr;
        const detail::p2p_op* v = i < in.size() ? in[i] : nullptr;
        channel<Transport> ch = channel_for((s ? s : v)->fp, "p2p");
        const op_label label = s ? op_label{detail::kind_send, s->bytes + (v ? v->bytes : 0), to}
                                 : op_label{detail::kind_recv, v->bytes, from};
        recorded(ch, label, [&] {
          if (s && v)
            t_.sendrecv(to, header{s->fp, s->bytes}, s->data, from, header{v->fp, v->bytes}, v->data, ch.wait());
          else if (s)
            t_.send(to, header{s->fp, s->bytes}, s->data, ch.wait());
          else
            t_.recv(from, header{v->fp, v->bytes}, v->data, ch.wait());
        });
      }
    }
  }

  /// In-place all_reduce of a fused run, as one call whose fingerprint carries the members'
  /// counts (group/call_path.hpp).
  template <class T, class Op, class Algo>
  void fused_all_reduce(std::span<const view<T, memory>> parts, const Op& op, const Algo& a);
  template <std::size_t S, class A>
  void run_fused(const A& a, std::size_t candidate, const fingerprint& fp, std::span<const view<detail::elem<S>, memory>> parts,
                 const detail::erased_op& op, std::size_t total);
  /// `run_fused<s>` with the communicator's own algorithm, as one function (`parts`: the
  /// `span<const view<elem<s>>>`), compiled once in tutti::compiled as `run_compiled` is.
  void run_fused_compiled(const algorithm_type& a, std::size_t s, std::size_t candidate, const fingerprint& fp, const void* parts,
                          const detail::erased_op& op, std::size_t total);
  template <std::size_t S>
  static std::span<const view<detail::elem<S>, memory>> fused_parts_of(const void* parts) {
    return *static_cast<const std::span<const view<detail::elem<S>, memory>>*>(parts);
  }
  template <class A, class E, class Op>
  void fused_parts(const A& alg, const fingerprint& fp, std::span<const view<E, memory>> parts, const Op& op, std::size_t total);

  // ---- streams ------------------------------------------------------------------------------

  /// Runs a call's body with its trailing argument. On a `stream_ordered` transport the call's
  /// work is enqueued on the stream given in the algorithm's place (the communicator's algorithm
  /// then runs) and a request for it is returned; without a stream, on the transport's own
  /// stream, waited for before returning. Elsewhere the body just runs with the algorithm.
  template <class Arg, class Body>
  auto with_stream(const Arg& arg, Body&& body) {
    if constexpr (detail::stream_arg<Transport, Arg>) {
      guarded([&] { t_.bind_stream(&arg); });
      body(algo::inherit{});
      return request(t_.completion(wait_context{cfg_.timeout, {}, aborted_.get()}));
    } else if constexpr (stream_ordered<Transport>) {
      guarded([&] { t_.bind_stream(nullptr); });
      body(arg);
      request r(t_.completion(wait_context{cfg_.timeout, {}, aborted_.get()}));
      guarded([&] { r.wait(); });
    } else {
      body(arg);
    }
  }

  // ---- buffers ------------------------------------------------------------------------------

  /// The view of an input buffer, read only.
  template <class X>
  static auto readable(X&& x) {
    auto v = as_view(std::forward<X>(x));
    using V = decltype(v);
    static_assert(std::is_same_v<typename V::memory, memory>,
                  "tutti: the view's memory kind is not this communicator's transport's (transport_traits::memory)");
    return view<const typename V::value_type, memory>(v);
  }
  /// The view of an output buffer, which must be writable.
  template <class X>
  static auto writable(X&& x) {
    auto v = as_view(std::forward<X>(x));
    using V = decltype(v);
    static_assert(!std::is_const_v<typename V::element_type>,
                  "tutti: this collective writes into the buffer: pass a non-const view, range or value");
    static_assert(std::is_same_v<typename V::memory, memory>,
                  "tutti: the view's memory kind is not this communicator's transport's (transport_traits::memory)");
    return v;
  }

  // ---- failures -------------------------------------------------------------------------------

  /// The channel of one operation: the call's fingerprint, deadline, scratch, abort flag, and
  /// the counters its waits add to.
  channel<Transport> channel_for(const fingerprint& fp, std::string_view algorithm) {
    return channel<Transport>(t_, fp, algorithm, cfg_.timeout, scratch_, aborted_.get(), counters_.waits());
  }
  /// The channel of algorithm `A`'s schedule: the call's fingerprint with `A`'s id.
  template <class A>
  channel<Transport> channel_of(const fingerprint& fp) {
    channel<Transport> ch = channel_for(fp, A::name);
    ch.set_algorithm_id(algorithm_id<A>());
    return ch;
  }

  /// What `recorded` counts of an operation besides its fingerprint: its kind
  /// (`detail::kind_of`, or send / recv), this rank's bytes, the peer of point to point.
  struct op_label {
    std::size_t kind;
    std::size_t bytes = 0;
    int peer = -1;
  };

  /// guarded(f), with the call in the flight recorder and the counters, and shown to the hooks
  /// and the trace when they watch. The recorder reads the clock at both ends; the counters
  /// take its times (`end_operation`, one call as the recorder's end was), and a call nothing
  /// watches tests one pointer at each end.
  template <class F>
  void recorded(const channel<Transport>& ch, const op_label& l, F&& f) {
    const detail::flight_mark m = recorder_.begin(ch.fp(), ch.algorithm());
    if (observers_) [[unlikely]] observe_start(ch, l, m.start_ns);
    guarded(std::forward<F>(f), [&](const std::exception& e) { record_failure(ch, l, m, e); });
    const std::int64_t end_ns = detail::end_operation(recorder_, counters_, m, l.kind, l.bytes, true);
    if (observers_) [[unlikely]] observe_end(ch, l, m.start_ns, end_ns, nullptr);
  }
  /// `recorded`'s operation failed with `e` (the peers told already): the record, the counters,
  /// then the hooks and the trace, which must not replace `e` (it is being handled).
  TUTTI_COLD void record_failure(const channel<Transport>& ch, const op_label& l, const detail::flight_mark& m,
                                 const std::exception& e) {
    const std::int64_t end_ns = detail::end_operation(recorder_, counters_, m, l.kind, l.bytes, false);
    if (observers_) try {
        observe_end(ch, l, m.start_ns, end_ns, &e);
      } catch (...) {
      }
  }
  TUTTI_COLD void observe_start(const channel<Transport>& ch, const op_label& l, std::int64_t t0) {
    const op_event ev = event_of(ch, l, t0, 0, nullptr);
    if (observers_->start) detail::call_hook(observers_->start, ev);
    if (observers_->trace) observers_->push_waits(counters_.waits(), size());
  }
  TUTTI_COLD void observe_end(const channel<Transport>& ch, const op_label& l, std::int64_t t0, std::int64_t t1,
                              const std::exception* e) {
    const op_event ev = event_of(ch, l, t0, t1, e);
    if (const op_hook& h = e ? observers_->error : observers_->end) detail::call_hook(h, ev);
    if (!observers_->trace) return;
    const std::vector<std::int64_t> before = observers_->pop_waits();
    detail::trace_event(*observers_, ev, before.empty() ? nullptr : before.data(), counters_.waits(), size());
    if (e) detail::trace_flush();
  }
  op_event event_of(const channel<Transport>& ch, const op_label& l, std::int64_t t0, std::int64_t t1,
                    const std::exception* e) const {
    op_event ev;
    ev.name = detail::kind_name(l.kind);
    if (l.kind == detail::kind_other) ev.name = collective_name(ch.fp().coll);
    ev.fp = &ch.fp();
    ev.algorithm = ch.algorithm();
    ev.bytes = l.bytes;
    ev.rank = rank();
    ev.peer = l.peer;
    ev.posted = engine_.on_engine();
    ev.start_ns = t0;
    ev.end_ns = t1;
    ev.error = e;
    return ev;
  }
  /// A one-rank call (a copy, made by `checked`): counted, and shown to the hooks and the trace
  /// with the algorithm "alone". Cold, so that `checked` stays small enough to inline.
  TUTTI_COLD void record_alone(const fingerprint& fp, std::size_t in_bytes, std::size_t out_bytes) {
    const std::size_t bytes = std::max(in_bytes, out_bytes);
    counters_.add(detail::kind_of(fp.coll), bytes, 0);
    if (observers_) [[unlikely]] observe_alone(fp, bytes);
  }
  TUTTI_COLD void observe_alone(const fingerprint& fp, std::size_t bytes) {
    const channel<Transport> ch = channel_for(fp, "alone");
    const op_label l{detail::kind_of(fp.coll), bytes};
    const std::int64_t t = detail::realtime_ns();
    observe_start(ch, l, t);
    observe_end(ch, l, t, t, nullptr);
  }
  /// Sets one hook (`on_start`, `on_end`, `on_error`), after what was posted before.
  void set_hook(op_hook detail::observers::*which, op_hook f) {
    const auto busy = ordered("on_start/on_end/on_error");
    if (!observers_) observers_ = std::make_unique<detail::observers>();
    (*observers_).*which = std::move(f);
    observers_->context = context_;
    if (observers_->empty()) observers_.reset();
  }

  /// Runs `f`; on a failure, saves the flight recorder for the launcher, marks the communicator
  /// broken and tells the peers (unless a usage error did already), calls `on_failure` (the
  /// record's end, the hooks) and prints the flight recorder. A communicator
  /// broken before raises `errc::aborted` without running `f` (`on_failure` is told too).
  template <class F, class G = void (*)(const std::exception&)>
  void guarded(F&& f, G&& on_failure = [](const std::exception&) {}) {
    if (!broken_.empty()) [[unlikely]] {
      const error e(errc::aborted, "communicator unusable after an earlier failure: " + broken_);
      on_failure(e);
      throw e;
    }
    try {
      if (aborted())
        throw error(errc::aborted, "rank " + std::to_string(rank()) +
                                       ": the communicator was aborted (communicator::abort)");
      f();
    } catch (const std::exception& e) {
      fail_with(e, on_failure);
      throw;
#if defined(__GLIBCXX__)
    } catch (abi::__forced_unwind&) {  // a cancelled thread unwinds: nothing to say, nothing to stop
      throw;
#endif
    } catch (...) {  // `throw 42` in a user op: the call fails as for any other exception
      fail_with_foreign(on_failure);
      throw;
    }
  }
  /// `guarded`'s failure by an exception not derived from std::exception (the program's own,
  /// from a user op or an element type's copy): the same, with a text that says so; the caller
  /// gets its own exception back.
  template <class G>
  TUTTI_COLD void fail_with_foreign(G& on_failure) {
    const std::runtime_error e("rank " + std::to_string(rank()) +
                               ": an exception not derived from std::exception left the call (thrown by the "
                               "program's own code, such as a user op)");
    fail_with(e, on_failure);
  }
  /// `guarded`'s failure: the table goes to the launcher (TUTTI_FLIGHT_MAP) before the peers learn
  /// (a launcher may end this process as soon as one of them fails: mpirun does; its record of
  /// this call still says running, which the report counts as in the call), then the peers are
  /// told, then `on_failure` (the record's end, the hooks), then the flight recorder printed.
  template <class G>
  void fail_with(const std::exception& e, G& on_failure) {
    recorder_.save();
    if (broken_.empty()) break_with(e);
    on_failure(e);
    recorder_.print("failed");
  }

  /// What a one-rank communicator's call raises where a larger group's would: unusable after
  /// an earlier failure, or aborted. (Not a template: one copy, whatever the call.)
  TUTTI_COLD void refuse_alone() {
    guarded([] {});
  }

  /// Marks the communicator unusable after `e` and tells the peers: its kind, and where it
  /// began (toolkit::failure_notice), so that each raises the same kind naming the same rank.
  TUTTI_COLD void break_with(const std::exception& e) {
    broken_ = e.what();
    if constexpr (failure_notices<Transport>) t_.fail(toolkit::failure_notice(e));
    else if constexpr (last_words<Transport>) t_.note(broken_);
  }

  /// Raises `usage_error` with `text` from a call that takes part with the peers (a collective,
  /// point to point, a group): the peers may already be in it, and would pair their next call
  /// with this rank's, so the communicator breaks (as MPI's does) and the peers raise this
  /// usage error too, naming this rank.
  [[noreturn]] void usage(const std::string& text) {
    usage_error e(text);
    if (broken_.empty()) break_with(e);
    throw e;
  }
  /// Raises `usage_error` from a call no peer takes part in (a setting): nothing breaks.
  [[noreturn]] static void local_usage(const std::string& text) { throw usage_error(text); }

  /// A disagreement this rank sees alone (a view whose size is not its count): the call fails
  /// as if a peer had found it, telling the peers.
  [[noreturn]] void local_mismatch(const fingerprint& fp, const std::string& text) {
    channel<Transport> ch = channel_for(fp, "checks");
    recorded(ch, {detail::kind_of(fp.coll)}, [&] { throw mismatch_error(text); });
    throw mismatch_error(text);  // not reached: recorded rethrows
  }

  // ---- fingerprints and checks (group/call_path.hpp) --------------------------------------------

  fingerprint next_fp(collective c, dtype d, std::size_t count, int root, std::uint32_t op) {
    fingerprint fp;
    fp.context = context_;
    fp.seq = seq_++;
    fp.coll = c;
    fp.dtype = d.id;
    fp.elem_size = static_cast<std::uint8_t>(d.size > 255 ? 255 : d.size);
    fp.count = count;
    fp.root = root;
    fp.op = op;
    return fp;
  }
  fingerprint p2p_fp(dtype d, std::size_t count, int tag) const {
    fingerprint fp;
    fp.context = context_;
    fp.coll = collective::send_recv;
    fp.dtype = d.id;
    fp.elem_size = static_cast<std::uint8_t>(d.size > 255 ? 255 : d.size);
    fp.count = count;
    fp.root = tag;
    return fp;
  }

  block_counts blocks(std::span<const std::size_t> counts, const char* name, collective c,
                      std::vector<std::size_t>& offsets);
  std::string other_ranks() const;
  TUTTI_COLD std::string what(collective c) const {
    return std::string(collective_name(c)) + " on rank " + std::to_string(rank());
  }
  void check_root(int root, collective c);
  /// A point-to-point call's peer and tag (`receive`: `any_source` and `any_tag` allowed where
  /// the transport matches point-to-point itself).
  void check_peer(int peer, int tag, const char* call, bool receive);
  void check_size(std::size_t got, std::size_t want, const char* name, const char* rule, collective c);
  void check_room(std::size_t got, std::size_t want, const char* name, const char* rule, collective c);
  template <class A, class B>
  void check_disjoint(view<A, memory> a, view<B, memory> b, collective c, bool allow_same);
  template <class A, class B>
  void check_disjoint_or_own_block(view<A, memory> in, view<B, memory> out, std::size_t own, collective c);
  [[noreturn]] TUTTI_COLD void own_count_mismatch(const fingerprint& fp, const char* buf, std::size_t has,
                                                  std::size_t count, const std::string& tail);

  /// avg reduces as a sum; the division happens once, on the result.
  template <class Op>
  static auto kernel_op(const Op& op) {
    if constexpr (std::is_same_v<Op, op::avg>) return op::sum{};
    else if constexpr (std::is_same_v<Op, op::ordered<op::avg>>) return op::ordered<op::sum>{};
    else return op;
  }
  template <class T, class Op>
  void finish(view<T, memory> result, const Op&) {
    if constexpr (std::is_same_v<detail::inner_op_t<Op>, op::avg>)
      detail::divide_elements(t_, result.data(), result.size(), size());
  }
  template <class T>
  void copy(view<const T, memory> from, view<T, memory> to) {
    detail::copy_bytes(t_, to.data(), from.data(), from.size_bytes());
  }

  // ---- agreement and groups -----------------------------------------------------------------

  /// Every rank's words (the same number on every rank), concatenated in rank order: the
  /// all_gather behind group agreement.
  std::vector<std::uint64_t> exchange(view<const std::uint64_t> mine) {
    std::vector<std::uint64_t> all(mine.size() * size_t_size());
    auto fp = next_fp(collective::group, dtype_of<std::uint64_t>(), mine.size(), -1, 0);
    if (size() == 1) {
      std::copy(mine.begin(), mine.end(), all.begin());
      return all;
    }
    if constexpr (std::is_same_v<memory, host_memory>) {
      execute<collective::all_gather>(algo::direct{}, fp,
                                      algo::call_args<std::uint64_t, memory, algo::no_op>{mine, view<std::uint64_t>(all)});
    } else {
      all = host_words(fp, mine);
    }
    return all;
  }
  /// Every rank's words through the transport's host-side exchange (a transport of device
  /// memory), in the flight recorder and guarded like a collective. (A template, so that an
  /// explicit instantiation of a host transport's communicator does not meet the assertion.)
  template <class T = Transport>
  std::vector<std::uint64_t> host_words(const fingerprint& fp, view<const std::uint64_t> mine) {
    static_assert(host_exchange<T>,
                  "tutti: agreement on a transport whose memory is not the host's needs its host_exchange");
    std::vector<std::uint64_t> all(mine.size() * size_t_size());
    channel<Transport> ch = channel_for(fp, "host exchange");
    recorded(ch, {detail::kind_of(fp.coll), mine.size_bytes()}, [&] {
      t_.exchange(fp, reinterpret_cast<const std::byte*>(mine.data()), reinterpret_cast<std::byte*>(all.data()),
                  mine.size_bytes(), ch.wait());
    });
    return all;
  }
  std::vector<std::uint64_t> exchange(std::uint64_t mine) { return exchange(view<const std::uint64_t>(&mine, 1)); }

  std::optional<communicator> child(const std::vector<int>& ranks, std::uint64_t context) {
    return child(ranks, context, algo_);
  }
  template <tutti::algorithm A>
  std::optional<communicator<Transport, A>> child(const std::vector<int>& ranks, std::uint64_t context, A a) {
    return child_of(t_.sub(std::span<const int>(ranks), context), context, std::move(a));
  }
  template <tutti::algorithm A>
  std::optional<communicator<Transport, A>> child_of(Transport t, std::uint64_t context, A a) {
    communicator<Transport, A> c(std::move(t), std::move(a), cfg_);
    c.context_ = context;
    c.aborted_ = aborted_;  // the family shares the links, so it shares the abort
    c.recorder_ = detail::flight_recorder(c.rank(), c.size(), context);
    pass_observers(c);
    return c;
  }

  std::size_t size_t_size() const { return static_cast<std::size_t>(size()); }

  /// A communicator made from this one (a group, a shrunk or grown world) starts with its hooks,
  /// and traces under the same job rank (a shrink renumbers the ranks; the trace's lanes do not).
  template <class C>
  void pass_observers(C& c) const {
    if (!observers_) return;
    c.observers_ = std::make_unique<detail::observers>(*observers_);
    c.observers_->context = c.context_;
    c.observers_->waits_at_start.clear();
  }

  /// The open batch, if any. First: a move (or the destructor) ends the batch open on the
  /// communicator it leaves, posting what it holds while that communicator is whole, and the
  /// engine's move then waits for it.
  struct batch_slot {
    batch* open = nullptr;
    batch_slot() = default;
    batch_slot(batch_slot&& o) noexcept { o.end(); }
    batch_slot& operator=(batch_slot&& o) noexcept {
      end();
      o.end();
      return *this;
    }
    void end() noexcept {
      if (open) open->post();  // clears `open`
    }
  } open_batch_;
  detail::engine_slot engine_;  // a move waits for its operations before the rest moves
  Transport t_;
  Algorithm algo_;
  config cfg_;
  /// automatic's plans, shared with copies (they depend only on the config and the group size).
  std::shared_ptr<const typename std::conditional_t<detail::is_automatic<Algorithm>::value, Algorithm,
                                                    algo::automatic>::plan>
      plan_;
  mutable std::shared_ptr<const algo::automatic::plan> default_plan_;
  /// `choice`'s last answer for the communicator's own automatic (no call has `bytes` ~0).
  struct {
    collective coll = collective::barrier;
    std::size_t bytes = ~std::size_t{0};
    std::size_t index = 0;
  } last_choice_;
  /// `f(whole)` on `parts` packed side by side in a buffer kept between runs (no page faults,
  /// nothing zeroed), then the parts unpacked from it: a fused all_reduce that no schedule runs
  /// where the parts lie.
  template <class E, class F>
  void packed_run(std::span<const view<E, memory>> parts, std::size_t total, F&& f) {
    E* packed = reinterpret_cast<E*>(fused_scratch_.reserve(total * sizeof(E)));
    std::size_t at = 0;
    for (const auto& v : parts) {
      detail::copy_bytes(t_, packed + at, v.data(), v.size_bytes());
      at += v.size();
    }
    f(view<E, memory>(packed, total));
    at = 0;
    for (const auto& v : parts) {
      detail::copy_bytes(t_, v.data(), packed + at, v.size_bytes());
      at += v.size();
    }
  }

  detail::scratch_pool scratch_;
  detail::scratch_buffer fused_scratch_;  // a fused run's packed buffer (engine thread only)
  detail::scratch_buffer ordered_scratch_;  // run_ordered's rows of raw values
  detail::flight_recorder recorder_;
  detail::op_counters counters_;
  /// The hooks and the trace; null while neither watches (the one test each call makes).
  std::unique_ptr<detail::observers> observers_;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::size_t> offsets_a_, offsets_b_;  // the v-collectives' offsets, reused
  std::uint64_t seq_ = 0;
  std::uint64_t context_ = 0;
  std::string broken_;
  bool fusing_ = false;  // a batch is open (fuse): posts are held in held_
  std::size_t fusion_bytes_ = 0;
  std::vector<held_op> held_;
  /// The thread in a call, its call, how deep, and a call another thread tried (see `in_use`).
  /// A moved communicator is in no call.
  struct use_state {
    std::atomic<std::thread::id> owner{};
    std::atomic<const char*> call{nullptr}, intruder{nullptr};
    int depth = 0;
    use_state() = default;
    use_state(use_state&&) noexcept {}
    use_state& operator=(use_state&&) noexcept { return *this; }
  } use_;
};

}  // namespace tutti

#include "tutti/group/call_path.hpp"
#include "tutti/group/ordered_path.hpp"
