#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>

namespace tutti::detail {

/// A growable, 64-byte aligned byte buffer that keeps its memory between calls: the scratch an
/// algorithm needs (a reduction accumulator on a tree's inner node, a ring's double buffer, a
/// rotation for a non-zero root) is allocated once per communicator, not per call.
class scratch_buffer {
 public:
  std::byte* reserve(std::size_t bytes) {
    if (bytes > capacity_) {
      const std::size_t cap = (std::max(bytes, capacity_ + capacity_ / 2) + 63) & ~std::size_t{63};
      void* p = std::aligned_alloc(64, cap);
      if (!p) throw std::bad_alloc();
      data_.reset(static_cast<std::byte*>(p));
      capacity_ = cap;
    }
    return data_.get();
  }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte, free_deleter> data_;
  std::size_t capacity_ = 0;
};

/// The scratch slots of one communicator.
struct scratch_pool {
  static constexpr int slots = 4;
  scratch_buffer slot[slots];
};

}  // namespace tutti::detail
