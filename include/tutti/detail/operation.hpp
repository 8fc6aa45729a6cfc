/// \file
/// What a `tutti::request` and whoever completes its operation share: the operation's state,
/// how to complete it and how to wait for it. An operation runs either on a progress engine's
/// thread, which completes its state (`complete`), or nowhere on the host (device work
/// enqueued on a stream), in which case its state carries a `poll` that whoever waits calls to
/// find out, and that completes the state itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>

#include "tutti/core/p2p.hpp"
#include "tutti/detail/attributes.hpp"

namespace tutti::detail {

/// What a request and the engine that runs its operation share.
struct operation_state {
  std::atomic<bool> done{false};
  std::exception_ptr error;  // written before `done` is set
  /// Held in an open batch (`communicator::fuse`): nothing runs it until the batch ends.
  std::atomic<bool> held{false};
  /// Set for an operation no thread runs (device work on a stream): finds out whether it is
  /// complete and, if so (or once its deadline has passed), completes `*this`. Called only by
  /// the request's holder (`wait`, `test`, `wait_any`, its destructor), never concurrently.
  std::function<void(operation_state&)> poll;
  /// A receive's: what it got (written before `done` is set).
  recv_status status;
  /// Set by `await` before it polls: the holder is blocked in this operation (a wait, not a
  /// test), so a transport may tell its peers so (shm's wait-cycle check).
  bool awaited = false;
};

/// Wakes the `wait_any`s in progress when any operation of the process completes (requests of
/// different communicators may be waited on together). Costs a completion nothing while no
/// `wait_any` waits.
struct completion_signal {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t epoch = 0;
  std::atomic<int> waiters{0};
  static completion_signal& get() {
    static completion_signal s;
    return s;
  }
  void notify();
};

/// Marks `s` complete; wakes its waiter (`await`) and, unless `quiet` (the caller notifies the
/// completion signal once for many), the `wait_any`s.
TUTTI_DECL void complete(operation_state& s, std::exception_ptr e, bool quiet = false);

/// Waits until `s` is done: a futex on its flag (no spinning, no shared lock), or, for an
/// operation that completes when polled, polling it (spinning briefly, then yielding, then
/// sleeping 20 µs between polls).
TUTTI_DECL void await(operation_state& s);

}  // namespace tutti::detail

#if defined(TUTTI_DEFINITIONS)
#include "tutti/detail/operation.ipp"
#endif
