/// \file
/// `tutti::communicator<Transport, Algorithm>`: a group of ranks, the transport that links them
/// and the algorithm that schedules their collectives. Every collective is a blocking call that
/// every rank of the group makes, in the same order, with agreeing arguments; disagreement raises
/// `mismatch_error` and a silent peer raises `timeout_error` or `peer_lost`.
///
/// Buffers are `tutti::view`s, or anything `tutti::viewable`: a contiguous range (`std::vector`,
/// `std::array`, `std::span`, a C array) or a single trivially copyable value:
/// `comm.all_reduce(grads)`, `comm.all_gather(my_count, counts)`.
///
/// Every collective and point-to-point call has a non-blocking `i` twin (`iall_reduce`,
/// `ibroadcast`, ..., `isend`, `irecv`) with the same arguments, returning a `tutti::request`
/// (group/request.hpp): the operation runs on the communicator's progress engine, in the order
/// posted, while the caller goes on. A blocking call waits for the operations posted before it.
///
/// A communicator is used by one thread at a time (different communicators, the world and its
/// groups, may be used from different threads at once). After a failure other than `usage_error` it is
/// unusable (its peers may be anywhere in the schedule); later calls raise `tutti::error` with
/// `errc::aborted` and the original message. A `usage_error` (arguments that can never work, found
/// before any traffic) leaves it usable; its text is left with the peers as this rank's last
/// words (where the transport has `last_words`), which they quote if this rank then goes away.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/detail/attributes.hpp"
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
#include "tutti/group/request.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/memory_ops.hpp"

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
template <class A>
struct is_automatic : std::false_type {};
template <class... C>
struct is_automatic<algo::automatic_of<C...>> : std::true_type {};

/// A communicator's progress engine (group/request.hpp), made on its first non-blocking call.
/// Moving the communicator first waits for what its engine runs: the operations refer to it.
class engine_slot {
 public:
  engine_slot() = default;
  engine_slot(engine_slot&& o) noexcept {
    o.drain();
    e_ = std::move(o.e_);
  }
  engine_slot& operator=(engine_slot&& o) noexcept {
    if (this != &o) {
      drain();
      o.drain();
      e_ = std::move(o.e_);
    }
    return *this;
  }
  void drain() noexcept {
    if (e_) e_->drain();
  }
  /// Operations are posted and the caller is not the engine (which runs them in order).
  bool busy() const noexcept { return e_ && !e_->idle() && !e_->on_engine(); }
  std::size_t pending() const noexcept { return e_ ? e_->pending() : 0; }
  /// The engine, made on first use; `waiting` (may be null) counts what it has not started.
  progress_engine& get(std::atomic<std::uint64_t>* waiting) {
    if (!e_) e_ = std::make_unique<progress_engine>(waiting);
    return *e_;
  }

 private:
  std::unique_ptr<progress_engine> e_;
};

/// A buffer a non-blocking call may keep: a view, or an lvalue (not a temporary container).
template <class B>
inline constexpr bool lasting = std::is_lvalue_reference_v<B> || is_view<std::remove_cvref_t<B>>::value;

/// The element type of a buffer argument.
template <class X>
using element_of = std::remove_const_t<typename view_of<X>::element_type>;

/// A collective's trailing argument that is a stream of its `stream_ordered` transport (given in
/// the algorithm's place: `comm.all_reduce(v, op, stream)`), not an algorithm.
template <class Transport, class Arg>
concept stream_arg = stream_ordered<Transport> && std::same_as<Arg, typename Transport::stream_type>;
}  // namespace detail

template <transport Transport, algorithm Algorithm = algo::automatic>
class communicator {
 public:
  using transport_type = Transport;
  using algorithm_type = Algorithm;
  /// Where this communicator's views live (`transport_traits<Transport>::memory`).
  using memory = typename transport_traits<Transport>::memory;

  /// Wraps a connected transport. Reads `TUTTI_TIMEOUT`, `TUTTI_ALGO` and `TUTTI_DEBUG`
  /// (`config_error` when malformed) unless a config is given.
  explicit communicator(Transport t, Algorithm a = {}) : communicator(std::move(t), std::move(a), config::from_env()) {}
  communicator(Transport t, Algorithm a, config cfg)
      : t_(std::move(t)), algo_(std::move(a)), cfg_(std::move(cfg)), recorder_(t_.rank(), t_.size(), 0) {
    make_plans();
  }

  /// Joins the job the environment describes (`Transport::from_env()`, e.g. `tutti::shm`).
  static communicator from_env()
    requires from_environment<Transport>
  {
    return communicator(Transport::from_env());
  }

  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;
  /// Waits for the operations still posted (their views must outlive them anyway).
  ~communicator() { engine_.drain(); }

  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }
  Transport& transport() noexcept { return t_; }
  const Algorithm& algorithm() const noexcept { return algo_; }

  /// Deadline for every blocking wait from now on (default `TUTTI_TIMEOUT`, else 300 s).
  template <class Rep, class Period>
  void set_timeout(std::chrono::duration<Rep, Period> d) {
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d);
    if (ms.count() <= 0) usage("set_timeout: the timeout must be positive");
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
  communicator shrink(std::vector<int>* kept = nullptr)
    requires shrinkable<Transport>
  {
    ordered();
    if (context_ != 0) usage("shrink: call it on the world communicator, not on a group");
    return communicator(t_.shrink(cfg_.timeout, kept), algo_, cfg_);
  }

  /// A larger communicator: this one's ranks, keeping their numbers, and `joiners` processes
  /// that join the job (started with `TUTTI_JOIN=1` and the job's store address and token; their
  /// `from_env()` returns the same larger communicator), numbered after them in the order they
  /// came. Every rank of the world calls it with the same `joiners` (checked first: a rank that
  /// passes another count gets `mismatch_error` on every rank); rank 0 waits up to the timeout
  /// for the joiners. This communicator stays usable. With this one's algorithm and settings.
  communicator grow(int joiners)
    requires growable<Transport>
  {
    ordered();
    if (context_ != 0) usage("grow: call it on the world communicator, not on a group");
    if (joiners < 1) usage("grow: joiners must be at least 1, not " + std::to_string(joiners));
    std::vector<int> counts(static_cast<std::size_t>(size()));
    const int mine[1] = {joiners};
    all_gather(view<const int>(mine, 1), view(counts));
    for (int r = 0; r < size(); ++r)
      if (counts[static_cast<std::size_t>(r)] != counts[0])
        throw mismatch_error("grow: rank 0 grows by " + std::to_string(counts[0]) + " joiner(s), rank " + std::to_string(r) +
                             " by " + std::to_string(counts[static_cast<std::size_t>(r)]));
    return communicator(t_.grow(joiners, cfg_.timeout), algo_, cfg_);
  }

  /// This rank's flight recorder: its last operations on this communicator with their
  /// fingerprints, start times and outcomes, as printed on failure and on SIGUSR1.
  std::string flight_record(std::size_t max = detail::flight_capacity) const { return recorder_.text(max); }

  // ---- collectives ------------------------------------------------------------------------
  // `Algo` is a per-call algorithm (`comm.all_reduce(v, op, tutti::algo::tree{})` or
  // `comm.all_reduce<tutti::algo::tree>(v, op)`); by default the communicator's own. Buffers
  // are views or anything `viewable` (see the file comment).

  /// Copies root's `buf` into every rank's `buf`. Every rank passes the same count and root.
  template <class Algo = algo::inherit, viewable B>
  auto broadcast(B&& buf, int root, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      const auto v = writable(buf, collective::broadcast, "buf");
      using T = detail::element_of<B>;
      static_assert(supports<A, collective::broadcast>,
                    "tutti: this algorithm has no broadcast schedule (see the table in README.md); "
                    "use tutti::algo::tree, ring, direct or automatic");
      check_root(root, collective::broadcast);
      auto fp = next_fp(collective::broadcast, dtype_of<T>(), v.size(), root, 0);
      if (size() == 1) return;
      run<collective::broadcast>(a, fp, v.size_bytes(), [&](const auto& alg, auto& ch) { alg.broadcast(ch, v, root); });
    });
  }

  /// Reduces every rank's `buf` with `op` into root's `buf`; the other ranks' buffers are left
  /// unchanged.
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, detail::element_of<B>>
  auto reduce(B&& buf, int root, const Op& op = {}, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      const auto v = writable(buf, collective::reduce, "buf");
      using T = detail::element_of<B>;
      static_assert(supports<A, collective::reduce>,
                    "tutti: this algorithm has no reduce schedule (see the table in README.md); "
                    "use tutti::algo::tree, ring, direct or automatic");
      check_root(root, collective::reduce);
      auto fp = next_fp(collective::reduce, dtype_of<T>(), v.size(), root, op_traits<Op>::id());
      if (size() > 1)
        run<collective::reduce>(a, fp, v.size_bytes(), [&](const auto& alg, auto& ch) { alg.reduce(ch, v, root, kernel_op(op)); });
      if (rank() == root) finish(v, op);
    });
  }

  /// Reduces every rank's `buf` with `op`; every rank gets the result in `buf`.
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, detail::element_of<B>>
  auto all_reduce(B&& buf, const Op& op = {}, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      const auto v = writable(buf, collective::all_reduce, "buf");
      using T = detail::element_of<B>;
      static_assert(supports<A, collective::all_reduce>,
                    "tutti: this algorithm has no all_reduce schedule (see the table in README.md)");
      auto fp = next_fp(collective::all_reduce, dtype_of<T>(), v.size(), -1, op_traits<Op>::id());
      if (size() > 1)
        run<collective::all_reduce>(a, fp, v.size_bytes(), [&](const auto& alg, auto& ch) { alg.all_reduce(ch, v, kernel_op(op)); });
      finish(v, op);
    });
  }

  /// Out of place: `out` (same size as `in`) gets the reduction of every rank's `in`.
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>> && reduce_op<Op, detail::element_of<Out>>
  auto all_reduce(In&& in_buf, Out&& out_buf, const Op& op = {}, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, collective::all_reduce, "out");
      using T = detail::element_of<Out>;
      if (in.size() != out.size())
        usage(what(collective::all_reduce) + ": in has " + std::to_string(in.size()) + " elements but out has " +
              std::to_string(out.size()));
      check_disjoint(in, out, collective::all_reduce, /*allow_same=*/true);
      static_assert(supports<A, collective::all_reduce>,
                    "tutti: this algorithm has no all_reduce schedule (see the table in README.md)");
      auto fp = next_fp(collective::all_reduce, dtype_of<T>(), in.size(), -1, op_traits<Op>::id());
      // An algorithm with an out-of-place schedule reads `in` itself; the others work in place on
      // `out`, after one copy.
      auto body = [&](const auto& alg, auto& ch) {
        if constexpr (all_reduce_out_of_place<std::remove_cvref_t<decltype(alg)>, std::remove_cvref_t<decltype(ch)>, T,
                                              decltype(kernel_op(op))>) {
          alg.all_reduce(ch, in, out, kernel_op(op));
        } else {
          ch.copy(in, out);
          alg.all_reduce(ch, out, kernel_op(op));
        }
      };
      if (size() == 1) copy(in, out);
      else run<collective::all_reduce>(a, fp, in.size_bytes(), body);
      finish(out, op);
    });
  }

  /// Root's `out` (size() · in.size() elements, rank i's block at i · in.size()) gets every
  /// rank's `in`; `out` is ignored (may be empty) elsewhere.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  auto gather(In&& in_buf, Out&& out_buf, int root, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, collective::gather, "out");
      using T = detail::element_of<Out>;
      static_assert(supports<A, collective::gather>,
                    "tutti: this algorithm has no gather schedule (see the table in README.md); "
                    "use tutti::algo::tree, direct or automatic");
      check_root(root, collective::gather);
      if (rank() == root) {
        check_size(out.size(), in.size() * size_t_size(), "out", "size() * in.size()", collective::gather);
        check_disjoint_or_own_block(in, out, in.size() * static_cast<std::size_t>(rank()), collective::gather);
      }
      auto fp = next_fp(collective::gather, dtype_of<T>(), in.size(), root, 0);
      if (size() == 1) return copy(in, out.subview(0, in.size()));
      run<collective::gather>(a, fp, in.size_bytes(), [&](const auto& alg, auto& ch) { alg.gather(ch, in, out, root); });
    });
  }

  /// Every rank's `out` (size() · in.size() elements) gets every rank's `in`, in rank order.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  auto all_gather(In&& in_buf, Out&& out_buf, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, collective::all_gather, "out");
      using T = detail::element_of<Out>;
      static_assert(supports<A, collective::all_gather>,
                    "tutti: this algorithm has no all_gather schedule (see the table in README.md)");
      check_size(out.size(), in.size() * size_t_size(), "out", "size() * in.size()", collective::all_gather);
      check_disjoint_or_own_block(in, out, in.size() * static_cast<std::size_t>(rank()), collective::all_gather);
      auto fp = next_fp(collective::all_gather, dtype_of<T>(), in.size(), -1, 0);
      if (size() == 1) return copy(in, out);
      run<collective::all_gather>(a, fp, in.size_bytes(), [&](const auto& alg, auto& ch) { alg.all_gather(ch, in, out); });
    });
  }

  /// Rank i's `out` gets block i of root's `in` (size() · out.size() elements); `in` is ignored
  /// (may be empty) elsewhere.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  auto scatter(In&& in_buf, Out&& out_buf, int root, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, collective::scatter, "out");
      using T = detail::element_of<Out>;
      static_assert(supports<A, collective::scatter>,
                    "tutti: this algorithm has no scatter schedule (see the table in README.md); "
                    "use tutti::algo::tree, direct or automatic");
      check_root(root, collective::scatter);
      if (rank() == root) {
        check_size(in.size(), out.size() * size_t_size(), "in", "size() * out.size()", collective::scatter);
        check_disjoint_or_own_block(view<const T, memory>(out), view<const T, memory>(in),
                                    out.size() * static_cast<std::size_t>(rank()), collective::scatter);
      }
      auto fp = next_fp(collective::scatter, dtype_of<T>(), out.size(), root, 0);
      if (size() == 1) return copy(in.subview(0, out.size()), out);
      run<collective::scatter>(a, fp, out.size_bytes(), [&](const auto& alg, auto& ch) { alg.scatter(ch, in, out, root); });
    });
  }

  /// Rank j's block i of `out` gets rank i's block j of `in`; `in` and `out` have the same size,
  /// a multiple of size(), and must not overlap.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  auto all_to_all(In&& in_buf, Out&& out_buf, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, collective::all_to_all, "out");
      using T = detail::element_of<Out>;
      static_assert(supports<A, collective::all_to_all>,
                    "tutti: this algorithm has no all_to_all schedule (see the table in README.md); "
                    "use tutti::algo::direct or automatic");
      check_size(out.size(), in.size(), "out", "in.size()", collective::all_to_all);
      if (in.size() % size_t_size() != 0)
        usage(what(collective::all_to_all) + ": in has " + std::to_string(in.size()) +
              " elements, not a multiple of the group size " + std::to_string(size()));
      check_disjoint(in, out, collective::all_to_all, /*allow_same=*/false);
      auto fp = next_fp(collective::all_to_all, dtype_of<T>(), in.size(), -1, 0);
      if (size() == 1) return copy(in, out);
      run<collective::all_to_all>(a, fp, in.size_bytes() / size_t_size(), [&](const auto& alg, auto& ch) { alg.all_to_all(ch, in, out); });
    });
  }

  /// Rank i's `out` gets block i of the reduction of every rank's `in` (size() · out.size()
  /// elements); `in` and `out` must not overlap.
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>> && reduce_op<Op, detail::element_of<Out>>
  auto reduce_scatter(In&& in_buf, Out&& out_buf, const Op& op = {}, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, collective::reduce_scatter, "out");
      using T = detail::element_of<Out>;
      static_assert(supports<A, collective::reduce_scatter>,
                    "tutti: this algorithm has no reduce_scatter schedule (see the table in README.md)");
      check_size(in.size(), out.size() * size_t_size(), "in", "size() * out.size()", collective::reduce_scatter);
      check_disjoint(in, out, collective::reduce_scatter, /*allow_same=*/false);
      auto fp = next_fp(collective::reduce_scatter, dtype_of<T>(), out.size(), -1, op_traits<Op>::id());
      if (size() == 1) copy(in, out);
      else run<collective::reduce_scatter>(a, fp, in.size_bytes(), [&](const auto& alg, auto& ch) { alg.reduce_scatter(ch, in, out, kernel_op(op)); });
      finish(out, op);
    });
  }

  /// Returns once every rank of the group has entered the barrier.
  template <class Algo = algo::inherit>
  auto barrier(const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      static_assert(supports<A, collective::barrier>, "tutti: this algorithm has no barrier schedule");
      auto fp = next_fp(collective::barrier, dtype_of<char>(), 0, -1, 0);
      if (size() == 1) return;
      run<collective::barrier>(a, fp, 0, [&](const auto& alg, auto& ch) { alg.barrier(ch); });
    });
  }

  // ---- v-collectives: a count per rank -----------------------------------------------------
  // Counts are elements, one per rank of the group, 64-bit; blocks lie in rank order at the
  // prefix sums of the counts (`tutti::displacements`); zero counts are valid. Disagreement is a
  // `mismatch_error` naming both ranks and both values (counts that differ where every rank
  // passes them; a view whose size is not this rank's count; all_to_all_v's send_counts[j] of
  // rank i against rank j's recv_counts[i]); what a rank can see alone is a `usage_error`.

  /// Rank i contributes `counts[i]` elements (`in`, exactly that many); every rank's `out` (at
  /// least the sum of the counts) gets every block in rank order. Every rank passes the same
  /// counts. `in` may be this rank's own block of `out` (in place).
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  auto all_gather_v(In&& in_buf, Out&& out_buf, std::span<const std::size_t> counts, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      constexpr auto C = collective::all_gather_v;
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, C, "out");
      using T = detail::element_of<Out>;
      static_assert(supports<A, C>, "tutti: this algorithm has no all_gather_v schedule (see the table in README.md); "
                                       "use tutti::algo::ring, direct or automatic");
      const block_counts b = blocks(counts, "counts", C, offsets_a_);
      check_room(out.size(), b.total, "out", "the sum of the counts", C);
      check_disjoint_or_own_block(in, out, b.offset(rank()), C);
      auto fp = next_fp(C, dtype_of<T>(), b.total, -1, 0);
      fp.shape = counts_digest(counts);
      if (in.size() != b.count(rank()))
        own_count_mismatch(fp, "in", in.size(), b.count(rank()),
                           ", the count " + other_ranks() + " expect from rank " + std::to_string(rank()));
      if (size() == 1) return copy(in, out);
      run<C>(a, fp, b.largest * sizeof(T), [&](const auto& alg, auto& ch) { alg.all_gather_v(ch, in, out, b); });
    });
  }

  /// Root's `out` (at least the sum of the counts) gets rank i's `in` (`counts[i]` elements) as
  /// block i. The counts matter at the root; the others may pass an empty span (or the root's
  /// counts). `in` may be the root's own block of `out`.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  auto gather_v(In&& in_buf, Out&& out_buf, std::span<const std::size_t> counts, int root, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      constexpr auto C = collective::gather_v;
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, C, "out");
      using T = detail::element_of<Out>;
      static_assert(supports<A, C>, "tutti: this algorithm has no gather_v schedule (see the table in README.md); "
                                       "use tutti::algo::direct or automatic");
      check_root(root, C);
      const bool at_root = rank() == root;
      const block_counts b = at_root || !counts.empty() ? blocks(counts, "counts", C, offsets_a_) : block_counts{};
      if (at_root) {
        check_room(out.size(), b.total, "out", "the sum of the counts", C);
        check_disjoint_or_own_block(in, out, b.offset(rank()), C);
      }
      auto fp = next_fp(C, dtype_of<T>(), 0, root, 0);
      if (b.size() && in.size() != b.count(rank()))
        own_count_mismatch(fp, "in", in.size(), b.count(rank()), at_root ? "" : not_root_counts(root, "expects"));
      if (size() == 1) return copy(in, out.subview(0, in.size()));
      run<C>(a, fp, 0, [&](const auto& alg, auto& ch) { alg.gather_v(ch, in, out, b, root); });
    });
  }

  /// Rank i's `out` (`counts[i]` elements) gets block i of root's `in` (at least the sum of the
  /// counts). The counts matter at the root; the others may pass an empty span. `out` may be
  /// the root's own block of `in`.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  auto scatter_v(In&& in_buf, std::span<const std::size_t> counts, Out&& out_buf, int root, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      constexpr auto C = collective::scatter_v;
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, C, "out");
      using T = detail::element_of<Out>;
      static_assert(supports<A, C>, "tutti: this algorithm has no scatter_v schedule (see the table in README.md); "
                                       "use tutti::algo::direct or automatic");
      check_root(root, C);
      const bool at_root = rank() == root;
      const block_counts b = at_root || !counts.empty() ? blocks(counts, "counts", C, offsets_a_) : block_counts{};
      if (at_root) {
        check_room(in.size(), b.total, "in", "the sum of the counts", C);
        check_disjoint_or_own_block(view<const T, memory>(out), view<const T, memory>(in), b.offset(rank()), C);
      }
      auto fp = next_fp(C, dtype_of<T>(), 0, root, 0);
      if (b.size() && out.size() != b.count(rank()))
        own_count_mismatch(fp, "out", out.size(), b.count(rank()), at_root ? "" : not_root_counts(root, "sends"));
      if (size() == 1) return copy(in.subview(0, out.size()), out);
      run<C>(a, fp, 0, [&](const auto& alg, auto& ch) { alg.scatter_v(ch, in, b, out, root); });
    });
  }

  /// Block j of `in` (`send_counts[j]` elements, at the prefix sum) goes to rank j; block i of
  /// `out` (`recv_counts[i]` elements) comes from rank i. Rank i's send_counts[j] must equal rank
  /// j's recv_counts[i]. `in` and `out` must not overlap.
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  auto all_to_all_v(In&& in_buf, std::span<const std::size_t> send_counts, Out&& out_buf,
                    std::span<const std::size_t> recv_counts, const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      constexpr auto C = collective::all_to_all_v;
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, C, "out");
      using T = detail::element_of<Out>;
      static_assert(supports<A, C>, "tutti: this algorithm has no all_to_all_v schedule (see the table in README.md); "
                                       "use tutti::algo::direct or automatic");
      const block_counts s = blocks(send_counts, "send_counts", C, offsets_a_);
      const block_counts r = blocks(recv_counts, "recv_counts", C, offsets_b_);
      check_room(in.size(), s.total, "in", "the sum of send_counts", C);
      check_room(out.size(), r.total, "out", "the sum of recv_counts", C);
      if (s.count(rank()) != r.count(rank()))
        usage(what(C) + ": send_counts[" + std::to_string(rank()) + "] = " + std::to_string(s.count(rank())) +
              " but recv_counts[" + std::to_string(rank()) + "] = " + std::to_string(r.count(rank())) +
              " (this rank's block to itself)");
      check_disjoint(in.subview(0, s.total), out.subview(0, r.total), C, /*allow_same=*/false);
      auto fp = next_fp(C, dtype_of<T>(), 0, -1, 0);
      if (size() == 1) return copy(in.subview(0, s.total), out);
      run<C>(a, fp, 0, [&](const auto& alg, auto& ch) { alg.all_to_all_v(ch, in, s, out, r); });
    });
  }

  /// `in` holds the sum of the counts; rank i's `out` (`counts[i]` elements) gets block i of the
  /// reduction of every rank's `in`. Every rank passes the same counts; `in` and `out` must not
  /// overlap.
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>> && reduce_op<Op, detail::element_of<Out>>
  auto reduce_scatter_v(In&& in_buf, Out&& out_buf, std::span<const std::size_t> counts, const Op& op = {},
                        const Algo& arg = {}) {
    return with_stream(arg, [&](const auto& a) {
      using A = std::remove_cvref_t<decltype(a)>;
      ordered();
      constexpr auto C = collective::reduce_scatter_v;
      const auto in = readable(in_buf);
      const auto out = writable(out_buf, C, "out");
      using T = detail::element_of<Out>;
      static_assert(supports<A, C>, "tutti: this algorithm has no reduce_scatter_v schedule (see the table in "
                                       "README.md); use tutti::algo::ring, direct or automatic");
      const block_counts b = blocks(counts, "counts", C, offsets_a_);
      if (in.size() != b.total)
        usage(what(C) + ": in has " + std::to_string(in.size()) + " elements, but the counts sum to " +
              std::to_string(b.total));
      check_disjoint(in, out, C, /*allow_same=*/false);
      auto fp = next_fp(C, dtype_of<T>(), b.total, -1, op_traits<Op>::id());
      fp.shape = counts_digest(counts);
      if (out.size() != b.count(rank()))
        own_count_mismatch(fp, "out", out.size(), b.count(rank()),
                           ", the block " + other_ranks() + " reduce for rank " + std::to_string(rank()));
      if (size() == 1) copy(in, out);
      else run<C>(a, fp, b.largest * sizeof(T), [&](const auto& alg, auto& ch) { alg.reduce_scatter_v(ch, in, out, b, kernel_op(op)); });
      finish(out, op);
    });
  }

  /// Every rank's `n` in rank order: the counts of a v-collective when each rank knows only its
  /// own (one all_gather of one 64-bit word per rank).
  std::vector<std::size_t> all_gather_counts(std::size_t n) {
    std::vector<std::uint64_t> all(size_t_size());
    const std::uint64_t mine = n;
    if constexpr (std::is_same_v<memory, host_memory>) {
      all_gather(view<const std::uint64_t>(&mine, 1), view<std::uint64_t>(all));
    } else {  // counts live on the host: the transport's host-side exchange
      ordered();
      auto fp = next_fp(collective::all_gather, dtype_of<std::uint64_t>(), 1, -1, 0);
      all = host_words(fp, view<const std::uint64_t>(&mine, 1));
    }
    return std::vector<std::size_t>(all.begin(), all.end());
  }

  // ---- point to point ---------------------------------------------------------------------

  /// Sends `data` to `peer`; returns once the transport has taken it. The matching `recv` names
  /// this rank, the same tag, dtype and count.
  /// On a `stream_ordered` transport a stream may follow the tag: the transfer is enqueued on it
  /// and a request returned.
  template <viewable B, class S = algo::inherit>
  auto send(B&& data_buf, int peer, int tag = 0, const S& stream = {}) {
    static_assert(std::is_same_v<S, algo::inherit> || detail::stream_arg<Transport, S>,
                  "tutti: send's fourth argument is a stream of the communicator's transport");
    return with_stream(stream, [&](const auto&) {
      ordered();
      const auto data = readable(data_buf);
      using U = detail::element_of<B>;
      check_peer(peer, tag, "send");
      channel<Transport> ch(t_, p2p_fp(dtype_of<U>(), data.size(), tag), "p2p", cfg_.timeout, scratch_, aborted_.get());
      recorded(ch, [&] { ch.send(peer, data); });
    });
  }

  /// Receives `data.size()` elements from `peer` with `tag` into `data` (a stream may follow, as
  /// for `send`).
  template <viewable B, class S = algo::inherit>
  auto recv(B&& data_buf, int peer, int tag = 0, const S& stream = {}) {
    static_assert(std::is_same_v<S, algo::inherit> || detail::stream_arg<Transport, S>,
                  "tutti: recv's fourth argument is a stream of the communicator's transport");
    return with_stream(stream, [&](const auto&) {
      ordered();
      const auto data = writable(data_buf, collective::send_recv, "data");
      using T = detail::element_of<B>;
      check_peer(peer, tag, "recv");
      channel<Transport> ch(t_, p2p_fp(dtype_of<T>(), data.size(), tag), "p2p", cfg_.timeout, scratch_, aborted_.get());
      recorded(ch, [&] { ch.recv(peer, data); });
    });
  }

  // ---- non-blocking twins ------------------------------------------------------------------
  // Each posts its blocking twin, with the same arguments, to this communicator's progress
  // engine and returns at once; see tutti::request. The buffers (and the counts of the
  // v-collectives) must stay valid, and the inputs unchanged, until the request completes. A
  // temporary container is refused at compile time.

  template <class Algo = algo::inherit, viewable B>
  request ibroadcast(B&& buf, int root, const Algo& a = {}) {
    static_assert(detail::lasting<B>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto v = writable(buf, collective::broadcast, "buf");
    return post([this, v, root, a] { broadcast(v, root, a); });
  }
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, detail::element_of<B>>
  request ireduce(B&& buf, int root, const Op& op = {}, const Algo& a = {}) {
    static_assert(detail::lasting<B>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto v = writable(buf, collective::reduce, "buf");
    return post([this, v, root, op, a] { reduce(v, root, op, a); });
  }
  template <class Algo = algo::inherit, viewable B, class Op = op::sum>
    requires reduce_op<Op, detail::element_of<B>>
  request iall_reduce(B&& buf, const Op& op = {}, const Algo& a = {}) {
    static_assert(detail::lasting<B>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto v = writable(buf, collective::all_reduce, "buf");
    using T = detail::element_of<B>;
    auto t = std::make_unique<reduce_task<T, Op, Algo>>(this, v, op, a);
    auto state = t->state;
    if (fusing_ && v.size_bytes() <= fusion_piece_bytes && fuses_exactly<T, Op>()) held_.push_back({std::move(t), &reduce_task<T, Op, Algo>::kind, v.size_bytes(), &reduce_task<T, Op, Algo>::fuse});
    else submit(std::move(t));
    return request(std::move(state));
  }
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>> && reduce_op<Op, detail::element_of<Out>>
  request iall_reduce(In&& in_buf, Out&& out_buf, const Op& op = {}, const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::all_reduce, "out");
    return post([this, in, out, op, a] { all_reduce(in, out, op, a); });
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  request igather(In&& in_buf, Out&& out_buf, int root, const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::gather, "out");
    return post([this, in, out, root, a] { gather(in, out, root, a); });
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  request iall_gather(In&& in_buf, Out&& out_buf, const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::all_gather, "out");
    return post([this, in, out, a] { all_gather(in, out, a); });
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  request iscatter(In&& in_buf, Out&& out_buf, int root, const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::scatter, "out");
    return post([this, in, out, root, a] { scatter(in, out, root, a); });
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  request iall_to_all(In&& in_buf, Out&& out_buf, const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::all_to_all, "out");
    return post([this, in, out, a] { all_to_all(in, out, a); });
  }
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>> && reduce_op<Op, detail::element_of<Out>>
  request ireduce_scatter(In&& in_buf, Out&& out_buf, const Op& op = {}, const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::reduce_scatter, "out");
    return post([this, in, out, op, a] { reduce_scatter(in, out, op, a); });
  }
  template <class Algo = algo::inherit>
  request ibarrier(const Algo& a = {}) {
    return post([this, a] { barrier(a); });
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  request iall_gather_v(In&& in_buf, Out&& out_buf, std::span<const std::size_t> counts, const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::all_gather_v, "out");
    return post([this, in, out, counts, a] { all_gather_v(in, out, counts, a); });
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  request igather_v(In&& in_buf, Out&& out_buf, std::span<const std::size_t> counts, int root, const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::gather_v, "out");
    return post([this, in, out, counts, root, a] { gather_v(in, out, counts, root, a); });
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  request iscatter_v(In&& in_buf, std::span<const std::size_t> counts, Out&& out_buf, int root, const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::scatter_v, "out");
    return post([this, in, counts, out, root, a] { scatter_v(in, counts, out, root, a); });
  }
  template <class Algo = algo::inherit, viewable In, viewable Out>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>>
  request iall_to_all_v(In&& in_buf, std::span<const std::size_t> send_counts, Out&& out_buf,
                        std::span<const std::size_t> recv_counts, const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::all_to_all_v, "out");
    return post([this, in, send_counts, out, recv_counts, a] { all_to_all_v(in, send_counts, out, recv_counts, a); });
  }
  template <class Algo = algo::inherit, viewable In, viewable Out, class Op = op::sum>
    requires std::same_as<detail::element_of<In>, detail::element_of<Out>> && reduce_op<Op, detail::element_of<Out>>
  request ireduce_scatter_v(In&& in_buf, Out&& out_buf, std::span<const std::size_t> counts, const Op& op = {},
                            const Algo& a = {}) {
    static_assert(detail::lasting<In> && detail::lasting<Out>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto in = readable(in_buf);
    auto out = writable(out_buf, collective::reduce_scatter_v, "out");
    return post([this, in, out, counts, op, a] { reduce_scatter_v(in, out, counts, op, a); });
  }

  /// `send`, posted. Outside a batch, point-to-point operations run like the others, one at a
  /// time in the order posted: a posted `recv` waits for its message before anything posted
  /// after it starts, so two ranks that both send first a message larger than the transport
  /// buffers wait on each other (the later one times out naming the peer). Posted inside a
  /// batch (`fuse()`, like ncclGroupStart/End), a run of sends and receives goes as one group
  /// that never deadlocks (see `p2p_group_task`): `auto b = comm.fuse(); auto s =
  /// comm.isend(x, right); auto r = comm.irecv(y, left); b.post();`.
  template <viewable B>
  request isend(B&& data_buf, int peer, int tag = 0) {
    static_assert(detail::lasting<B>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto data = readable(data_buf);
    using U = detail::element_of<B>;
    if (fusing_)
      return hold_p2p({true, peer, tag, p2p_fp(dtype_of<U>(), data.size(), tag),
                       const_cast<std::byte*>(reinterpret_cast<const std::byte*>(data.data())), data.size_bytes()});
    return post([this, data, peer, tag] { send(data, peer, tag); });
  }
  /// `recv`, posted (see `isend`).
  template <viewable B>
  request irecv(B&& data_buf, int peer, int tag = 0) {
    static_assert(detail::lasting<B>,
                  "tutti: a non-blocking call keeps its buffer until the request completes: pass an lvalue or a tutti::view, not a temporary");
    auto data = writable(data_buf, collective::send_recv, "data");
    using T = detail::element_of<B>;
    if (fusing_)
      return hold_p2p({false, peer, tag, p2p_fp(dtype_of<T>(), data.size(), tag),
                       reinterpret_cast<std::byte*>(data.data()), data.size_bytes()});
    return post([this, data, peer, tag] { recv(data, peer, tag); });
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
  /// destructor; a blocking call posts what it holds first.
  class batch {
   public:
    batch(batch&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
    batch& operator=(batch&&) = delete;
    ~batch() { post(); }
    /// Ends the batch: posts what it holds.
    void post() {
      if (communicator* c = std::exchange(c_, nullptr)) {
        c->fusing_ = false;
        c->release_held();
      }
    }

   private:
    friend class communicator;
    explicit batch(communicator* c) noexcept : c_(c) {}
    communicator* c_;
  };
  /// Opens a batch (see `batch`); one at a time per communicator.
  [[nodiscard]] batch fuse(std::size_t max_bytes = std::size_t{4} << 20) {
    if (fusing_) usage("fuse: a batch is already open on this communicator");
    if (max_bytes == 0) usage("fuse: max_bytes must be positive");
    fusing_ = true;
    fusion_bytes_ = max_bytes;
    return batch(this);
  }

  // ---- groups -----------------------------------------------------------------------------

  /// A communicator of the listed ranks (new rank i is `ranks[i]`), sharing this one's links.
  /// Every rank of this communicator calls it with the same list, as torch's `new_group`;
  /// non-members get an empty optional. Different lists on different ranks: `mismatch_error`.
  std::optional<communicator> new_group(std::vector<int> ranks) {
    ordered();
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
    ordered();
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
  /// the whole buffer (broadcast, reduce, all_reduce, reduce_scatter's input), one rank's block
  /// (gather, all_gather, scatter, all_to_all), the largest block (all_gather_v,
  /// reduce_scatter_v), 0 (barrier, and the v-collectives no rank knows every size of). Local:
  /// no communication.
  std::string explain(collective c, std::size_t bytes) const {
    if (static_cast<std::size_t>(c) >= scheduled_count)
      throw usage_error("explain: " + std::string(collective_name(c)) + " is not a collective an algorithm schedules");
    if constexpr (detail::is_automatic<Algorithm>::value) {
      if (size() == 1) return std::string(collective_name(c)) + " on 1 rank: nothing to communicate";
      std::string why;
      const std::size_t i = algo_.choose(*plan_, c, bytes, &why);
      return explain_text(c, bytes, Algorithm::names[i], why);
    } else {
      return std::string(collective_name(c)) + " of " + std::to_string(bytes) + " bytes on " + std::to_string(size()) +
             " ranks: " + std::string(Algorithm::name) + " (the communicator's algorithm; automatic would consult TUTTI_ALGO)";
    }
  }

  /// The context id of this communicator (0 for the world).
  std::uint64_t context() const noexcept { return context_; }

 private:
  template <tutti::transport, tutti::algorithm>
  friend class communicator;  // a split with another algorithm sets its group's context

  template <class Algo>
  using resolved = std::conditional_t<std::is_same_v<Algo, algo::inherit>, Algorithm, Algo>;

  template <class Algo, collective C>
  static constexpr bool supports = algorithm_for<resolved<Algo>, C, Transport>;

  template <class Algo>
  const resolved<Algo>& pick(const Algo& a) const {
    if constexpr (std::is_same_v<Algo, algo::inherit>) return algo_;
    else return a;
  }

  // ---- the progress engine --------------------------------------------------------------------

  /// A blocking call waits for the operations posted before it (it is ordered after them).
  void ordered() {
    if (!held_.empty()) release_held();
    if (engine_.busy()) engine_.drain();
  }

  using task_ptr = std::unique_ptr<detail::progress_engine::task>;
  /// An operation a batch holds: `kind` and `fuse` for an all_reduce that may fuse with its
  /// neighbours of the same kind (element type, op, algorithm).
  struct held_op {
    task_ptr t;
    const void* kind = nullptr;
    std::size_t bytes = 0;
    task_ptr (*fuse)(communicator*, std::vector<task_ptr>&&) = nullptr;
    bool p2p = false;  // a send or receive (p2p_task): runs of them go as one p2p_group_task
  };
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
    if (fusing_) held_.push_back({std::move(t)});
    else enqueue(std::move(t));
  }
  /// Posts `t` to the engine (made on the first post, counting in the flight recorder what
  /// waits to start).
  void enqueue(task_ptr t) { engine_.get(recorder_.waiting()).post(std::move(t)); }
  template <class F>
  request post(F f) {
    auto t = std::make_unique<detail::task_of<F>>(std::move(f));
    auto state = t->state;
    submit(std::move(t));
    return request(std::move(state));
  }

  /// Posts what a batch holds, in order: runs of fusable all_reduces of one kind as one task,
  /// runs of sends and receives as one group.
  void release_held() {
    auto held = std::move(held_);
    held_.clear();
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
      else if (held[i].p2p) enqueue(std::make_unique<p2p_group_task>(this, std::move(run)));
      else enqueue(held[i].fuse(this, std::move(run)));
      i = j;
    }
  }

  /// A send or receive, type-erased (its fingerprint says the dtype, count and tag).
  struct p2p_op {
    bool send;
    int peer, tag;
    fingerprint fp;
    std::byte* data;  // read only for a send
    std::size_t bytes;
  };
  /// A send or receive posted in a batch.
  struct p2p_task final : detail::progress_engine::task {
    p2p_task(communicator* c_, const p2p_op& o) : c(c_), op(o) {}
    void run() override { c->run_p2p(std::span<const p2p_op>(&op, 1)); }
    communicator* c;
    p2p_op op;
  };
  request hold_p2p(const p2p_op& o) {
    auto t = std::make_unique<p2p_task>(this, o);
    auto state = t->state;
    held_.push_back({std::move(t), nullptr, 0, nullptr, true});
    return request(std::move(state));
  }
  /// A run of sends and receives posted in a batch, as one; completes each member's request.
  struct p2p_group_task final : detail::progress_engine::task {
    p2p_group_task(communicator* c_, std::vector<task_ptr>&& m) : c(c_) {
      for (auto& t : m) {
        ops.push_back(static_cast<p2p_task&>(*t).op);
        members.push_back(t->state);
      }
    }
    void run() override { c->run_p2p(ops); }
    communicator* c;
    std::vector<p2p_op> ops;
  };

  /// Runs a group of sends and receives without deadlock, whatever their order and peers, as
  /// long as every rank's messages match: in steps k = 1 .. size-1, every rank sends what goes
  /// to rank + k while it receives what comes from rank - k, the i-th send and the i-th
  /// receive of the step as one full-duplex sendrecv. At step k, rank r's i-th send is the
  /// i-th receive of rank r + k in that same step (each pair's messages keep their order), so
  /// every rank's i-th operation needs only its neighbours' i-th: all complete, step by step.
  void run_p2p(std::span<const p2p_op> ops) {
    for (const p2p_op& o : ops) check_peer(o.peer, o.tag, o.send ? "isend" : "irecv");
    const int n = size(), r = rank();
    std::vector<const p2p_op*> out, in;
    for (int k = 1; k < n; ++k) {
      const int to = (r + k) % n, from = (r - k + n) % n;
      out.clear();
      in.clear();
      for (const p2p_op& o : ops) {
        if (o.send && o.peer == to) out.push_back(&o);
        if (!o.send && o.peer == from) in.push_back(&o);
      }
      for (std::size_t i = 0; i < std::max(out.size(), in.size()); ++i) {
        const p2p_op* s = i < out.size() ? out[i] : nullptr;
        const p2p_op* v = i < in.size() ? in[i] : nullptr;
        channel<Transport> ch(t_, (s ? s : v)->fp, "p2p", cfg_.timeout, scratch_, aborted_.get());
        recorded(ch, [&] {
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

  /// A posted in-place all_reduce, and how runs of them fuse.
  template <class T, class Op, class Algo>
  struct reduce_task final : detail::progress_engine::task {
    reduce_task(communicator* c_, view<T, memory> v_, Op op_, Algo a_) : c(c_), v(v_), op(std::move(op_)), a(std::move(a_)) {}
    void run() override { c->all_reduce(v, op, a); }
    static inline const char kind = 0;  // its address tells the kinds apart
    static task_ptr fuse(communicator* c, std::vector<task_ptr>&& members) {
      return std::make_unique<fused_task<T, Op, Algo>>(c, std::move(members));
    }
    communicator* c;
    view<T, memory> v;
    Op op;
    Algo a;
  };
  /// A run of all_reduces of one kind, as one (`fused_all_reduce`); the engine completes each
  /// member's request.
  template <class T, class Op, class Algo>
  struct fused_task final : detail::progress_engine::task {
    fused_task(communicator* c_, std::vector<task_ptr>&& m) : c(c_) {
      for (auto& t : m) {
        auto& r = static_cast<reduce_task<T, Op, Algo>&>(*t);
        parts.push_back(r.v);
        members.push_back(t->state);
      }
      auto& first = static_cast<reduce_task<T, Op, Algo>&>(*m.front());
      op = first.op;
      a = first.a;
    }
    void run() override { c->fused_all_reduce(std::span<const view<T, memory>>(parts), op, a); }
    communicator* c;
    std::vector<view<T, memory>> parts;
    Op op;
    Algo a;
  };

  /// In-place all_reduce of a fused run, as one call whose fingerprint carries the members'
  /// counts: where the algorithm reads and writes the parts where they lie
  /// (`algo::shared_memory::all_reduce_parts`), without a copy; else packed into a buffer kept
  /// between runs (no page faults, nothing zeroed), reduced as one, unpacked.
  template <class T, class Op, class Algo>
  void fused_all_reduce(std::span<const view<T, memory>> parts, const Op& op, const Algo& a) {
    std::vector<std::size_t> counts(parts.size());
    std::size_t total = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) total += counts[i] = parts[i].size();
    auto fp = next_fp(collective::all_reduce, dtype_of<T>(), total, -1, op_traits<Op>::id());
    fp.shape = counts_digest(counts);
    if (size() > 1)
      run<collective::all_reduce>(a, fp, total * sizeof(T), [&](const auto& alg, auto& ch) {
        if constexpr (requires { alg.all_reduce_parts(ch, parts, kernel_op(op)); }) {
          if (alg.all_reduce_parts(ch, parts, kernel_op(op))) return;
        }
        T* packed = reinterpret_cast<T*>(fused_scratch_.reserve(total * sizeof(T)));
        std::size_t at = 0;
        for (const auto& v : parts) {
          detail::copy_bytes(t_, packed + at, v.data(), v.size_bytes());
          at += v.size();
        }
        alg.all_reduce(ch, view<T, memory>(packed, total), kernel_op(op));
        at = 0;
        for (const auto& v : parts) {
          detail::copy_bytes(t_, v.data(), packed + at, v.size_bytes());
          at += v.size();
        }
      });
    for (const auto& v : parts) finish(v, op);
  }

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
  static auto writable(X&& x, collective, const char*) {
    auto v = as_view(std::forward<X>(x));
    using V = decltype(v);
    static_assert(!std::is_const_v<typename V::element_type>,
                  "tutti: this collective writes into the buffer: pass a non-const view, range or value");
    static_assert(std::is_same_v<typename V::memory, memory>,
                  "tutti: the view's memory kind is not this communicator's transport's (transport_traits::memory)");
    return v;
  }

  // ---- running a schedule ---------------------------------------------------------------------

  /// The plan of automatic_of type `A` (this communicator's own algorithm's, or the default's).
  template <class A>
  const typename A::plan& plan_for() const {
    if constexpr (std::is_same_v<A, Algorithm>) {
      return *plan_;
    } else if constexpr (std::is_same_v<A, algo::automatic>) {
      if (!default_plan_)  // a per-call automatic on a communicator of another automatic_of
        default_plan_ = std::make_shared<const algo::automatic::plan>(
            algo::automatic::make_plan<Transport>(cfg_.algo_override, size()));
      return *default_plan_;
    } else {
      thread_local std::optional<typename A::plan> other;  // another automatic_of, per call site type
      other = A::template make_plan<Transport>(cfg_.algo_override, size());
      return *other;
    }
  }

  /// Parses TUTTI_ALGO once (`config_error` at construction when malformed): against this
  /// communicator's automatic_of, or, for a fixed algorithm, against the default automatic that
  /// a per-call `algo::automatic{}` would use.
  void make_plans() {
    if constexpr (detail::is_automatic<Algorithm>::value)
      plan_ = std::make_shared<const typename Algorithm::plan>(Algorithm::template make_plan<Transport>(cfg_.algo_override, size()));
    else
      default_plan_ = std::make_shared<const algo::automatic::plan>(algo::automatic::make_plan<Transport>(cfg_.algo_override, size()));
  }

  /// Runs `body(algorithm, channel)` with the resolved algorithm (automatic: the chosen one).
  template <collective C, class Algo, class Body>
  void run(const Algo& a0, fingerprint fp, std::size_t bytes, Body&& body) {
    const auto& a = pick(a0);
    using A = std::remove_cvref_t<decltype(a)>;
    if constexpr (detail::is_automatic<A>::value) {
      const bool info = cfg_.debug == log_level::info;
      std::string why;
      const auto& pl = plan_for<A>();
      const std::size_t i = a.choose(pl, C, bytes, info ? &why : nullptr);
      if (info) detail::log(log_level::info, cfg_, rank(), explain_text(C, bytes, A::names[i], why));
      a.visit(i, [&](const auto& concrete) {
        using CA = std::remove_cvref_t<decltype(concrete)>;
        if constexpr (algorithm_for<CA, C, Transport>)
          execute(concrete, fp, body);
        else
          throw config_error("TUTTI_ALGO asks for " + std::string(CA::name) + ", which has no " +
                             std::string(collective_name(C)) + " schedule on this transport");
      });
    } else {
      execute(a, fp, body);
    }
  }

  TUTTI_COLD std::string explain_text(collective c, std::size_t bytes, std::string_view name, const std::string& why) const {
    return std::string(collective_name(c)) + " of " + std::to_string(bytes) + " bytes on " + std::to_string(size()) +
           " ranks: " + std::string(name) + " (" + why + ")";
  }

  template <class A, class Body>
  void execute(const A& a, fingerprint fp, Body& body) {
    fp.algo = algorithm_id<A>();
    channel<Transport> ch(t_, fp, A::name, cfg_.timeout, scratch_, aborted_.get());
    recorded(ch, [&] { body(a, ch); });
  }

  /// guarded(f), with the call in the flight recorder.
  template <class F>
  void recorded(const channel<Transport>& ch, F&& f) {
    const auto i = recorder_.begin(ch.fp(), ch.algorithm());
    bool ok = false;
    struct on_exit {
      detail::flight_recorder& r;
      std::uint64_t i;
      bool& ok;
      ~on_exit() { r.end(i, ok); }
    } mark{recorder_, i, ok};
    guarded(std::forward<F>(f), [&] { recorder_.end(i, false); });
    ok = true;
  }

  /// Runs `f`; on a failure other than a usage error, marks the communicator broken, tells the
  /// peers, calls `on_failure` and prints the flight recorder.
  template <class F, class G = void (*)()>
  void guarded(F&& f, G&& on_failure = [] {}) {
    if (!broken_.empty())
      throw error(errc::aborted, "communicator unusable after an earlier failure: " + broken_);
    try {
      if (aborted())
        throw error(errc::aborted, "rank " + std::to_string(rank()) +
                                       ": the communicator was aborted (communicator::abort)");
      f();
    } catch (const usage_error&) {
      throw;
    } catch (const std::exception& e) {
      broken_ = e.what();
      if constexpr (failure_notices<Transport>) t_.fail(broken_);  // tell the peers
      on_failure();
      recorder_.print("failed");
      throw;
    }
    if (noted_) {  // the last words of an earlier usage error no longer hold
      if constexpr (last_words<Transport>) t_.note({});
      noted_ = false;
    }
  }

  /// Raises `usage_error` with `text`, first leaving it with the peers as this rank's last words.
  [[noreturn]] void usage(const std::string& text) {
    if constexpr (last_words<Transport>) {
      t_.note("usage_error: " + text);
      noted_ = true;
    }
    throw usage_error(text);
  }

  /// A disagreement this rank sees alone (a view whose size is not its count): the call fails
  /// as if a peer had found it, telling the peers.
  [[noreturn]] void local_mismatch(const fingerprint& fp, const std::string& text) {
    channel<Transport> ch(t_, fp, "checks", cfg_.timeout, scratch_, aborted_.get());
    recorded(ch, [&] { throw mismatch_error(text); });
    throw mismatch_error(text);  // not reached: recorded rethrows
  }

  /// "all_gather_v on rank 2: in has 5 elements, but counts[2] = 4<tail>": a view whose size
  /// is not this rank's own count of a v-collective.
  [[noreturn]] TUTTI_COLD void own_count_mismatch(const fingerprint& fp, const char* buf, std::size_t has,
                                                  std::size_t count, const std::string& tail) {
    local_mismatch(fp, what(fp.coll) + ": " + buf + " has " + std::to_string(has) + " elements, but counts[" +
                           std::to_string(rank()) + "] = " + std::to_string(count) + tail);
  }
  /// gather_v's and scatter_v's tail at a rank that is not the root.
  TUTTI_COLD static std::string not_root_counts(int root, const char* does) {
    return " (the counts passed here; the root, rank " + std::to_string(root) + ", " + does + " its own)";
  }

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

  /// The counts of a v-collective with their offsets (kept in `offsets`), after the checks every
  /// rank can make alone.
  block_counts blocks(std::span<const std::size_t> counts, const char* name, collective c,
                      std::vector<std::size_t>& offsets) {
    if (counts.size() != size_t_size())
      usage(what(c) + ": " + name + " has " + std::to_string(counts.size()) + " entries; it must have one per rank (" +
            std::to_string(size()) + ")");
    offsets.resize(counts.size());
    block_counts b;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      offsets[i] = b.total;
      if (counts[i] > (std::size_t{1} << 62) - b.total)
        usage(what(c) + ": " + name + " sum to more than 2^62 elements");
      b.total += counts[i];
      b.largest = std::max(b.largest, counts[i]);
    }
    b.counts = counts;
    b.offsets = offsets;
    return b;
  }
  /// A digest of the counts every rank must agree on (the fingerprint's `shape`).
  static std::uint64_t counts_digest(std::span<const std::size_t> counts) noexcept {
    std::uint64_t h = 0x636f756e7473ull;  // "counts"
    for (std::size_t c : counts) h = detail::hash_combine(h * 0x100000001b3ull, static_cast<std::uint64_t>(c));
    return h;
  }
  std::string other_ranks() const {
    const int other = rank() == 0 ? 1 : 0;
    return size() == 2 ? "rank " + std::to_string(other) : "the other ranks (rank " + std::to_string(other) + ", ...)";
  }

  /// avg reduces as a sum; the division happens once, on the result.
  template <class Op>
  static auto kernel_op(const Op& op) {
    if constexpr (std::is_same_v<Op, op::avg>) return op::sum{};
    else return op;
  }
  template <class T, class Op>
  void finish(view<T, memory> result, const Op&) {
    if constexpr (std::is_same_v<Op, op::avg>) detail::divide_elements(t_, result.data(), result.size(), size());
  }

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
      auto body = [&](const auto& alg, auto& ch) { alg.all_gather(ch, mine, view<std::uint64_t>(all)); };
      execute(algo::direct{}, fp, body);
    } else {
      all = host_words(fp, mine);
    }
    return all;
  }
  /// Every rank's words through the transport's host-side exchange (a transport of device
  /// memory), in the flight recorder and guarded like a collective.
  std::vector<std::uint64_t> host_words(const fingerprint& fp, view<const std::uint64_t> mine) {
    static_assert(host_exchange<Transport>,
                  "tutti: agreement on a transport whose memory is not the host's needs its host_exchange");
    std::vector<std::uint64_t> all(mine.size() * size_t_size());
    channel<Transport> ch(t_, fp, "host exchange", cfg_.timeout, scratch_, aborted_.get());
    recorded(ch, [&] {
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
    return c;
  }

  std::size_t size_t_size() const { return static_cast<std::size_t>(size()); }

  TUTTI_COLD std::string what(collective c) const {
    return std::string(collective_name(c)) + " on rank " + std::to_string(rank());
  }
  void check_root(int root, collective c) {
    if (root < 0 || root >= size())
      usage(what(c) + ": root " + std::to_string(root) + " is outside 0.." + std::to_string(size() - 1));
  }
  void check_peer(int peer, int tag, const char* call) {
    if (peer < 0 || peer >= size())
      usage(std::string(call) + " on rank " + std::to_string(rank()) + ": peer " + std::to_string(peer) +
            " is outside 0.." + std::to_string(size() - 1));
    if (peer == rank())
      usage(std::string(call) + " on rank " + std::to_string(rank()) + ": a rank cannot " + call +
            " to or from itself (it would block forever)");
    if (tag < 0) usage(std::string(call) + ": tag " + std::to_string(tag) + " is negative");
  }
  void check_size(std::size_t got, std::size_t want, const char* name, const char* rule, collective c) {
    if (got != want)
      usage(what(c) + ": " + name + " has " + std::to_string(got) + " elements; it must hold " + rule + " = " +
            std::to_string(want));
  }
  void check_room(std::size_t got, std::size_t want, const char* name, const char* rule, collective c) {
    if (got < want)
      usage(what(c) + ": " + name + " has " + std::to_string(got) + " elements; it must hold at least " + rule +
            " = " + std::to_string(want));
  }
  template <class A, class B>
  void check_disjoint(view<A, memory> a, view<B, memory> b, collective c, bool allow_same) {
    if (allow_same && static_cast<const void*>(a.data()) == static_cast<const void*>(b.data())) return;
    if (detail::overlaps(a, b)) usage(what(c) + ": in and out overlap");
  }
  /// `in` may be exactly this rank's block of `out`, at element `own` (in place); nothing else.
  template <class A, class B>
  void check_disjoint_or_own_block(view<A, memory> in, view<B, memory> out, std::size_t own, collective c) {
    if (static_cast<const void*>(in.data()) == static_cast<const void*>(out.data() + own)) return;
    if (detail::overlaps(in, out)) usage(what(c) + ": in overlaps out (other than being this rank's own block)");
  }
  template <class T>
  void copy(view<const T, memory> from, view<T, memory> to) {
    detail::copy_bytes(t_, to.data(), from.data(), from.size_bytes());
  }

  detail::engine_slot engine_;  // first: a move waits for its operations before the rest moves
  Transport t_;
  Algorithm algo_;
  config cfg_;
  /// automatic's plans, shared with copies (they depend only on the config and the group size).
  std::shared_ptr<const typename std::conditional_t<detail::is_automatic<Algorithm>::value, Algorithm,
                                                    algo::automatic>::plan>
      plan_;
  mutable std::shared_ptr<const algo::automatic::plan> default_plan_;
  detail::scratch_pool scratch_;
  detail::scratch_buffer fused_scratch_;  // a fused run's packed buffer (engine thread only)
  detail::flight_recorder recorder_;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::size_t> offsets_a_, offsets_b_;  // the v-collectives' offsets, reused
  std::uint64_t seq_ = 0;
  std::uint64_t context_ = 0;
  std::string broken_;
  bool noted_ = false;  // this rank left last words (a usage error) with its peers
  bool fusing_ = false;  // a batch is open (fuse): posts are held in held_
  std::size_t fusion_bytes_ = 0;
  std::vector<held_op> held_;
};

}  // namespace tutti
