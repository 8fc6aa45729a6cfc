// Which sanitizer this build runs under (GCC says so with __SANITIZE_*__, Clang with
// __has_feature), for tests that allow for its slowdown or cannot measure memory under it.
#pragma once

namespace tutti::test {

#if defined(__has_feature)
#define TUTTI_TEST_HAS_FEATURE(f) __has_feature(f)
#else
#define TUTTI_TEST_HAS_FEATURE(f) 0
#endif
#if defined(__SANITIZE_THREAD__) || TUTTI_TEST_HAS_FEATURE(thread_sanitizer)
inline constexpr bool thread_sanitizer = true;
#else
inline constexpr bool thread_sanitizer = false;
#endif
#if defined(__SANITIZE_ADDRESS__) || TUTTI_TEST_HAS_FEATURE(address_sanitizer)
inline constexpr bool address_sanitizer = true;
#else
inline constexpr bool address_sanitizer = false;
#endif
#undef TUTTI_TEST_HAS_FEATURE

}  // namespace tutti::test
