#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "tutti/detail/attributes.hpp"

namespace tutti::detail {

/// Sleeps while `*word == expected`, at most `timeout`. Process-shared (no FUTEX_PRIVATE_FLAG):
/// the word lives in memory mapped by several processes.
TUTTI_DECL void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                           std::chrono::nanoseconds timeout) noexcept;

TUTTI_DECL void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept;

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// A lock for short sections that few threads share: a lock and an unlock are one atomic
/// exchange and one store (an uncontended std::mutex pair costs 13 ns on this project's test
/// machine against 6, and shm's point-to-point fast path takes it twice per message). A thread
/// that finds it held spins a little, then yields its core to the holder.
class spin_mutex {
 public:
  void lock() noexcept {
    int spins = 0;
    while (held_.exchange(true, std::memory_order_acquire))
      while (held_.load(std::memory_order_relaxed))
        if (++spins < 1024) cpu_relax();
        else ::sched_yield();
  }
  bool try_lock() noexcept {
    return !held_.load(std::memory_order_relaxed) && !held_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

}  // namespace tutti::detail

#if defined(TUTTI_DEFINITIONS)
#include "tutti/detail/futex.ipp"
#endif
