/// \file
/// Definitions for tutti/detail/futex.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

#include "tutti/detail/futex.hpp"

namespace tutti::detail {

TUTTI_DECL void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                           std::chrono::nanoseconds timeout) noexcept {
  timespec ts{static_cast<time_t>(timeout.count() / 1'000'000'000),
              static_cast<long>(timeout.count() % 1'000'000'000)};
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

TUTTI_DECL void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace tutti::detail
