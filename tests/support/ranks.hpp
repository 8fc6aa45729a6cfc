// Test fixtures: run one test body on N ranks.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <tutti/tutti.hpp>
#include <vector>

namespace tutti::test {

/// Runs `body(comm)` on n threads over inproc (the thread flavour of a multi-rank test). The
/// process flavour over shm reuses the same bodies (tests/multiproc).
template <class Algorithm = algo::automatic, class Body>
void run_ranks(int n, Body&& body) {
  inproc::run<Algorithm>(n, std::forward<Body>(body));
}

/// A user struct and a user op on it, used wherever the suite needs "a user op on a user type".
struct vec3 {
  float x, y, z;
  friend bool operator==(const vec3&, const vec3&) = default;
};
struct vec3_max_abs {
  vec3 operator()(vec3 a, vec3 b) const {
    // The larger magnitude; on a tie the larger value, so the op is commutative and associative.
    auto m = [](float u, float v) {
      const float au = u < 0 ? -u : u, av = v < 0 ? -v : v;
      return au != av ? (au < av ? v : u) : (u < v ? v : u);
    };
    return {m(a.x, b.x), m(a.y, b.y), m(a.z, b.z)};
  }
};
inline doctest::String toString(const vec3& v) {
  return ("{" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + "}").c_str();
}

/// Deterministic small values for (rank, index): exact in every tested type (bfloat16 included)
/// even after summing over 9 ranks, so references compare with ==.
template <class T>
T value(int rank, std::size_t i) {
  const int v = static_cast<int>((static_cast<std::size_t>(rank) * 7 + i * 13) % 11) - 5;
  if constexpr (std::is_same_v<T, vec3>) return vec3{float(v), float(-v * 2), float(rank) - float(i % 3)};
  else return static_cast<T>(static_cast<float>(v));
}

}  // namespace tutti::test
