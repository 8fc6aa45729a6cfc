#!/usr/bin/env bash
# Two builds of tutti side by side (an older commit's and this one's), with the peer each
# comparison script uses, alternating old / new / peer round after round; per size the best time
# of each over the rounds (noise only adds time), in one table per transport and world size:
#   shm all_reduce (tutti_bench_shm_allreduce) beside Open MPI (tutti_peer_mpi_allreduce),
#   tcp all_reduce (tutti_bench_tcp_allreduce) beside Gloo's best (tutti_peer_gloo_allreduce).
# Usage: bench/compare_builds.sh OLD_BUILD NEW_BUILD [rounds (3)] [extra sweep flags]
# new/old < 1 is faster; the peer's column says where both stand.
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
shift 2; shift || true
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export TUTTI_SHM_ARENA_BYTES=$((512 << 20))
tcp_sweep=(-c 1 "$@")
# bytes and in-place time (column 10) of each table row; several tables (Gloo): the best per size
rows() { grep -v '^#' "$1" | awk 'NF >= 13 { print $1, $10 }'; }
best() {  # best time per size over the files given
  for f in "$@"; do rows "$f"; done | awk '{ if (!($1 in b) || $2 < b[$1]) b[$1] = $2 } END { for (s in b) print s, b[s] }' |
    sort -k1,1  # join wants the text order; the table is sorted by number at the end
}
for ((r = 1; r <= rounds; r++)); do
  for np in 2 4; do
    for side in old new; do
      b=${!side}
      "$b/tools/tuttirun" --nproc-per-node=$np --no-prefix "$b/bench/tutti_bench_shm_allreduce" "$@" >"$out/shm.$side.$np.$r"
      "$b/tools/tuttirun" --nproc-per-node=$np --no-prefix "$b/bench/tutti_bench_tcp_allreduce" "${tcp_sweep[@]}" >"$out/tcp.$side.$np.$r"
    done
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np "$new/bench/tutti_peer_mpi_allreduce" "$@" \
      >"$out/shm.peer.$np.$r"
    "$new/tools/tuttirun" --nproc-per-node=$np --no-prefix "$new/bench/tutti_peer_gloo_allreduce" "${tcp_sweep[@]}" \
      >"$out/tcp.peer.$np.$r"
  done
  echo "# round $r of $rounds done" >&2
done
echo "# all_reduce float sum, in place, best of $rounds rounds (old, new and the peer alternating)"
echo "# old: $old   new: $new"
for t in shm tcp; do
  peer_name=$([[ $t == shm ]] && echo "Open MPI" || echo "Gloo best")
  for np in 2 4; do
    echo
    echo "# $t, $np ranks"
    printf '%10s | %10s %10s %8s | %10s %10s\n' bytes "old us" "new us" new/old "$peer_name" "peer/new"
    join <(best "$out/$t.old.$np".*) <(best "$out/$t.new.$np".*) | join - <(best "$out/$t.peer.$np".*) | sort -n -k1,1 |
      awk '{ printf "%10d | %10.2f %10.2f %7.2fx | %10.2f %9.2fx\n", $1, $2, $3, $3 / $2, $4, $4 / $3 }'
  done
done
