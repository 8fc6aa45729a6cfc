#!/usr/bin/env bash
# tutti shm vs Open MPI, all_reduce float sum, in one run: both sweeps at 2 and 4 ranks, then one
# table with the ratio tutti/Open MPI of in-place busbw (and of time at the smallest size).
# Usage: bench/compare_shm_mpi.sh [build-dir] [extra sweep flags, e.g. -e 1048576]
set -euo pipefail
build=${1:-build}; shift || true
tuttirun=$build/tools/tuttirun
tutti=$build/bench/tutti_bench_shm_allreduce
peer=$build/bench/tutti_peer_mpi_allreduce
for f in "$tuttirun" "$tutti" "$peer"; do [[ -x $f ]] || { echo "missing $f: build with -DTUTTI_BUILD_BENCH=ON (needs libopenmpi-dev)" >&2; exit 1; }; done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# machine: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus"
echo "# Open MPI: $(mpirun --version 2>/dev/null | head -1)"
for np in 2 4; do
  "$tuttirun" --nproc-per-node=$np --no-prefix "$tutti" "$@" | tee "$out/tutti.$np"
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np "$peer" "$@" | tee "$out/mpi.$np"
done
echo
echo "# all_reduce float sum, in place: tutti shm vs Open MPI (same run)"
printf '%6s %12s | %10s %10s | %10s %10s | %7s\n' ranks size "tutti(us)" "busbw" "ompi(us)" "busbw" ratio
for np in 2 4; do
  join <(grep -v '^#' "$out/tutti.$np" | awk '{print $1, $10, $12}' | sort -k1,1) \
       <(grep -v '^#' "$out/mpi.$np" | awk '{print $1, $10, $12}' | sort -k1,1) |
    sort -n -k1,1 |
    awk -v np=$np '{ printf "%6d %12d | %10.2f %10.2f | %10.2f %10.2f | %6.2fx\n", np, $1, $2, $3, $4, $5, ($5 > 0 ? $3/$5 : 0) }'
done
