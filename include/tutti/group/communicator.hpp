/// \file
/// `tutti::communicator<Transport, Algorithm>`: a group of ranks, the transport that links them
/// and the algorithm that schedules their collectives. Every collective is a blocking call that
/// every rank of the group makes, in the same order, with agreeing arguments; disagreement raises
/// `mismatch_error` and a silent peer raises `timeout_error` or `peer_lost`.
///
/// A communicator is used by one thread at a time. After a failure other than `usage_error` it is
/// unusable (its peers may be anywhere in the schedule); later calls raise `tutti::error` with
/// `errc::aborted` and the original message.
///
/// Design note: each collective validates its arguments, builds its fingerprint and then runs
/// its schedule on a `channel`; a non-blocking variant (`i*` returning a request) can later run
/// the same schedule on a progress thread without changing these signatures.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/algorithm/channel.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/dtype.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/core/view.hpp"
#include "tutti/detail/buffer.hpp"
#include "tutti/detail/flight_recorder.hpp"
#include "tutti/op/kernels.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/transport.hpp"

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

template <transport Transport, algorithm Algorithm = algo::automatic>
class communicator {
 public:
  using transport_type = Transport;
  using algorithm_type = Algorithm;

  /// Wraps a connected transport. Reads `TUTTI_TIMEOUT`, `TUTTI_ALGO` and `TUTTI_DEBUG`
  /// (`config_error` when malformed) unless a config is given.
  explicit communicator(Transport t, Algorithm a = {}) : communicator(std::move(t), std::move(a), config::from_env()) {}
  communicator(Transport t, Algorithm a, config cfg)
      : t_(std::move(t)), algo_(std::move(a)), cfg_(std::move(cfg)),
        overrides_(algo::automatic::override_table::parse(cfg_.algo_override)),
        recorder_(t_.rank(), t_.size(), 0) {
    if constexpr (!shared_window<Transport>)
      if (overrides_.names(algo::automatic::choice::shared_memory))
          throw config_error("TUTTI_ALGO names shared_memory, which needs a transport with shared windows "
                             "(tutti::shm); this communicator's transport has none");
    if constexpr (!native_collectives<Transport>)
      if (overrides_.names(algo::automatic::choice::native))
          throw config_error("TUTTI_ALGO names native, which needs a transport with collectives of its own "
                             "(tutti::mpi); this communicator's transport has none");
  }

  /// Joins the job the environment describes (`Transport::from_env()`, e.g. `tutti::shm`).
  static communicator from_env()
    requires requires { Transport::from_env(); }
  {
    return communicator(Transport::from_env());
  }

  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;

  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }
  Transport& transport() noexcept { return t_; }
  const Algorithm& algorithm() const noexcept { return algo_; }

  /// Deadline for every blocking wait from now on (default `TUTTI_TIMEOUT`, else 300 s).
  template <class Rep, class Period>
  void set_timeout(std::chrono::duration<Rep, Period> d) {
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d);
    if (ms.count() <= 0) throw usage_error("set_timeout: the timeout must be positive");
    cfg_.timeout = ms;
  }
  std::chrono::milliseconds timeout() const noexcept { return cfg_.timeout; }

  /// Aborts this communicator and every group made from it (they share its links), like
  /// `ncclCommAbort`. Safe from any thread and from a signal handler: a blocking call in flight
  /// on another thread returns within about 20 ms with `tutti::error` (`errc::aborted`), and
  /// every later call raises it too. The peers learn of it as `peer_lost` naming this rank
  /// (promptly where the transport has failure notices: shm, tcp, mpi, threads) or by their
  /// deadline. There is no way back: build a new communicator (see `shrink`).
  void abort() noexcept { aborted_->store(true, std::memory_order_release); }
  /// Whether `abort()` was called on this communicator or its family.
  bool aborted() const noexcept { return aborted_->load(std::memory_order_acquire); }

  /// After a failure (a lost rank, a timeout, an abort): a new communicator of the ranks still
  /// alive, renumbered in their old order, with this one's algorithm and settings; this one stays
  /// unusable. Every surviving rank of the world calls it; a rank that is alive but does not call
  /// it within the timeout (stopped, hung) is left out. `kept`, when given, gets the old ranks of
  /// the members in new rank order. On transports that can tell which processes are gone
  /// (`tutti::shm`); elsewhere start a new job (a fresh rendezvous).
  communicator shrink(std::vector<int>* kept = nullptr)
    requires requires(const Transport& t) { { t.shrink(std::chrono::milliseconds{}, kept) } -> std::same_as<Transport>; }
  {
    if (context_ != 0) throw usage_error("shrink: call it on the world communicator, not on a group");
    return communicator(t_.shrink(cfg_.timeout, kept), algo_, cfg_);
  }

  /// This rank's flight recorder: its last operations on this communicator with their
  /// fingerprints, start times and outcomes, as printed on failure and on SIGUSR1.
  std::string flight_record(std::size_t max = detail::flight_capacity) const { return recorder_.text(max); }

  // ---- collectives ------------------------------------------------------------------------
  // `Algo` is a per-call algorithm (`comm.all_reduce(v, op, tutti::algo::tree{})` or
  // `comm.all_reduce<tutti::algo::tree>(v, op)`); by default the communicator's own.

  /// Copies root's `buf` into every rank's `buf`. Every rank passes the same count and root.
  template <class Algo = algo::inherit, class T>
  void broadcast(view<T> buf, int root, const Algo& a = {}) {
    static_assert(!std::is_const_v<T>, "tutti: broadcast writes into buf: pass a non-const view");
    static_assert(supports<Algo, collective::broadcast>,
                  "tutti: this algorithm has no broadcast schedule (see the table in README.md); "
                  "use tutti::algo::tree, ring, direct or automatic");
    check_root(root, collective::broadcast);
    if (size() == 1) return void(next_fp(collective::broadcast, dtype_of<T>(), buf.size(), root, 0));
    run<collective::broadcast>(a, next_fp(collective::broadcast, dtype_of<T>(), buf.size(), root, 0),
                               buf.size_bytes(), [&](const auto& alg, auto& ch) { alg.broadcast(ch, buf, root); });
  }

  /// Reduces every rank's `buf` with `op` into root's `buf`; the other ranks' buffers are left
  /// unchanged.
  template <class Algo = algo::inherit, class T, class Op = op::sum>
    requires reduce_op<Op, std::remove_const_t<T>>
  void reduce(view<T> buf, int root, const Op& op = {}, const Algo& a = {}) {
    static_assert(!std::is_const_v<T>, "tutti: reduce writes into buf: pass a non-const view");
    static_assert(supports<Algo, collective::reduce>,
                  "tutti: this algorithm has no reduce schedule (see the table in README.md); "
                  "use tutti::algo::tree, ring, direct or automatic");
    check_root(root, collective::reduce);
    auto fp = next_fp(collective::reduce, dtype_of<T>(), buf.size(), root, op_traits<Op>::id());
    if (size() > 1)
      run<collective::reduce>(a, fp, buf.size_bytes(), [&](const auto& alg, auto& ch) { alg.reduce(ch, buf, root, kernel_op(op)); });
    if (rank() == root) finish(buf, op);
  }

  /// Reduces every rank's `buf` with `op`; every rank gets the result in `buf`.
  template <class Algo = algo::inherit, class T, class Op = op::sum>
    requires reduce_op<Op, std::remove_const_t<T>>
  void all_reduce(view<T> buf, const Op& op = {}, const Algo& a = {}) {
    static_assert(!std::is_const_v<T>, "tutti: all_reduce writes into buf: pass a non-const view");
    static_assert(supports<Algo, collective::all_reduce>,
                  "tutti: this algorithm has no all_reduce schedule (see the table in README.md)");
    auto fp = next_fp(collective::all_reduce, dtype_of<T>(), buf.size(), -1, op_traits<Op>::id());
    if (size() > 1)
      run<collective::all_reduce>(a, fp, buf.size_bytes(), [&](const auto& alg, auto& ch) { alg.all_reduce(ch, buf, kernel_op(op)); });
    finish(buf, op);
  }

  /// Out of place: `out` (same size as `in`) gets the reduction of every rank's `in`.
  template <class Algo = algo::inherit, class In, class T, class Op = op::sum>
    requires std::same_as<std::remove_const_t<In>, T> && reduce_op<Op, T>
  void all_reduce(view<In> in, view<T> out, const Op& op = {}, const Algo& a = {}) {
    if (in.size() != out.size())
      throw usage_error(what(collective::all_reduce) + ": in has " + std::to_string(in.size()) +
                        " elements but out has " + std::to_string(out.size()));
    check_disjoint(in, out, collective::all_reduce, /*allow_same=*/true);
    static_assert(supports<Algo, collective::all_reduce>,
                  "tutti: this algorithm has no all_reduce schedule (see the table in README.md)");
    auto fp = next_fp(collective::all_reduce, dtype_of<T>(), in.size(), -1, op_traits<Op>::id());
    view<const T> cin = in;
    // An algorithm with an out-of-place schedule reads `in` itself; the others work in place on
    // `out`, after one copy.
    auto body = [&](const auto& alg, auto& ch) {
      if constexpr (requires { alg.all_reduce(ch, cin, out, kernel_op(op)); }) {
        alg.all_reduce(ch, cin, out, kernel_op(op));
      } else {
        copy(cin, out);
        alg.all_reduce(ch, out, kernel_op(op));
      }
    };
    if (size() == 1) copy(cin, out);
    else run<collective::all_reduce>(a, fp, in.size_bytes(), body);
    finish(out, op);
  }

  /// Root's `out` (size() · in.size() elements, rank i's block at i · in.size()) gets every
  /// rank's `in`; `out` is ignored (may be empty) elsewhere.
  template <class Algo = algo::inherit, class In, class T>
    requires std::same_as<std::remove_const_t<In>, T>
  void gather(view<In> in, view<T> out, int root, const Algo& a = {}) {
    static_assert(supports<Algo, collective::gather>,
                  "tutti: this algorithm has no gather schedule (see the table in README.md); "
                  "use tutti::algo::tree, direct or automatic");
    check_root(root, collective::gather);
    if (rank() == root) {
      check_size(out.size(), in.size() * size_t_size(), "out", "size() * in.size()", collective::gather);
      check_disjoint_or_own_block(in, out, collective::gather);
    }
    auto fp = next_fp(collective::gather, dtype_of<T>(), in.size(), root, 0);
    view<const T> cin = in;
    if (size() == 1) return copy(cin, out.subview(0, in.size()));
    run<collective::gather>(a, fp, in.size_bytes(), [&](const auto& alg, auto& ch) { alg.gather(ch, cin, out, root); });
  }

  /// Every rank's `out` (size() · in.size() elements) gets every rank's `in`, in rank order.
  template <class Algo = algo::inherit, class In, class T>
    requires std::same_as<std::remove_const_t<In>, T>
  void all_gather(view<In> in, view<T> out, const Algo& a = {}) {
    static_assert(supports<Algo, collective::all_gather>,
                  "tutti: this algorithm has no all_gather schedule (see the table in README.md)");
    check_size(out.size(), in.size() * size_t_size(), "out", "size() * in.size()", collective::all_gather);
    check_disjoint_or_own_block(in, out, collective::all_gather);
    auto fp = next_fp(collective::all_gather, dtype_of<T>(), in.size(), -1, 0);
    view<const T> cin = in;
    if (size() == 1) return copy(cin, out);
    run<collective::all_gather>(a, fp, in.size_bytes(), [&](const auto& alg, auto& ch) { alg.all_gather(ch, cin, out); });
  }

  /// Rank i's `out` gets block i of root's `in` (size() · out.size() elements); `in` is ignored
  /// (may be empty) elsewhere.
  template <class Algo = algo::inherit, class In, class T>
    requires std::same_as<std::remove_const_t<In>, T>
  void scatter(view<In> in, view<T> out, int root, const Algo& a = {}) {
    static_assert(supports<Algo, collective::scatter>,
                  "tutti: this algorithm has no scatter schedule (see the table in README.md); "
                  "use tutti::algo::tree, direct or automatic");
    check_root(root, collective::scatter);
    if (rank() == root) {
      check_size(in.size(), out.size() * size_t_size(), "in", "size() * out.size()", collective::scatter);
      check_disjoint_or_own_block(view<const T>(out), view<T>(const_cast<T*>(in.data()), in.size()), collective::scatter);
    }
    auto fp = next_fp(collective::scatter, dtype_of<T>(), out.size(), root, 0);
    view<const T> cin = in;
    if (size() == 1) return copy(cin.subview(0, out.size()), out);
    run<collective::scatter>(a, fp, out.size_bytes(), [&](const auto& alg, auto& ch) { alg.scatter(ch, cin, out, root); });
  }

  /// Rank j's block i of `out` gets rank i's block j of `in`; `in` and `out` have the same size,
  /// a multiple of size(), and must not overlap.
  template <class Algo = algo::inherit, class In, class T>
    requires std::same_as<std::remove_const_t<In>, T>
  void all_to_all(view<In> in, view<T> out, const Algo& a = {}) {
    static_assert(supports<Algo, collective::all_to_all>,
                  "tutti: this algorithm has no all_to_all schedule (see the table in README.md); "
                  "use tutti::algo::direct or automatic");
    check_size(out.size(), in.size(), "out", "in.size()", collective::all_to_all);
    if (in.size() % size_t_size() != 0)
      throw usage_error(what(collective::all_to_all) + ": in has " + std::to_string(in.size()) +
                        " elements, not a multiple of the group size " + std::to_string(size()));
    check_disjoint(in, out, collective::all_to_all, /*allow_same=*/false);
    auto fp = next_fp(collective::all_to_all, dtype_of<T>(), in.size(), -1, 0);
    view<const T> cin = in;
    if (size() == 1) return copy(cin, out);
    run<collective::all_to_all>(a, fp, in.size_bytes() / size_t_size(), [&](const auto& alg, auto& ch) { alg.all_to_all(ch, cin, out); });
  }

  /// Rank i's `out` gets block i of the reduction of every rank's `in` (size() · out.size()
  /// elements); `in` and `out` must not overlap.
  template <class Algo = algo::inherit, class In, class T, class Op = op::sum>
    requires std::same_as<std::remove_const_t<In>, T> && reduce_op<Op, T>
  void reduce_scatter(view<In> in, view<T> out, const Op& op = {}, const Algo& a = {}) {
    static_assert(supports<Algo, collective::reduce_scatter>,
                  "tutti: this algorithm has no reduce_scatter schedule (see the table in README.md)");
    check_size(in.size(), out.size() * size_t_size(), "in", "size() * out.size()", collective::reduce_scatter);
    check_disjoint(in, out, collective::reduce_scatter, /*allow_same=*/false);
    auto fp = next_fp(collective::reduce_scatter, dtype_of<T>(), out.size(), -1, op_traits<Op>::id());
    view<const T> cin = in;
    if (size() == 1) copy(cin, out);
    else run<collective::reduce_scatter>(a, fp, in.size_bytes(), [&](const auto& alg, auto& ch) { alg.reduce_scatter(ch, cin, out, kernel_op(op)); });
    finish(out, op);
  }

  /// Returns once every rank of the group has entered the barrier.
  template <class Algo = algo::inherit>
  void barrier(const Algo& a = {}) {
    static_assert(supports<Algo, collective::barrier>, "tutti: this algorithm has no barrier schedule");
    auto fp = next_fp(collective::barrier, dtype_of<char>(), 0, -1, 0);
    if (size() == 1) return;
    run<collective::barrier>(a, fp, 0, [&](const auto& alg, auto& ch) { alg.barrier(ch); });
  }

  // ---- point to point ---------------------------------------------------------------------

  /// Sends `data` to `peer`; returns once the transport has taken it. The matching `recv` names
  /// this rank, the same tag, dtype and count.
  template <class T>
  void send(view<T> data, int peer, int tag = 0) {
    check_peer(peer, tag, "send");
    using U = std::remove_const_t<T>;
    channel<Transport> ch(t_, p2p_fp(dtype_of<U>(), data.size(), tag), "p2p", cfg_.timeout, scratch_, aborted_.get());
    recorded(ch, [&] { ch.send(peer, view<const U>(data)); });
  }

  /// Receives `data.size()` elements from `peer` with `tag` into `data`.
  template <class T>
  void recv(view<T> data, int peer, int tag = 0) {
    static_assert(!std::is_const_v<T>, "tutti: recv writes into data: pass a non-const view");
    check_peer(peer, tag, "recv");
    channel<Transport> ch(t_, p2p_fp(dtype_of<T>(), data.size(), tag), "p2p", cfg_.timeout, scratch_, aborted_.get());
    recorded(ch, [&] { ch.recv(peer, data); });
  }

  // ---- groups -----------------------------------------------------------------------------

  /// A communicator of the listed ranks (new rank i is `ranks[i]`), sharing this one's links.
  /// Every rank of this communicator calls it with the same list, as torch's `new_group`;
  /// non-members get an empty optional. Different lists on different ranks: `mismatch_error`.
  std::optional<communicator> new_group(std::vector<int> ranks) {
    std::vector<char> seen(static_cast<std::size_t>(size()), 0);
    for (int r : ranks) {
      if (r < 0 || r >= size())
        throw usage_error("new_group: rank " + std::to_string(r) + " is outside 0.." + std::to_string(size() - 1));
      if (seen[static_cast<std::size_t>(r)]++)
        throw usage_error("new_group: rank " + std::to_string(r) + " is listed twice");
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
    if (!seen[static_cast<std::size_t>(rank())]) return std::nullopt;
    return child(ranks, context);
  }

  /// MPI_Comm_split: ranks with the same `color` form a group, ordered by (`key`, rank).
  /// A negative color opts out and gets an empty optional. Every rank calls it.
  std::optional<communicator> split(int color, int key) {
    const std::uint64_t mine = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(color)) << 32) |
                               static_cast<std::uint32_t>(key);
    const std::uint64_t base = seq_;
    auto all = exchange(mine);
    if (color < 0) return std::nullopt;
    std::vector<std::pair<int, int>> members;  // (key, rank)
    for (int i = 0; i < size(); ++i) {
      const auto v = all[static_cast<std::size_t>(i)];
      if (static_cast<std::int32_t>(v >> 32) == color)
        members.emplace_back(static_cast<std::int32_t>(v & 0xffffffffu), i);
    }
    std::sort(members.begin(), members.end());
    std::vector<int> ranks;
    for (auto& m : members) ranks.push_back(m.second);
    const std::uint64_t context = detail::hash_combine(context_, detail::hash_combine(base, static_cast<std::uint64_t>(color) + 0x73706c6974ull));
    return child(ranks, context);
  }

  /// `n` elements (zeroed) in memory shared with the peers, on transports that have it
  /// (`tutti::shm`): collectives whose input lies there skip the copy into shared memory.
  template <class T>
    requires requires(Transport& t, std::byte* p) {
      { t.allocate(std::size_t{}) } -> std::same_as<std::byte*>;
      t.deallocate(p);
    }
  shared_buffer<T, Transport> allocate(std::size_t n) {
    return shared_buffer<T, Transport>(t_, n);
  }

  /// Which algorithm a collective `c` of `bytes` would run on this communicator, and why: the
  /// line `TUTTI_DEBUG=info` prints per call. `bytes` as the collective passes it: the whole
  /// buffer (broadcast, reduce, all_reduce, reduce_scatter's input), one rank's block (gather,
  /// all_gather, scatter, all_to_all), 0 (barrier). Local: no communication.
  std::string explain(collective c, std::size_t bytes) const {
    if constexpr (std::is_same_v<Algorithm, algo::automatic>) {
      if (size() == 1) return std::string(collective_name(c)) + " on 1 rank: nothing to communicate";
      std::string why;
      bool windows = false;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((c == static_cast<collective>(I) ? void(windows = algorithm_for<algo::shared_memory, static_cast<collective>(I), Transport>) : void()), ...);
      }(std::make_index_sequence<9>{});
      const auto choice = algo_.choose(c, bytes, size(), overrides_, windows, algo::tuned_kind_of<Transport>, &why);
      return explain_text(c, bytes, choice, why);
    } else {
      return std::string(collective_name(c)) + " of " + std::to_string(bytes) + " bytes on " + std::to_string(size()) +
             " ranks: " + std::string(Algorithm::name) + " (the communicator's algorithm; automatic would consult TUTTI_ALGO)";
    }
  }

  /// The context id of this communicator (0 for the world).
  std::uint64_t context() const noexcept { return context_; }

 private:
  template <class Algo>
  using resolved = std::conditional_t<std::is_same_v<Algo, algo::inherit>, Algorithm, Algo>;

  template <class Algo, collective C>
  static constexpr bool supports =
      std::is_same_v<resolved<Algo>, algo::automatic> || algorithm_for<resolved<Algo>, C, Transport>;

  template <class Algo>
  const resolved<Algo>& pick(const Algo& a) const {
    if constexpr (std::is_same_v<Algo, algo::inherit>) return algo_;
    else return a;
  }

  /// Runs `body(algorithm, channel)` with the resolved algorithm (automatic: the chosen one).
  template <collective C, class Algo, class Body>
  void run(const Algo& a0, fingerprint fp, std::size_t bytes, Body&& body) {
    const auto& a = pick(a0);
    using A = std::remove_cvref_t<decltype(a)>;
    if constexpr (std::is_same_v<A, algo::automatic>) {
      const bool info = cfg_.debug == log_level::info;
      std::string why;
      const auto choice = a.choose(C, bytes, size(), overrides_, algorithm_for<algo::shared_memory, C, Transport>,
                                   algo::tuned_kind_of<Transport>, info ? &why : nullptr);
      if (info) detail::log(log_level::info, cfg_, rank(), explain_text(C, bytes, choice, why));
      a.visit(choice, [&](const auto& concrete) {
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

  std::string explain_text(collective c, std::size_t bytes, algo::automatic::choice choice, const std::string& why) const {
    return std::string(collective_name(c)) + " of " + std::to_string(bytes) + " bytes on " + std::to_string(size()) +
           " ranks: " + std::string(algo::automatic::choice_name(choice)) + " (" + why + ")";
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
      if constexpr (requires { t_.fail(std::string_view{}); }) t_.fail(broken_);  // tell the peers
      on_failure();
      recorder_.print("failed");
      throw;
    }
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

  /// avg reduces as a sum; the division happens once, on the result.
  template <class Op>
  static auto kernel_op(const Op& op) {
    if constexpr (std::is_same_v<Op, op::avg>) return op::sum{};
    else return op;
  }
  template <class T, class Op>
  void finish(view<T> result, const Op&) {
    if constexpr (std::is_same_v<Op, op::avg>) {
      for (auto& x : result) x = static_cast<T>(x / static_cast<std::conditional_t<std::is_arithmetic_v<T>, T, float>>(size()));
    }
  }

  /// Every rank's words (the same number on every rank), concatenated in rank order: the
  /// all_gather behind group agreement.
  std::vector<std::uint64_t> exchange(view<const std::uint64_t> mine) {
    std::vector<std::uint64_t> all(mine.size() * size_t_size());
    auto fp = next_fp(collective::group, dtype_of<std::uint64_t>(), mine.size(), -1, 0);
    if (size() == 1) {
      copy(mine, view<std::uint64_t>(all));
      return all;
    }
    auto body = [&](const auto& alg, auto& ch) { alg.all_gather(ch, mine, view<std::uint64_t>(all)); };
    execute(algo::direct{}, fp, body);
    return all;
  }
  std::vector<std::uint64_t> exchange(std::uint64_t mine) { return exchange(view<const std::uint64_t>(&mine, 1)); }

  std::optional<communicator> child(const std::vector<int>& ranks, std::uint64_t context) {
    communicator c(t_.sub(std::span<const int>(ranks), context), algo_, cfg_);
    c.context_ = context;
    c.aborted_ = aborted_;  // the family shares the links, so it shares the abort
    c.recorder_ = detail::flight_recorder(c.rank(), c.size(), context);
    return c;
  }

  std::size_t size_t_size() const { return static_cast<std::size_t>(size()); }

  std::string what(collective c) const {
    return std::string(collective_name(c)) + " on rank " + std::to_string(rank());
  }
  void check_root(int root, collective c) const {
    if (root < 0 || root >= size())
      throw usage_error(what(c) + ": root " + std::to_string(root) + " is outside 0.." + std::to_string(size() - 1));
  }
  void check_peer(int peer, int tag, const char* call) const {
    if (peer < 0 || peer >= size())
      throw usage_error(std::string(call) + " on rank " + std::to_string(rank()) + ": peer " +
                        std::to_string(peer) + " is outside 0.." + std::to_string(size() - 1));
    if (peer == rank())
      throw usage_error(std::string(call) + " on rank " + std::to_string(rank()) +
                        ": a rank cannot " + call + " to or from itself (it would block forever)");
    if (tag < 0) throw usage_error(std::string(call) + ": tag " + std::to_string(tag) + " is negative");
  }
  void check_size(std::size_t got, std::size_t want, const char* name, const char* rule, collective c) const {
    if (got != want)
      throw usage_error(what(c) + ": " + name + " has " + std::to_string(got) + " elements; it must hold " +
                        rule + " = " + std::to_string(want));
  }
  template <class A, class B>
  void check_disjoint(view<A> a, view<B> b, collective c, bool allow_same) const {
    if (allow_same && static_cast<const void*>(a.data()) == static_cast<const void*>(b.data())) return;
    if (detail::overlaps(a, b)) throw usage_error(what(c) + ": in and out overlap");
  }
  /// `in` may be exactly this rank's block of `out` (in-place gather/all_gather); nothing else.
  template <class A, class B>
  void check_disjoint_or_own_block(view<A> in, view<B> out, collective c) const {
    const auto* own = out.data() + static_cast<std::size_t>(rank()) * in.size();
    if (static_cast<const void*>(in.data()) == static_cast<const void*>(own)) return;
    if (detail::overlaps(in, out)) throw usage_error(what(c) + ": in overlaps out (other than being this rank's own block)");
  }
  template <class T>
  static void copy(view<const T> from, view<T> to) {
    if (!from.empty() && from.data() != to.data()) std::memcpy(to.data(), from.data(), from.size_bytes());
  }

  Transport t_;
  Algorithm algo_;
  config cfg_;
  algo::automatic::override_table overrides_;
  detail::scratch_pool scratch_;
  detail::flight_recorder recorder_;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
  std::uint64_t seq_ = 0;
  std::uint64_t context_ = 0;
  std::string broken_;
};

}  // namespace tutti
