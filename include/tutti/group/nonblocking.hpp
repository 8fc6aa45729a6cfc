/// \file
/// The communicator's non-blocking side: its progress engine slot, the tasks it posts (a call
/// description, a fusable in-place all_reduce, a send or receive of a batch), and `batch`
/// (`communicator::fuse`). group/request.hpp has the engine and the request; group/communicator.hpp
/// posts through these.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "tutti/core/fingerprint.hpp"
#include "tutti/core/view.hpp"
#include "tutti/group/request.hpp"

namespace tutti::detail {

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
  /// Whether the caller is the engine's thread (running a posted operation).
  bool on_engine() const noexcept { return e_ && e_->on_engine(); }
  std::size_t pending() const noexcept { return e_ ? e_->pending() : 0; }
  /// The engine, made on first use; `waiting` (may be null) counts what it has not started.
  progress_engine& get(std::atomic<std::uint64_t>* waiting) {
    if (!e_) e_ = std::make_unique<progress_engine>(waiting);
    return *e_;
  }

 private:
  std::unique_ptr<progress_engine> e_;
};

using task_ptr = std::unique_ptr<progress_engine::task>;

/// A posted operation: `f()` runs it.
template <class F>
struct posted_task final : progress_engine::task {
  explicit posted_task(F f_) : f(std::move(f_)) {}
  void run() override { f(); }
  F f;
};

/// An operation a batch holds: `kind` and `fuse` for an all_reduce that may fuse with its
/// neighbours of the same kind (element type, op, algorithm).
template <class Comm>
struct held_op {
  task_ptr t;
  const void* kind = nullptr;
  std::size_t bytes = 0;
  task_ptr (*fuse)(Comm*, std::vector<task_ptr>&&) = nullptr;
  bool p2p = false;  // a send or receive (p2p_task): runs of them go as one p2p_group_task
};

/// A send or receive, type-erased (its fingerprint says the dtype, count and tag).
struct p2p_op {
  bool send;
  int peer, tag;
  fingerprint fp;
  std::byte* data;  // read only for a send
  std::size_t bytes;
};

/// A send or receive posted in a batch.
template <class Comm>
struct p2p_task final : progress_engine::task {
  p2p_task(Comm* c_, const p2p_op& o) : c(c_), op(o) {}
  void run() override { c->run_p2p(std::span<const p2p_op>(&op, 1)); }
  Comm* c;
  p2p_op op;
};

/// A run of sends and receives posted in a batch, as one; completes each member's request.
template <class Comm>
struct p2p_group_task final : progress_engine::task {
  p2p_group_task(Comm* c_, std::vector<task_ptr>&& m) : c(c_) {
    for (auto& t : m) {
      ops.push_back(static_cast<p2p_task<Comm>&>(*t).op);
      members.push_back(t->state);
    }
  }
  void run() override { c->run_p2p(ops); }
  Comm* c;
  std::vector<p2p_op> ops;
};

/// A run of in-place all_reduces of one kind, as one (`communicator::fused_all_reduce`); the
/// engine completes each member's request.
template <class Comm, class T, class M, class Op, class Algo>
struct fused_task;

/// A posted in-place all_reduce, and how runs of them fuse.
template <class Comm, class T, class M, class Op, class Algo>
struct reduce_task final : progress_engine::task {
  reduce_task(Comm* c_, view<T, M> v_, Op op_, Algo a_) : c(c_), v(v_), op(std::move(op_)), a(std::move(a_)) {}
  void run() override { c->template call<collective::all_reduce>(Comm::in_place_desc(v, op), a); }
  static inline const char kind = 0;  // its address tells the kinds apart
  static task_ptr fuse(Comm* c, std::vector<task_ptr>&& members) {
    return std::make_unique<fused_task<Comm, T, M, Op, Algo>>(c, std::move(members));
  }
  Comm* c;
  view<T, M> v;
  Op op;
  Algo a;
};

template <class Comm, class T, class M, class Op, class Algo>
struct fused_task final : progress_engine::task {
  using member = reduce_task<Comm, T, M, Op, Algo>;
  fused_task(Comm* c_, std::vector<task_ptr>&& m)
      : c(c_), op(static_cast<member&>(*m.front()).op), a(static_cast<member&>(*m.front()).a) {
    for (auto& t : m) {
      parts.push_back(static_cast<member&>(*t).v);
      members.push_back(t->state);
    }
  }
  void run() override { c->fused_all_reduce(std::span<const view<T, M>>(parts), op, a); }
  Comm* c;
  Op op;
  Algo a;
  std::vector<view<T, M>> parts;
};

}  // namespace tutti::detail
