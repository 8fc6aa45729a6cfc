/// \file
/// `copy_host`: memcpy, with the sizes of the smallest messages copied inline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tutti::detail {

/// `n` bytes from `src` to `dst` (not overlapping). From 4 to 16 bytes, two loads and two
/// stores that may overlap, inline: the C library's memcpy for 8 bytes is a call through its
/// resolver's jump and a dispatch on the size, several times the copy's own work, on every
/// small message a collective sends or receives.
inline void copy_host(void* dst, const void* src, std::size_t n) noexcept {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n - 4 <= 12) {
    if (n >= 8) {
      std::uint64_t a, b;
      std::memcpy(&a, s, 8);
      std::memcpy(&b, s + n - 8, 8);
      std::memcpy(d, &a, 8);
      std::memcpy(d + n - 8, &b, 8);
    } else {
      std::uint32_t a, b;
      std::memcpy(&a, s, 4);
      std::memcpy(&b, s + n - 4, 4);
      std::memcpy(d, &a, 4);
      std::memcpy(d + n - 4, &b, 4);
    }
    return;
  }
  std::memcpy(d, s, n);
}

}  // namespace tutti::detail
