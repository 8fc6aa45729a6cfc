#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test:
#   1. the release build (the default compiler, g++ on Debian) and its suite: the tests over real
#      transports, the examples, tutti-bench, the benchmarks, the header and device checks
#      (tests/CMakeLists.txt's TUTTI_TEST_SET=transports);
#   2. every test but the examples, tutti-bench and MPI's conformance suite under AddressSanitizer +
#      UndefinedBehaviorSanitizer: the unit tests and the failure scenarios run here only, the
#      tests over real transports both here (the suites over processes at 3 and 4 ranks) and in 1
#      (2 and 3 built with clang++ where it is installed);
#   3. the multi-rank thread tests under ThreadSanitizer;
#   4. the wire parsers under libFuzzer, 10 s per target (tests/fuzz; skipped without clang's libFuzzer);
#   5. consumer projects: find_package with components against the installed package and the build
#      tree, add_subdirectory, and pkg-config.
# Each build after the first runs beside the tests before it, at the lowest CPU priority: the
# tests wait as well as compute (deadlines, peers, launchers; about a sixth of the CPU idle), and
# the build takes what they leave. The stage table says what ran beside what.
# Usage: tools/test.sh [--quick]   (--quick: step 1 only, the whole suite)
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
  # A build still running beside a stage that failed: stop it with the script.
  if [[ -n ${beside_pid:-} ]] && kill -0 "$beside_pid" 2>/dev/null; then
    pkill -TERM -P "$beside_pid" 2>/dev/null || true
    kill "$beside_pid" 2>/dev/null || true
  fi
  stage_end
  printf '\n==== stage times (wall) ====\n'
  printf '%s\n' "${stages[@]}"
  printf '%-72s %4d:%02d%s\n' "total" $((SECONDS / 60)) $((SECONDS % 60)) "$( ((status)) && echo "  (failed: exit $status)")"
}
trap stage_table EXIT

step "install dependencies"
tools/install-deps.sh

# The consumer projects: find_package (install, build tree), add_subdirectory, pkg-config. The four
# kinds build side by side (each is mostly one compile or one configure at a time), each into a
# log of its own that is printed when it ends; each check that passed adds a line to build-pkg/passed.
consumer_projects() {
  rm -rf build-pkg && mkdir -p build-pkg
  prefix=$root/build-pkg/prefix
  cmake --install build --prefix "$prefix" >/dev/null
  consumer() { "$@" && echo "$*" >>"$root/build-pkg/passed"; }
  # The mpi component is required where tutti's build found an MPI (it then installs tutti-mpi.pc).
  pcdir=$(dirname "$(find "$prefix" -name tutti.pc)")
  want_mpi=OFF
  [[ -e $pcdir/tutti-mpi.pc ]] && want_mpi=ON
  local kinds=(find_package build_tree subdirectory pkg_config) pids=() kind status=0
  for kind in "${kinds[@]}"; do
    (set -e; "consumers_$kind") >"build-pkg/$kind.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!kinds[@]}"; do
    if wait "${pids[$i]}"; then cat "build-pkg/${kinds[$i]}.log"; else
      status=1
      cat "build-pkg/${kinds[$i]}.log"
      echo "consumer projects: ${kinds[$i]} failed" >&2
    fi
  done
  ((status == 0)) || return 1
  echo "consumer projects: $(wc -l <build-pkg/passed) passed, 0 failed"
}
# 1. find_package(tutti CONFIG REQUIRED COMPONENTS tcp [mpi]) against the install.
consumers_find_package() {
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
}
# 2. The build tree's export: find_package(tutti CONFIG PATHS build), nothing installed.
consumers_build_tree() {
  cmake -S tests/package -B build-pkg/tree -G Ninja -DTUTTI_BUILD_TREE="$root/build" >/dev/null
  cmake --build build-pkg/tree --target consumer
  consumer ./build-pkg/tree/consumer
}
# 3. add_subdirectory of the source tree.
consumers_subdirectory() {
  cmake -S tests/package/subdir -B build-pkg/subdir -G Ninja -DTUTTI_SOURCE_DIR="$root" >/dev/null
  cmake --build build-pkg/subdir
  consumer ./build-pkg/subdir/consumer
  consumer ./build-pkg/subdir/consumer_tcp
}
# 4. pkg-config, no CMake: tutti.pc and tutti-tcp.pc (and tutti-mpi.pc: compiled and linked).
consumers_pkg_config() {
  export PKG_CONFIG_PATH=$pcdir
  c++ -std=c++20 tests/package/main.cpp $(pkg-config --cflags --libs tutti) -o build-pkg/pc_consumer
  consumer ./build-pkg/pc_consumer
  c++ -std=c++20 tests/package/main_tcp.cpp $(pkg-config --cflags --libs tutti-tcp) -o build-pkg/pc_consumer_tcp
  consumer ./build-pkg/pc_consumer_tcp
  if [[ $want_mpi == ON ]]; then
    consumer c++ -std=c++20 tests/package/main_mpi.cpp $(pkg-config --cflags --libs tutti-mpi) -o build-pkg/pc_consumer_mpi
  fi
}

quick=false
[[ ${1:-} == --quick ]] && quick=true

# A build beside the tests: `beside NAME FUNCTION` runs FUNCTION in the background, its output kept
# in build-logs/NAME.log; `await` waits for it, prints that output and stops here if it failed.
# `low_priority` (in FUNCTION) puts what follows at the lowest CPU priority.
mkdir -p build-logs
beside_pid="" beside_name=""
beside() {
  beside_name=$1
  ("$2") >"build-logs/$1.log" 2>&1 &
  beside_pid=$!
}
low_priority() { renice -n 19 -p "$BASHPID" >/dev/null || true; }
await() {
  local status=0
  wait "$beside_pid" || status=$?
  beside_pid=""
  printf '\n---- %s (run beside the stage before) ----\n' "$beside_name"
  cat "build-logs/$beside_name.log"
  if ((status)); then
    echo "$beside_name failed (exit $status)" >&2
    exit "$status"
  fi
}

# The release build at -O1: the library's code (tutti::compiled, which every test program links),
# the tools and the examples optimised, with the optimiser's view of the code (inlining, undefined
# behaviour assumed away), in about three quarters of -O2's compile time (the custom transport
# example, with the whole conformance suite: 73 s of CPU against 104; CMake's Release is -O3, a
# sixth more again). The test programs at -Og (TUTTI_TEST_OPTIMIZE, tests/CMakeLists.txt): -O1
# without the passes that hinder debugging, in about 70 % of its compile time.
# tutti-bench and the benchmarks at -O0, since CI checks their results, not their speed:
# their tests run for a second or two each, and -O0 compiles them in about 60 % of -O1's time
# (tutti-bench's over_mpi.cpp: 47 s of CPU against 80). The CUDA sources at -O0 too, host and
# device code: there is no GPU here, so CI checks that they compile and that their tests skip
# cleanly (tools/gpu-check.sh builds them optimised on the GPU machine); nvcc's host compile of
# the CUDA demo took 13.6 s of CPU at -O0 against 28 at -O3, and the device side at -O0 a tenth
# less of a test file's 46 s.
test_set=transports
$quick && test_set=all
step "build (release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DCMAKE_CUDA_FLAGS_RELEASE="-O0 -DNDEBUG -Xcicc -O0 -Xptxas -O0" -DTUTTI_BENCH_OPTIMIZE=-O0 \
  -DTUTTI_TEST_OPTIMIZE=-Og -DTUTTI_TEST_SET=$test_set >/dev/null
cmake --build build -j "$jobs"
release_tests() {
  # One test more than the cores: the release suite waits more than it computes (at -j2 on this
  # 2-core machine its tests kept 0.94 cores busy on average: deadlines, peers, launchers), and
  # -j3 took 202 s of wall time where -j2 took 262.
  ctest --test-dir build --output-on-failure -j "$((jobs + 1))" --timeout 600
}
if $quick; then
  step "test (release)"
  release_tests
  exit 0
fi

# The sanitizer builds compile at -O0 with line tables only (-g1): enough for their reports' file
# and line, and about 2.5x quicker to build than -O1 -g (the ASan build: 7 min instead of 19 on
# 2 cores), for about 50 s more of test time. They use clang++ where it is installed (the fuzz
# stage needs it anyway): it compiles this code at -O0 in about half of g++'s time (the ASan
# build: 968 s of compile jobs against 1,895; the shm conformance program 55 s of CPU against
# 128), its -O0 code runs the ASan suite about 1.1x slower, and -O1 would cost 4x the compile
# time. The release build stays g++'s, so that both compilers check the code.
# They link with lld where it is installed: a sanitized program's link took 0.9 s of wall time
# against GNU ld's 3.4 (the tcp conformance program under ASan), and the ASan build links about
# 40 programs.
sanitizer_flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DTUTTI_BUILD_BENCH=OFF)
command -v clang++ >/dev/null && sanitizer_flags+=(-DCMAKE_CXX_COMPILER=clang++)
command -v ld.lld >/dev/null && sanitizer_flags+=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld)
# The examples run in the release suite; built again here they cost about 2.5 of CI's 30 minutes.
cmake -S . -B build-asan -G Ninja "${sanitizer_flags[@]}" -DTUTTI_SANITIZE=address,undefined -DTUTTI_BUILD_EXAMPLES=OFF >/dev/null
asan_build() {
  low_priority
  cmake --build build-asan -j "$jobs"
}
# The ThreadSanitizer stage builds only tutti_tests' files with multi-rank suites, which it runs.
cmake -S . -B build-tsan -G Ninja "${sanitizer_flags[@]}" -DTUTTI_SANITIZE=thread -DTUTTI_BUILD_EXAMPLES=OFF \
  -DTUTTI_TEST_SET=threads >/dev/null
tsan_build() {
  low_priority
  cmake --build build-tsan -j "$jobs" --target tutti_tests
}

step "test (release); beside it, the AddressSanitizer + UBSan build"
beside "build-asan" asan_build
release_tests
step "build under AddressSanitizer + UndefinedBehaviorSanitizer (what the tests left of it)"
await

step "test under AddressSanitizer + UndefinedBehaviorSanitizer; beside it, the ThreadSanitizer build"
beside "build-tsan" tsan_build
# One test more than the cores, as in the release stage: most of the longest tests here wait
# (failure scenarios and their deadlines, network namespaces, the launcher's restarts).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$((jobs + 1))" --timeout 900
step "build the multi-rank thread tests under ThreadSanitizer (what the tests left of it)"
await

# The fuzzers run for a fixed time, so at full priority (they take one core for 20 s from the
# tests); the consumer projects compile, at the lowest.
fuzz_and_consumers() {
  echo "==== fuzz the wire parsers (libFuzzer + ASan/UBSan, 10 s per target) ===="
  tests/fuzz/run.sh build 10
  echo "==== consumer projects: find_package (install, build tree), add_subdirectory, pkg-config ===="
  low_priority
  consumer_projects
}
step "multi-rank thread tests under ThreadSanitizer; beside them, the fuzzers and the consumer projects"
beside "fuzz-and-consumers" fuzz_and_consumers
# Huge pages for the shadow memory: ThreadSanitizer maps its shadow in 4 KiB pages by default, and
# the tests' 16 MiB buffers, freed and allocated again, fault it in page by page (each fault a
# copy-on-write of the zero page with a TLB shootdown). With 2 MiB pages the case with the
# 16 MiB v-collectives took 1:43 alone instead of 8:06, and the stage 3:40 instead of 6:32-10:06
# (where that case once passed the suite's 300 s hang limit under -j2).
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:no_huge_pages_for_shadow=0 \
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L multirank --timeout 900
step "fuzz the wire parsers and the consumer projects (what the tests left of them)"
await

stage_end
echo
echo "all tests passed"
