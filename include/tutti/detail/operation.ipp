/// \file
/// Definitions for tutti/detail/operation.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <chrono>
#include <thread>
#include <utility>

#include "tutti/detail/operation.hpp"

namespace tutti::detail {

TUTTI_DECL void completion_signal::notify() {
  if (waiters.load(std::memory_order_seq_cst) == 0) return;
  {
    std::lock_guard lk(mu);
    ++epoch;
  }
  cv.notify_all();
}

TUTTI_DECL void complete(operation_state& s, std::exception_ptr e, bool quiet) {
  s.error = std::move(e);
  s.done.store(true, std::memory_order_seq_cst);
  s.done.notify_all();
  if (!quiet) completion_signal::get().notify();
}

TUTTI_DECL void await(operation_state& s) {
  if (s.poll) {
    s.awaited = true;
    for (int i = 0; !s.done.load(std::memory_order_acquire); ++i) {
      s.poll(s);
      if (s.done.load(std::memory_order_acquire)) break;
      if (i > 2000) std::this_thread::sleep_for(std::chrono::microseconds(20));
      else if (i > 200) std::this_thread::yield();
    }
    return;
  }
  while (!s.done.load(std::memory_order_acquire)) s.done.wait(false, std::memory_order_acquire);
}

}  // namespace tutti::detail
