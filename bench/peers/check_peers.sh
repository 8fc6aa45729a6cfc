#!/usr/bin/env bash
# ctest's check of a peer benchmark: one sweep of every collective with -c 1 at NP ranks, then the
# CSV must hold rows for all nine collectives, each checked (#wrong not -1) and right (#wrong 0).
#   bench/peers/check_peers.sh BUILD_DIR mpi|mpich|gloo NP [peer flags, e.g. -d int64 -o max -r 2]
# (mpich: the MPICH peer under mpiexec.mpich, shared memory as shipped, not registered with ctest;
# with MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE=0, as MPICH 4.0.2's shm reduce crashes (SIGSEGV) in place
# at a root other than 0 from about 16 KiB, e.g. -r 1)
set -euo pipefail
build=$1 which=$2 np=$3
shift 3
csv=$(mktemp)
trap 'rm -f "$csv"' EXIT
flags=(--collective all -b 8 -e 64K -f 8 -n 3 -w 1 -c 1 --csv "$csv" "$@")
case $which in
  mpi) mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" --mca btl self,vader \
         "$build/bench/tutti_peer_mpi_bench" "${flags[@]}" ;;
  mpich) MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE=0 mpiexec.mpich -n "$np" "$build/bench/tutti_peer_mpich_bench" "${flags[@]}" ;;
  gloo) "$build/tools/tuttirun" --nproc-per-node="$np" --no-prefix "$build/bench/tutti_peer_gloo_bench" "${flags[@]}" ;;
  *) echo "check_peers.sh: mpi, mpich or gloo, not $which" >&2; exit 2 ;;
esac
awk -F, -v np="$np" '
  NR == 1 { next }
  { rows[$2]++; if ($5 != np) { printf "np column %s, expected %s: %s\n", $5, np, $0; bad++ } }
  $15 != 0 { printf "wrong or unchecked: %s\n", $0; bad++ }
  END {
    n = split("broadcast reduce all_reduce gather all_gather scatter all_to_all reduce_scatter barrier", c, " ")
    for (i = 1; i <= n; ++i) if (!rows[c[i]]) { printf "no rows for %s\n", c[i]; bad++ }
    printf "%d rows, %d problems\n", NR - 1, bad
    exit bad > 0
  }' "$csv"
