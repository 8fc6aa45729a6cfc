/// \file
/// A copy of host memory on a thread of its own, so that a schedule can move a rank's own block
/// while its thread moves the peers' through the transport (a gather's root receiving the
/// others' blocks while its own is copied into place). Gloo's rooted collectives get the same
/// overlap from their transport's thread.
#pragma once

#include <cstddef>
#include <cstring>
#include <system_error>
#include <thread>

namespace tutti::detail {

/// Copies `n` bytes from `src` to `dst` on a thread of its own, joined when the copy handle is
/// gone. Where no thread can be had, the copy is done at once. Neither copied nor moved: it is
/// made where it is kept (`auto own = ch.copy_beside(...)`).
class background_copy {
 public:
  background_copy() = default;
  background_copy(void* dst, const void* src, std::size_t n) {
    try {
      t_ = std::thread([dst, src, n] { std::memcpy(dst, src, n); });
    } catch (const std::system_error&) {
      std::memcpy(dst, src, n);
    }
  }
  background_copy(const background_copy&) = delete;
  background_copy& operator=(const background_copy&) = delete;
  ~background_copy() {
    if (t_.joinable()) t_.join();
  }

 private:
  std::thread t_;
};

}  // namespace tutti::detail
