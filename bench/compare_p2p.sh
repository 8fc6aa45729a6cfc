#!/usr/bin/env bash
# Point-to-point between two ranks, OSU-style (bench/p2p.hpp): tutti beside Open MPI and MPICH,
# the three run alternately --rounds times (one measurement each), best of each kept, one table.
# Usage: bench/compare_p2p.sh [build-dir] [shm|tcp] [--rounds N] [--sizes a,b,...]
#   shm  tutti shm; Open MPI as shipped (btl vader, its single copy where the kernel allows);
#        MPICH as shipped (mpiexec.mpich).
#   tcp  tutti tcp on 127.0.0.1; Open MPI --mca btl self,tcp on lo; MPICH with MPIR_CVAR_NOLOCAL=1
#        UCX_TLS=tcp on lo (every message through its tcp netmod).
set -euo pipefail
build=${1:-build}
transport=${2:-shm}
shift $(( $# >= 2 ? 2 : $# )) || true
rounds=3
sizes=()
while (( $# )); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --sizes) sizes=(--sizes "$2"); shift 2 ;;
    *) echo "compare_p2p.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
[[ $transport == shm || $transport == tcp ]] || { echo "compare_p2p.sh: shm or tcp (got '$transport')" >&2; exit 2; }
tuttirun=$build/tools/tuttirun
tutti=$build/bench/tutti_bench_p2p
ompi=$build/bench/tutti_peer_mpi_p2p
mpich=$build/bench/tutti_peer_mpich_p2p
for f in "$tuttirun" "$tutti"; do
  [[ -x $f ]] || { echo "missing $f: build with -DTUTTI_BUILD_BENCH=ON" >&2; exit 1; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# machine: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus; $(date -u '+%F %H:%M UTC')"
ompi_flags=(--allow-run-as-root --oversubscribe --bind-to none -np 2)
mpich_env=()
if [[ $transport == tcp ]]; then
  ompi_flags+=(--mca btl self,tcp --mca btl_tcp_if_include lo)
  mpich_env=(MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_TCP_NODELAY=y)
fi
peers=()
[[ -x $ompi ]] && command -v mpirun >/dev/null && peers+=(ompi)
[[ -x $mpich ]] && command -v mpiexec.mpich >/dev/null && peers+=(mpich)
for k in $(seq "$rounds"); do
  "$tuttirun" --nproc-per-node=2 --no-prefix "$tutti" "$transport" --rounds 1 "${sizes[@]}" > "$out/tutti.$k"
  for p in "${peers[@]}"; do
    case $p in
      ompi) mpirun "${ompi_flags[@]}" "$ompi" --rounds 1 "${sizes[@]}" > "$out/ompi.$k" ;;
      mpich) env "${mpich_env[@]}" timeout 300 mpiexec.mpich -n 2 "$mpich" --rounds 1 "${sizes[@]}" > "$out/mpich.$k" ;;
    esac
  done
done
for lib in tutti "${peers[@]}"; do head -1 "$out/$lib.1"; done
# best of the rounds: the least latency, the most bandwidth
best() {
  cat "$out/$1".* | grep -v '^#' |
    awk '{ k = $1 " " $2; if (!(k in b) || ($1 == "latency" ? $3 < b[k] : $3 > b[k])) b[k] = $3 }
         END { for (k in b) print k, b[k] }' | sort -k1,1 -k2,2n
}
best tutti > "$out/t"
table=$out/t
header="kind bytes tutti"
for p in "${peers[@]}"; do
  best "$p" > "$out/$p.best"
  join -j1 <(awk '{print $1"_"$2, $0}' "$table") <(awk '{print $1"_"$2, $3}' "$out/$p.best") | cut -d' ' -f2- > "$out/j"
  mv "$out/j" "$out/t2"
  table=$out/t2
  header="$header $p"
done
echo
echo "# $transport, 2 ranks, best of $rounds alternating rounds; latency in us (less is better), bw in MB/s (more is better)"
echo "# ratio: the best peer's figure against tutti's (latency: peer/tutti; bw: tutti/peer): > 1 means tutti is ahead"
echo "$header ratio"
sort -k1,1 -k2,2n "$table" | awk '{
  best = $4; for (i = 5; i <= NF; ++i) if (($1 == "latency" && $i < best) || ($1 == "bw" && $i > best)) best = $i
  r = NF < 4 ? 0 : ($1 == "latency" ? best / $3 : $3 / best)
  printf "%-8s %8d", $1, $2; for (i = 3; i <= NF; ++i) printf " %10s", $i; printf "   %.2fx\n", r }'
