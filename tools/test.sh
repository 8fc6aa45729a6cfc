#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test:
#   1. the whole suite (ctest), release build (the default compiler, g++ on Debian);
#   2. the whole suite but the examples again under AddressSanitizer + UndefinedBehaviorSanitizer
#      (2 and 3 built with clang++ where it is installed);
#   3. the multi-rank thread tests under ThreadSanitizer;
#   4. the wire parsers under libFuzzer, 10 s per target (tests/fuzz; skipped without clang's libFuzzer);
#   5. consumer projects: find_package with components against the installed package and the build
#      tree, add_subdirectory, and pkg-config.
# Usage: tools/test.sh [--quick]   (--quick: step 1 only)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc 2>/dev/null || echo 2)

# Each stage's wall time, printed as a table at the end (and on failure, up to the stage that failed).
stages=() stage_start=$SECONDS stage_name=""
step() {
  stage_end
  stage_name=$*
  stage_start=$SECONDS
  printf '\n==== %s ====\n' "$*"
}
stage_end() {
  [[ -n $stage_name ]] && stages+=("$(printf '%-72s %4d:%02d' "$stage_name" $(((SECONDS - stage_start) / 60)) $(((SECONDS - stage_start) % 60)))")
  stage_name=""
}
stage_table() {
  local status=$?
  stage_end
  printf '\n==== stage times (wall) ====\n'
  printf '%s\n' "${stages[@]}"
  printf '%-72s %4d:%02d%s\n' "total" $((SECONDS / 60)) $((SECONDS % 60)) "$( ((status)) && echo "  (failed: exit $status)")"
}
trap stage_table EXIT

step "install dependencies"
tools/install-deps.sh

# The release build at -O2 (CMake's Release is -O3: the same code paths, a sixth more compile
# time); tutti-bench and the benchmarks at -O0, since CI checks their results, not their speed:
# their tests run for a second or two each, and -O0 compiles them in about 60 % of -O1's time
# (tutti-bench's over_mpi.cpp: 47 s of CPU against 80).
step "build (release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DTUTTI_BENCH_OPTIMIZE=-O0 >/dev/null
cmake --build build -j "$jobs"
step "test (release)"
# One test more than the cores: the release suite waits more than it computes (at -j2 on this
# 2-core machine its tests kept 0.94 cores busy on average: deadlines, peers, launchers), and
# -j3 took 202 s of wall time where -j2 took 262.
ctest --test-dir build --output-on-failure -j "$((jobs + 1))" --timeout 600

[[ ${1:-} == --quick ]] && exit 0

# The sanitizer builds compile at -O0 with line tables only (-g1): enough for their reports' file
# and line, and about 2.5x quicker to build than -O1 -g (the ASan build: 7 min instead of 19 on
# 2 cores), for about 50 s more of test time. They use clang++ where it is installed (the fuzz
# stage needs it anyway): it compiles this code at -O0 in about half of g++'s time (the ASan
# build: 968 s of compile jobs against 1,895; the shm conformance program 55 s of CPU against
# 128), its -O0 code runs the ASan suite about 1.1x slower, and -O1 would cost 4x the compile
# time. The release build stays g++'s, so that both compilers check the code.
sanitizer_flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DTUTTI_BUILD_BENCH=OFF)
command -v clang++ >/dev/null && sanitizer_flags+=(-DCMAKE_CXX_COMPILER=clang++)

step "build under AddressSanitizer + UndefinedBehaviorSanitizer"
# The examples run in the release suite; built again here they cost about 2.5 of CI's 30 minutes.
cmake -S . -B build-asan -G Ninja "${sanitizer_flags[@]}" -DTUTTI_SANITIZE=address,undefined -DTUTTI_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-asan -j "$jobs"
step "test under AddressSanitizer + UndefinedBehaviorSanitizer"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900

step "build the multi-rank thread tests under ThreadSanitizer"
cmake -S . -B build-tsan -G Ninja "${sanitizer_flags[@]}" -DTUTTI_SANITIZE=thread -DTUTTI_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-tsan -j "$jobs" --target tutti_tests
step "multi-rank thread tests under ThreadSanitizer"
# Huge pages for the shadow memory: ThreadSanitizer maps its shadow in 4 KiB pages by default, and
# the tests' 16 MiB buffers, freed and allocated again, fault it in page by page (each fault a
# copy-on-write of the zero page with a TLB shootdown). With 2 MiB pages the case with the
# 16 MiB v-collectives took 1:43 alone instead of 8:06, and the stage 3:40 instead of 6:32-10:06
# (where that case once passed the suite's 300 s hang limit under -j2).
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:no_huge_pages_for_shadow=0 \
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L multirank --timeout 900

step "fuzz the wire parsers (libFuzzer + ASan/UBSan, 10 s per target)"
tests/fuzz/run.sh build 10

step "consumer projects: find_package (install, build tree), add_subdirectory, pkg-config"
rm -rf build-pkg && mkdir -p build-pkg
prefix=$root/build-pkg/prefix
cmake --install build --prefix "$prefix" >/dev/null
consumers=0
consumer() { "$@"; consumers=$((consumers + 1)); }
# The mpi component is required where tutti's build found an MPI (it then installs tutti-mpi.pc).
pcdir=$(dirname "$(find "$prefix" -name tutti.pc)")
want_mpi=OFF
[[ -e $pcdir/tutti-mpi.pc ]] && want_mpi=ON
# 1. find_package(tutti CONFIG REQUIRED COMPONENTS tcp [mpi]) against the install.
cmake -S tests/package -B build-pkg/find -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DTUTTI_WANT_MPI=$want_mpi \
  -DTUTTI_WANT_COMPILED=ON >/dev/null
cmake --build build-pkg/find
consumer ./build-pkg/find/consumer
consumer ./build-pkg/find/consumer_tcp
consumer ./build-pkg/find/consumer_compiled  # the separately compiled mode: tutti::compiled installed
if [[ $want_mpi == ON ]] && command -v mpiexec >/dev/null; then
  mpi_flags=()
  mpiexec --version 2>/dev/null | grep -q 'Open MPI\|OpenRTE' &&
    mpi_flags=(--allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
  consumer mpiexec -n 2 "${mpi_flags[@]}" ./build-pkg/find/consumer_mpi
fi
#    A required component that cannot be had fails the configure, naming it and why.
if cmake -S tests/package -B build-pkg/missing -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
     -DTUTTI_EXTRA_COMPONENT=nosuch >build-pkg/missing.log 2>&1; then
  echo "consumer: find_package(tutti COMPONENTS nosuch) succeeded" >&2
  exit 1
fi
consumer grep -q 'nosuch: no such component' build-pkg/missing.log
# 2. The build tree's export: find_package(tutti CONFIG PATHS build), nothing installed.
cmake -S tests/package -B build-pkg/tree -G Ninja -DTUTTI_BUILD_TREE="$root/build" >/dev/null
cmake --build build-pkg/tree --target consumer
consumer ./build-pkg/tree/consumer
# 3. add_subdirectory of the source tree.
cmake -S tests/package/subdir -B build-pkg/subdir -G Ninja -DTUTTI_SOURCE_DIR="$root" >/dev/null
cmake --build build-pkg/subdir
consumer ./build-pkg/subdir/consumer
consumer ./build-pkg/subdir/consumer_tcp
# 4. pkg-config, no CMake: tutti.pc and tutti-tcp.pc (and tutti-mpi.pc: compiled and linked).
export PKG_CONFIG_PATH=$pcdir
c++ -std=c++20 tests/package/main.cpp $(pkg-config --cflags --libs tutti) -o build-pkg/pc_consumer
consumer ./build-pkg/pc_consumer
c++ -std=c++20 tests/package/main_tcp.cpp $(pkg-config --cflags --libs tutti-tcp) -o build-pkg/pc_consumer_tcp
consumer ./build-pkg/pc_consumer_tcp
if [[ $want_mpi == ON ]]; then
  consumer c++ -std=c++20 tests/package/main_mpi.cpp $(pkg-config --cflags --libs tutti-mpi) -o build-pkg/pc_consumer_mpi
fi
unset PKG_CONFIG_PATH
echo "consumer projects: $consumers passed, 0 failed"

stage_end
echo
echo "all tests passed"
