#!/usr/bin/env bash
# tutti's iall_reduce + work + wait against Open MPI's MPI_Iallreduce + work + MPI_Wait, at 2 ranks
# over shm (Open MPI: btl vader) and tcp on loopback (Open MPI: btl tcp), 4 MiB and 64 MiB, work
# that sleeps and work that computes (bench/overlap.hpp). The two run alternately, `rounds` times;
# the summary takes each cell's best round (the highest overlap: noise only adds time to a step).
# Usage: bench/compare_overlap.sh [build-dir] [rounds] [extra flags, e.g. -n 10]
set -euo pipefail
build=${1:-build}; rounds=${2:-3}; shift 2 || shift $# || true
tutti=$build/bench/tutti_bench_overlap
peer=$build/bench/tutti_peer_mpi_overlap
source "$(dirname "$0")/peer_run.sh"
for ((r = 1; r <= rounds; ++r)); do
  for t in shm tcp; do
    btl=vader; [[ $t == tcp ]] && btl=tcp
    echo "## round $r, $t"
    "$tuttirun" --nproc-per-node=2 --no-prefix "$tutti" $t "$@" | tee -a "$out/tutti.$t"
    "${mpi[@]}" --mca btl self,$btl "$peer" "$@" | tee -a "$out/mpi.$t"
  done
done
best() { grep -v '^#' "$1" | awk '{k=$1" "$2; if (!(k in b) || $6 > b[k]) {b[k]=$6; c[k]=$3; w[k]=$4; t[k]=$5}}
                                  END {for (k in b) print k, c[k], w[k], t[k], b[k]}' | sort -k1,1n -k2,2r; }
echo
echo "# overlap = (t_comm + t_work - t_total) / min(t_comm, t_work), 2 ranks, best of $rounds rounds each"
printf '%4s %10s %6s | %10s %10s %8s | %10s %10s %8s\n' link bytes work "tutti comm" total overlap "ompi comm" total overlap
for t in shm tcp; do
  join -j1 <(best "$out/tutti.$t" | awk '{print $1"/"$2, $3, $5, $6}') <(best "$out/mpi.$t" | awk '{print $1"/"$2, $3, $5, $6}') |
    sort -t/ -k1,1n -k2,2r |
    awk -v t=$t '{split($1, k, "/"); printf "%4s %10d %6s | %10.1f %10.1f %8.2f | %10.1f %10.1f %8.2f\n", t, k[1], k[2], $2, $3, $4, $5, $6, $7}'
done
echo "# us; comm: the all_reduce posted and waited on at once; total: post, work (about comm long), wait"
