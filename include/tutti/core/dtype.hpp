/// \file
/// Element-type identity: a stable id and a readable name for every element type, so a rank can
/// tell another "you passed int32, I passed float" instead of reducing garbage.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/float16.hpp"

namespace tutti {

namespace detail {
/// FNV-1a, used for ids that must agree across processes built from one binary.
constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}
constexpr std::uint64_t hash_combine(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}
}  // namespace detail

/// Identity of an element type on the wire.
struct dtype {
  std::uint32_t id = 0;
  std::uint32_t size = 0;
};

namespace detail {
template <class T>
struct builtin_dtype : std::integral_constant<std::uint32_t, 0> {};
#define TUTTI_DTYPE(T, N) \
  template <>             \
  struct builtin_dtype<T> : std::integral_constant<std::uint32_t, N> {};
TUTTI_DTYPE(std::int8_t, 1)
TUTTI_DTYPE(std::uint8_t, 2)
TUTTI_DTYPE(std::int16_t, 3)
TUTTI_DTYPE(std::uint16_t, 4)
TUTTI_DTYPE(std::int32_t, 5)
TUTTI_DTYPE(std::uint32_t, 6)
TUTTI_DTYPE(std::int64_t, 7)
TUTTI_DTYPE(std::uint64_t, 8)
TUTTI_DTYPE(float, 9)
TUTTI_DTYPE(double, 10)
TUTTI_DTYPE(float16, 11)
TUTTI_DTYPE(bfloat16, 12)
TUTTI_DTYPE(char, 13)
TUTTI_DTYPE(bool, 14)
TUTTI_DTYPE(long double, 15)
#undef TUTTI_DTYPE
// long long / long are distinct types on some ABIs; map whichever is not int64_t.
template <>
struct builtin_dtype<std::conditional_t<std::is_same_v<long, std::int64_t>, long long, long>>
    : std::integral_constant<std::uint32_t, 16> {};
template <>
struct builtin_dtype<std::conditional_t<std::is_same_v<unsigned long, std::uint64_t>,
                                        unsigned long long, unsigned long>>
    : std::integral_constant<std::uint32_t, 17> {};
}  // namespace detail

/// The dtype of `T`. Built-in types have fixed ids; any other trivially copyable type gets a
/// hash of its type name and size (the same in every process built from the same program).
template <class T>
dtype dtype_of() noexcept {
  using U = std::remove_cv_t<T>;
  constexpr std::uint32_t b = detail::builtin_dtype<U>::value;
  if constexpr (b != 0) {
    return {b, sizeof(U)};
  } else {
    static const std::uint32_t h =
        static_cast<std::uint32_t>(detail::fnv1a(typeid(U).name()) | 0x80000000u);
    return {h, sizeof(U)};
  }
}

namespace detail {
/// The name of a built-in dtype id, or null for a user type (async-signal-safe).
constexpr const char* builtin_dtype_name(std::uint32_t id) noexcept {
  constexpr const char* names[] = {"?",       "int8",   "uint8",   "int16",    "uint16",
                                   "int32",   "uint32", "int64",   "uint64",   "float",
                                   "float64", "float16", "bfloat16", "char",   "bool",
                                   "float128", "longlong", "ulonglong"};
  return id < std::size(names) ? names[id] : nullptr;
}
}  // namespace detail

/// A readable name for a dtype (for error messages).
std::string dtype_name(dtype d);

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/core/dtype.ipp"
#endif
