#!/usr/bin/env bash
# Fusion at 2 ranks: tutti's 256 iall_reduces of 4 KiB in a batch (communicator::fuse) + wait_all,
# unfused, and as blocking calls, against one all_reduce of the whole 1 MiB; beside Open MPI's
# 256 MPI_Iallreduce + MPI_Waitall (and its own one call and blocking calls), over shm (Open MPI:
# btl vader) and tcp on loopback (Open MPI: btl tcp). The two run alternately, `rounds` times;
# the table takes each case's best round (noise only adds time). See bench/fusion.hpp.
# Usage: bench/compare_fusion.sh [build-dir] [rounds] [extra flags, e.g. -n 30 -k 256 -s 4096]
set -euo pipefail
build=${1:-build}; rounds=${2:-3}; shift 2 || shift $# || true
tutti=$build/bench/tutti_bench_fusion
peer=$build/bench/tutti_peer_mpi_fusion
source "$(dirname "$0")/peer_run.sh"
for ((r = 1; r <= rounds; ++r)); do
  for t in shm tcp; do
    btl=vader; [[ $t == tcp ]] && btl=tcp
    "$tuttirun" --nproc-per-node=2 --no-prefix "$tutti" $t "$@" >>"$out/tutti.$t"
    "${mpi[@]}" --mca btl self,$btl "$peer" "$@" >>"$out/mpi.$t"
  done
  echo "# round $r of $rounds done" >&2
done
# "  <case words...>  <us> us" lines: the best per case, as "case<TAB>us".
best() { grep -v '^#' "$1" | awk '{us = $(NF-1); $NF = ""; $(NF-1) = ""; sub(/ +$/, ""); sub(/^ +/, "");
                                  if (!($0 in b) || us < b[$0]) b[$0] = us} END {for (k in b) printf "%s\t%s\n", k, b[k]}'; }
echo "# best of $rounds rounds each, us, 2 ranks"
for t in shm tcp; do
  echo "## $t"
  best "$out/tutti.$t" | sort | awk -F'\t' '{printf "  tutti     %-34s %10.1f\n", $1, $2}'
  best "$out/mpi.$t" | sort | awk -F'\t' '{printf "  Open MPI  %-34s %10.1f\n", $1, $2}'
  whole=$(best "$out/tutti.$t" | awk -F'\t' '$1 == "one all_reduce of the whole" {print $2}')
  fused=$(best "$out/tutti.$t" | awk -F'\t' '$1 == "fused iall_reduces + wait_all" {print $2}')
  mpi_i=$(best "$out/mpi.$t" | awk -F'\t' '$1 == "MPI_Iallreduce + MPI_Waitall" {print $2}')
  awk -v w="$whole" -v f="$fused" -v m="$mpi_i" 'BEGIN {printf "  fused / one call: %.2fx   Open MPI non-blocking / tutti fused: %.2fx\n", f / w, m / f}'
done
