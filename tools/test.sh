#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test:
#   1. the whole suite (ctest), release build;
#   2. the whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. the multi-rank thread tests under ThreadSanitizer;
#   4. the wire parsers under libFuzzer, 25 s per target (tests/fuzz; skipped without clang's libFuzzer);
#   5. a consumer project against the installed package (find_package) and via add_subdirectory.
# Usage: tools/test.sh [--quick]   (--quick: step 1 only)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc 2>/dev/null || echo 2)

tools/install-deps.sh

step() { printf '\n==== %s ====\n' "$*"; }

step "build and test (release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600

[[ ${1:-} == --quick ]] && exit 0

# The sanitizer builds compile at -O0 with line tables only (-g1): enough for their reports' file
# and line, and about 2.5x quicker to build than -O1 -g (the ASan build: 7 min instead of 19 on
# 2 cores), for about 50 s more of test time.
sanitizer_flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DTUTTI_BUILD_BENCH=OFF)

step "test under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -G Ninja "${sanitizer_flags[@]}" -DTUTTI_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900

step "multi-rank thread tests under ThreadSanitizer"
cmake -S . -B build-tsan -G Ninja "${sanitizer_flags[@]}" -DTUTTI_SANITIZE=thread -DTUTTI_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-tsan -j "$jobs" --target tutti_tests
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L multirank --timeout 900

step "fuzz the wire parsers (libFuzzer + ASan/UBSan, 25 s per target)"
tests/fuzz/run.sh build 25

step "consumer project: find_package and add_subdirectory"
rm -rf build-pkg && mkdir -p build-pkg
cmake --install build --prefix "$root/build-pkg/prefix" >/dev/null
cmake -S tests/package -B build-pkg/find -G Ninja -DCMAKE_PREFIX_PATH="$root/build-pkg/prefix" >/dev/null
cmake --build build-pkg/find
./build-pkg/find/consumer
./build-pkg/find/consumer_tcp
cmake -S tests/package/subdir -B build-pkg/subdir -G Ninja -DTUTTI_SOURCE_DIR="$root" >/dev/null
cmake --build build-pkg/subdir
./build-pkg/subdir/consumer
./build-pkg/subdir/consumer_tcp
echo "consumer project: 4 passed, 0 failed"

step "all tests passed"
