#!/usr/bin/env bash
# How long a user's translation unit that includes tutti takes to compile, and how much memory.
#
#   bench/compile_time.sh [include-dir ...]
#
# Compiles each TU of bench/compile_time/ (one all_reduce over shm; the same over tcp, with Asio;
# every collective over shm) with `$CXX -std=c++20 $OPT -c` against each include directory given
# (default: this checkout's include/), alternating between them, $RUNS times (default 3), and
# prints the best user+sys CPU seconds and the best peak RSS of each: CPU time, not wall time,
# since the machine may be shared; noise only adds, so the best is the figure. Give two include
# directories (an older checkout's, this one's) to compare them side by side.
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
echo "# $CXX $($CXX -dumpfullversion) -std=c++20 $OPT, best of $RUNS (CPU s = user + sys; peak RSS)"
printf '%-20s' "TU"
for inc in "$@"; do printf ' | %-34s' "$(basename "$(dirname "$inc")")/$(basename "$inc")"; done
printf '\n'
for tu in "$here"/compile_time/*.cpp; do
  declare -A best_cpu=() best_rss=()
  for ((run = 0; run < RUNS; run++)); do
    for i in $(seq 0 $(($# - 1))); do
      inc=${*:$((i + 1)):1}
      if ! /usr/bin/time -f '%U %S %M' -o "$tmp/time" "$CXX" -std=c++20 $OPT -DASIO_STANDALONE -I "$inc" -c "$tu" \
             -o "$tmp/out.o" 2>"$tmp/err"; then
        echo "compile_time.sh: $(basename "$tu") failed against $inc:" >&2
        head -20 "$tmp/err" >&2
        exit 1
      fi
      read -r u s m <"$tmp/time"
      cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
      if [[ -z ${best_cpu[$i]:-} ]] || awk -v a="$cpu" -v b="${best_cpu[$i]}" 'BEGIN { exit !(a < b) }'; then best_cpu[$i]=$cpu; fi
      if [[ -z ${best_rss[$i]:-} ]] || ((m < best_rss[$i])); then best_rss[$i]=$m; fi
    done
  done
  printf '%-20s' "$(basename "$tu" .cpp)"
  for i in $(seq 0 $(($# - 1))); do printf ' | %8s s %8d MB               ' "${best_cpu[$i]}" $((best_rss[$i] / 1024)); done
  printf '\n'
  unset best_cpu best_rss
done
