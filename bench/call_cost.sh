#!/usr/bin/env bash
# Instructions per 8-byte shm call at 2 ranks, outside the waiting, for two trees of tutti (old
# and new include directories), counted by callgrind: repeatable whatever else runs. Each tree's
# bench/call_cost.cpp is compiled header-only at -O2 with toolkit::wait_until kept out of line
# (patched into a copy of the headers); callgrind leaves out wait_until and shm's two waiting
# functions (wait_phase, wait_for: they spin before they call it) with --toggle-collect, so
# what remains is the call's own work. Per call = (I(2n) - I(n)) / n, which cancels start-up
# and exit; both ranks are printed (they differ by a few instructions run to run).
# Usage: bench/call_cost.sh <old include dir> <new include dir> <tuttirun> [n] [collectives...]
set -euo pipefail
old=$1 new=$2 tuttirun=$3 n=${4:-500}
shift 3 && (($#)) && shift
collectives=("$@")
((${#collectives[@]})) || collectives=(all_reduce barrier broadcast reduce all_gather)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v valgrind >/dev/null || { echo "call_cost: valgrind not found" >&2; exit 1; }
build() {  # <include dir> <name>
  mkdir -p "$work/$2"
  cp -r "$1/tutti" "$work/$2/"
  sed -i 's/^void wait_until(const wait_context& w/__attribute__((noinline)) void wait_until(const wait_context\& w/' \
    "$work/$2/tutti/transport/toolkit/wait.hpp"
  grep -q 'noinline)) void wait_until' "$work/$2/tutti/transport/toolkit/wait.hpp" ||
    { echo "call_cost: could not keep wait_until out of line in $1" >&2; exit 1; }
  g++ -std=c++20 -O2 -g -DNDEBUG -I "$work/$2" "$here/call_cost.cpp" -o "$work/$2/call_cost" -pthread
}
count() {  # <name> <collective> <calls> -> "I(rank 0) I(rank 1)"
  rm -f "$work"/cg.*
  TUTTI_SHM_SINGLE_COPY=0 "$tuttirun" --nproc-per-node=2 valgrind --tool=callgrind \
    --callgrind-out-file="$work/cg.%q{LOCAL_RANK}" --toggle-collect='tutti::toolkit::wait_until*' \
    --toggle-collect='tutti::shm::wait_phase*' --toggle-collect='tutti::shm::wait_for*' --collect-atstart=yes \
    "$work/$1/call_cost" "$2" "$3" >/dev/null 2>&1
  echo "$(grep -m1 '^totals:' "$work/cg.0" | awk '{print $2}') $(grep -m1 '^totals:' "$work/cg.1" | awk '{print $2}')"
}
build "$old" old
build "$new" new
printf '%-12s %12s %12s %12s %12s %8s\n' collective "old rank 0" "old rank 1" "new rank 0" "new rank 1" "new/old"
for c in "${collectives[@]}"; do
  row=()
  for t in old new; do
    read -r a1 b1 <<<"$(count $t "$c" "$n")"
    read -r a2 b2 <<<"$(count $t "$c" $((2 * n)))"
    row+=($(((a2 - a1) / n)) $(((b2 - b1) / n)))
  done
  ratio=$(awk -v o0="${row[0]}" -v o1="${row[1]}" -v n0="${row[2]}" -v n1="${row[3]}" 'BEGIN {printf "%.3f", (n0 + n1) / (o0 + o1)}')
  printf '%-12s %12d %12d %12d %12d %8s\n' "$c" "${row[@]}" "$ratio"
done
