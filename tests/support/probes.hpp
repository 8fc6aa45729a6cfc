// Transports the compile-time tests ask about but never make (declarations only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <tutti/algorithm/algorithm.hpp>
#include <tutti/transport/capabilities.hpp>

namespace tutti::test {

/// A plain point-to-point transport with shared windows, and no tuned table.
struct window_probe : detail::probe_transport {
  window_probe sub(std::span<const int>, std::uint64_t) const;
  bool has_window() const;
  std::byte* window(int) const;
  std::size_t window_bytes() const;
  std::uint64_t phase() const;
  void post(std::uint64_t, const fingerprint&);
  void wait_phase(int, std::uint64_t, const fingerprint&, bool, const wait_context&);
  void wait_all(std::uint64_t, const fingerprint&, bool, const wait_context&);
};

}  // namespace tutti::test
