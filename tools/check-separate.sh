#!/usr/bin/env bash
# Checks the two ways of compiling tutti against each other, quickly (-O0, no CMake):
#   1. header-only: a program using inproc, shm and tcp compiles and links on its own;
#   2. separately compiled: src/definitions.cpp (TUTTI_BUILDING_COMPILED) compiles, the same
#      program compiled with -DTUTTI_SEPARATE_COMPILATION links against it with no symbol missing
#      or defined twice, and defines none of the functions the library holds.
# Usage: tools/check-separate.sh [out-dir]   (default: a temporary directory)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out"
CXX=${CXX:-g++}
flags=(-std=c++20 -O0 -I "$root/include" -DASIO_STANDALONE -Wall -Wextra -Werror=switch)
cat >"$out/user.cpp" <<'CPP'
#include <tutti/tutti.hpp>
#include <tutti/transport/tcp.hpp>
#include <vector>
int main(int argc, char**) {
  if (argc > 1) {  // never run: only compiled and linked
    std::vector<float> v(8);
    auto s = tutti::communicator<tutti::shm>::from_env();
    s.all_reduce(tutti::view(v));
    s.broadcast(tutti::view(v), 0);
    auto t = tutti::communicator<tutti::tcp>::from_env();
    t.all_reduce(tutti::view(v));
    std::vector<float> all(8 * static_cast<std::size_t>(t.size()));
    t.all_gather(tutti::view(v), tutti::view(all));
  }
  tutti::inproc::run(3, [](auto& comm) {
    std::vector<double> v(5, comm.rank());
    comm.all_reduce(tutti::view(v));
    if (v[0] != 3) throw std::runtime_error("wrong sum");
  });
  return 0;
}
CPP
echo "check-separate: header-only"
"$CXX" "${flags[@]}" "$out/user.cpp" -o "$out/header_only" -pthread
"$out/header_only"
echo "check-separate: tutti::compiled's definitions"
"$CXX" "${flags[@]}" -DTUTTI_SEPARATE_COMPILATION -c "$root/src/definitions.cpp" -o "$out/definitions.o"
extra=()
for f in "$root"/src/instances_*.cpp; do
  [[ -e $f ]] || continue
  "$CXX" "${flags[@]}" -DTUTTI_SEPARATE_COMPILATION -c "$f" -o "$out/$(basename "$f" .cpp).o"
  extra+=("$out/$(basename "$f" .cpp).o")
done
echo "check-separate: the program, separately compiled"
"$CXX" "${flags[@]}" -DTUTTI_SEPARATE_COMPILATION -c "$out/user.cpp" -o "$out/user.o"
"$CXX" "$out/user.o" "$out/definitions.o" "${extra[@]}" -o "$out/separate" -pthread
"$out/separate"
# Functions the library defines (strong, T) that the program's object defines too (weak or strong):
# compiled twice, which the separate mode exists to avoid.
nm -C --defined-only "$out/definitions.o" "${extra[@]}" | awk '$2 == "T" || $2 == "W" { $1 = ""; $2 = ""; print substr($0, 3) }' | sort -u >"$out/lib.syms"
nm -C --defined-only "$out/user.o" | awk '$2 ~ /^[TWtw]$/ { $1 = ""; $2 = ""; print substr($0, 3) }' | sort -u >"$out/user.syms"
twice=$(comm -12 "$out/lib.syms" "$out/user.syms" | grep '^tutti::' || true)
echo "check-separate: $(wc -l <"$out/lib.syms") functions in the library; the program compiles $(grep -c '^tutti::' "$out/user.syms" || true) of tutti's itself, $(printf '%s' "$twice" | grep -c . || true) of them also in the library"
printf '%s\n' "$twice" | head -40
echo "check-separate: passed"
