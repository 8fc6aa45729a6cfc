#!/usr/bin/env bash
# tutti shm vs Open MPI, all_reduce float sum, in one run: at 2 and 4 ranks, tutti with ordinary
# buffers, tutti with buffers from comm.allocate (zero copy), and Open MPI; then one table of
# in-place figures with the ratios tutti/Open MPI.
# Usage: bench/compare_shm_mpi.sh [build-dir] [extra sweep flags, e.g. -e 1048576 -t 0.1]
set -euo pipefail
build=${1:-build}; shift || true
tutti=$build/bench/tutti_bench_shm_allreduce
peer=$build/bench/tutti_peer_mpi_allreduce
source "$(dirname "$0")/peer_run.sh"
export TUTTI_SHM_ARENA_BYTES=$((512 << 20))  # room for the sweep's three 64 MiB buffers
for np in 2 4; do
  "$tuttirun" --nproc-per-node=$np --no-prefix "$tutti" "$@" | tee "$out/tutti.$np"
  "$tuttirun" --nproc-per-node=$np --no-prefix "$tutti" -z 1 "$@" | tee "$out/zc.$np"
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np "$peer" "$@" | tee "$out/mpi.$np"
done
rows() { grep -v '^#' "$1" | awk '{print $1, $10, $12}' | sort -k1,1; }
echo
echo "# all_reduce float sum, in place, one run: tutti shm (plain buffers; comm.allocate buffers) vs Open MPI"
printf '%5s %10s | %10s %8s | %10s %8s | %10s %8s | %7s %7s\n' ranks bytes "tutti us" busbw "alloc us" busbw "ompi us" busbw ratio "alloc"
for np in 2 4; do
  join <(rows "$out/tutti.$np") <(rows "$out/zc.$np") | join - <(rows "$out/mpi.$np") | sort -n -k1,1 |
    awk -v np=$np '{ printf "%5d %10d | %10.2f %8.2f | %10.2f %8.2f | %10.2f %8.2f | %6.2fx %6.2fx\n",
                     np, $1, $2, $3, $4, $5, $6, $7, $6/$2, $6/$4 }'
done
echo "# ratio: Open MPI time / tutti time (= busbw tutti / Open MPI), plain buffers; alloc: the same with comm.allocate buffers"
