#!/usr/bin/env bash
# How long a user's translation unit that includes tutti takes to compile, and how much memory,
# as a ratio to a yardstick TU compiled in the same run (bench/compile_time/yardstick.cpp: all of
# <bits/stdc++.h>, one regex, one sort), and against the budgets of the issue "a lighter core".
#
#   bench/compile_time.sh [include-dir ...]
#
# Compiles each TU of bench/compile_time/ (the umbrella header alone; one all_reduce over shm,
# automatic and ring; the same over tcp; every collective over shm), header-only and (X+sep) with
# -DTUTTI_SEPARATE_COMPILATION, with
# `$CXX -std=c++20 $OPT -c` against each include directory given (default: this checkout's
# include/), alternating TUs and directories round after round, $RUNS rounds (default 3), and
# prints per TU the best user+sys CPU seconds, its ratio to the yardstick's best, and the best
# peak RSS: CPU time, not wall time, since the machine may be shared; noise only adds, so the best
# is the figure. Give two include directories (an older checkout's, this one's) to compare them
# side by side. With one include directory, the budgets are checked for it (exit status 1 if one
# is missed).
# Environment: CXX (g++), OPT (-O2), RUNS (3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
CXX=${CXX:-g++}
OPT=${OPT:--O2}
RUNS=${RUNS:-3}
[[ $# -eq 0 ]] && set -- "$root/include"
command -v /usr/bin/time >/dev/null || { echo "compile_time.sh: needs /usr/bin/time (Debian: time)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A TU named X+sep is X compiled with -DTUTTI_SEPARATE_COMPILATION: what a program that links
# tutti::compiled compiles (the library itself is built once, not counted).
tus=(yardstick include_only one_all_reduce one_all_reduce_ring one_all_reduce_tcp all_collectives
     include_only+sep one_all_reduce+sep one_all_reduce_tcp+sep all_collectives+sep)
declare -A best_cpu=() best_rss=()
compile() {  # compile TU against include dir index i; keep the best CPU and RSS
  local tu=$1 i=$2 inc=$3 src=${1%+sep} mode=()
  [[ $tu == *+sep ]] && mode=(-DTUTTI_SEPARATE_COMPILATION)
  if ! /usr/bin/time -f '%U %S %M' -o "$tmp/time" "$CXX" -std=c++20 $OPT "${mode[@]}" -I "$inc" -c "$here/compile_time/$src.cpp" \
         -o "$tmp/out.o" 2>"$tmp/err"; then
    echo "compile_time.sh: $tu failed against $inc:" >&2
    head -20 "$tmp/err" >&2
    exit 1
  fi
  local u s m cpu key="$tu/$i"
  read -r u s m <"$tmp/time"
  cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
  if [[ -z ${best_cpu[$key]:-} ]] || awk -v a="$cpu" -v b="${best_cpu[$key]}" 'BEGIN { exit !(a < b) }'; then best_cpu[$key]=$cpu; fi
  if [[ -z ${best_rss[$key]:-} ]] || ((m < best_rss[$key])); then best_rss[$key]=$m; fi
}
for ((run = 0; run < RUNS; run++)); do
  for tu in "${tus[@]}"; do
    if [[ $tu == yardstick ]]; then compile yardstick 0 "$root/include"; continue; fi
    for i in $(seq 0 $(($# - 1))); do compile "$tu" "$i" "${*:$((i + 1)):1}"; done
  done
done
yard=${best_cpu[yardstick/0]}
echo "# $CXX $($CXX -dumpfullversion) -std=c++20 $OPT, best of $RUNS rounds (CPU s = user + sys; x = ratio to the yardstick; peak RSS)"
printf '%-20s' "TU"
for inc in "$@"; do printf ' | %-30s' "$(basename "$(dirname "$inc")")/$(basename "$inc")"; done
printf '\n'
printf '%-20s | %7s s  1.00x %6d MB\n' yardstick "$yard" $((best_rss[yardstick/0] / 1024))
for tu in "${tus[@]:1}"; do
  printf '%-20s' "$tu"
  for i in $(seq 0 $(($# - 1))); do
    printf ' | %7s s %5sx %6d MB  ' "${best_cpu[$tu/$i]}" \
      "$(awk -v a="${best_cpu[$tu/$i]}" -v y="$yard" 'BEGIN { printf "%.2f", a / y }')" $((best_rss[$tu/$i] / 1024))
  done
  printf '\n'
done
[[ $# -eq 1 ]] || exit 0
# The budgets: ratio to the yardstick and peak RSS in MB (0: no memory budget); +sep: separately compiled.
fails=0
budget() {
  local tu=$1 ratio=$2 mb=$3 r m
  r=$(awk -v a="${best_cpu[$tu/0]}" -v y="$yard" 'BEGIN { printf "%.2f", a / y }')
  m=$((best_rss[$tu/0] / 1024))
  if awk -v r="$r" -v b="$ratio" 'BEGIN { exit !(r <= b) }' && ((mb == 0 || m <= mb)); then
    printf 'budget %-20s %5sx <= %sx%s: met\n' "$tu" "$r" "$ratio" "$( ((mb)) && echo ", $m MB <= $mb MB")"
  else
    printf 'budget %-20s %5sx <= %sx%s: MISSED\n' "$tu" "$r" "$ratio" "$( ((mb)) && echo ", $m MB <= $mb MB")"
    fails=$((fails + 1))
  fi
}
budget include_only 0.25 0
budget one_all_reduce 1.0 250
budget one_all_reduce_tcp 1.5 350
budget one_all_reduce+sep 0.35 0
((fails == 0))
