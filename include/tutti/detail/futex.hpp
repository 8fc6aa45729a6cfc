#pragma once

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

}  // namespace tutti::detail

#if defined(TUTTI_DEFINITIONS)
#include "tutti/detail/futex.ipp"
#endif
