/// \file
/// `tutti::request`: the handle of a non-blocking operation (`comm.iall_reduce(...)` and the
/// other `i` calls of `tutti::communicator`), with `wait_all` and `wait_any`; and the progress
/// engine behind them (`detail::progress_engine`).
///
/// Each communicator that posts a non-blocking operation gets a progress engine: one thread
/// that runs the communicator's posted operations one after another, in the order they were
/// posted, with the same schedules, checks and deadlines as the blocking calls. So operations
/// progress while the caller computes or sleeps (no tutti call needed: unlike MPI's non-blocking
/// collectives, which progress only inside MPI calls), they match across ranks by the order they
/// were posted (like blocking calls), and each fails exactly as its blocking twin would have.
/// A blocking call on a communicator with posted operations first waits for them, so it is
/// ordered after them. Communicators (the world and the groups made from it) progress
/// independently of each other.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/operation.hpp"

namespace tutti {

namespace detail {

/// One communicator's progress engine: a thread running the posted operations in order.
class progress_engine {
 public:
  /// A posted operation: runs once, on the engine's thread.
  struct task {
    virtual ~task() = default;
    virtual void run() = 0;
    std::shared_ptr<operation_state> state = std::make_shared<operation_state>();
    /// A run posted as one task (a fused batch): its members' requests, completed with it.
    std::vector<std::shared_ptr<operation_state>> members;
  };

  /// `waiting` (may be null; static storage, as the flight recorder's): posted requests not yet
  /// started, for the flight recorder to print.
  explicit progress_engine(std::atomic<std::uint64_t>* waiting = nullptr);
  progress_engine(const progress_engine&) = delete;
  progress_engine& operator=(const progress_engine&) = delete;
  /// Finishes what is posted, then stops the thread.
  ~progress_engine();

  /// Queues `t`; returns its state.
  std::shared_ptr<operation_state> post(std::unique_ptr<task> t);

  /// Whether every posted operation has completed.
  bool idle() const noexcept { return pending_.load(std::memory_order_acquire) == 0; }
  /// Whether the caller is this engine's thread (an operation running on it).
  bool on_engine() const noexcept { return std::this_thread::get_id() == worker_.get_id(); }
  /// Requests posted and not yet complete.
  std::size_t pending() const noexcept { return pending_.load(std::memory_order_acquire); }

  /// Waits until every posted operation has completed.
  void drain();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_, drained_;
  std::deque<std::unique_ptr<task>> queue_;
  std::atomic<std::size_t> pending_{0};
  std::exception_ptr failed_;  // the last failure, and how many queued operations inherit it
  std::size_t inherit_ = 0;
  std::atomic<std::uint64_t>* waiting_;
  bool stopping_ = false;
  std::thread worker_;  // last: starts once the rest is built
};

/// A task running `f`.
template <class F>
struct task_of final : progress_engine::task {
  explicit task_of(F f) : fn(std::move(f)) {}
  void run() override { fn(); }
  F fn;
};

}  // namespace detail

/// The handle of a non-blocking operation. Move-only. The operation's buffers (views, counts)
/// must stay valid and unchanged (inputs) until it completes. A request still pending when
/// destroyed waits for its operation (an error it ends with is then not rethrown; the
/// communicator stays failed, so its next call raises it as `errc::aborted`), unless its
/// operation is still held in an open batch (`communicator::fuse`): then the batch runs it
/// when it ends, and its buffers must stay valid until then. An empty request
/// (default-constructed, moved from, or already waited on) is complete.
class [[nodiscard]] request {
 public:
  request() = default;
  explicit request(std::shared_ptr<detail::operation_state> s) noexcept : s_(std::move(s)) {}
  request(request&&) noexcept = default;
  request& operator=(request&& o) noexcept;
  ~request() { settle(); }

  /// Returns when the operation is complete; rethrows what it failed with (`mismatch_error`,
  /// `timeout_error`, `peer_lost`, `error` with `errc::aborted`, `usage_error`: what the
  /// blocking call would have thrown). The request is empty afterwards. `usage_error` while
  /// its operation is held in an open batch: nothing would run it until the batch ends.
  void wait();

  /// Whether the operation is complete (then as `wait()`: rethrows its error, and the request
  /// is empty). Never blocks.
  bool test();

  /// Whether this request has an operation not yet waited on.
  bool active() const noexcept { return s_ != nullptr; }

  /// What an `irecv` got (its source, tag and count; see `recv_status`), once `wait()` or a
  /// `test()` that returned true has completed it. `usage_error` while it is still pending;
  /// for any other operation, the default `recv_status`.
  recv_status status() const;

 private:
  void finish() {
    auto s = std::exchange(s_, nullptr);
    status_ = s->status;
    if (s->error) std::rethrow_exception(s->error);
  }
  void settle() noexcept {
    if (s_ && !s_->held.load(std::memory_order_relaxed)) detail::await(*s_);
    s_.reset();
  }
  /// `usage_error` if the operation is held in an open batch (see `wait`).
  void check_not_held(const char* call) const;
  friend std::size_t wait_any(std::span<request> rs);
  std::shared_ptr<detail::operation_state> s_;
  recv_status status_;
};

/// Waits for every request; then rethrows the first error among them (in order), so that none
/// is left pending when it throws.
TUTTI_DECL void wait_all(std::span<request> rs);
/// `wait_all(r1, r2, ...)`.
template <class... R>
  requires(std::is_same_v<std::remove_cvref_t<R>, request> && ...)
void wait_all(R&... rs) {
  request* all[] = {&rs...};
  std::exception_ptr first;
  for (request* r : all) {
    try {
      r->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

/// Waits until one of the active requests completes; returns its index (and, as `wait()`,
/// rethrows its error; it is empty afterwards). Returns `rs.size()` when none is active.
TUTTI_DECL std::size_t wait_any(std::span<request> rs);

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/group/request.ipp"
#endif
