#!/usr/bin/env bash
# Instructions per 8-byte shm call at 2 ranks, outside the waiting, counted by callgrind:
# repeatable whatever else runs. Per call = (I(2n) - I(n)) / n, which cancels start-up and exit,
# where each I is the least of ROUNDS runs (default 3): what the leaving out of the waiting misses
# (a spin loop's own few instructions around its calls) only adds, so the least run is the
# truest. Both ranks are printed: the rooted collectives split their work unevenly.
#
#   bench/call_cost.sh <old include dir> <new include dir> <tuttirun> [n] [collectives...]
#       two trees of tutti side by side (new/old);
#   bench/call_cost.sh --mpi <include dir> <tuttirun> [n] [collectives...]
#       tutti against Open MPI (mpicxx, mpirun over its shared-memory transport, vader).
#
# tutti: bench/call_cost.cpp, compiled header-only at -O2 with shm::wait_for kept out of line
# (patched into a copy of the headers). Every wait of shm's collectives runs in wait_for, called
# only once a look found nothing (its spins, its liveness and deadline checks, its sleeps), so
# callgrind leaves it out (--toggle-collect; the counting starts on, --collect-atstart=yes, which
# must come after the toggle, as giving one turns the default off) and what remains is the call's
# own work: its checks, its first look at each flag, its copies and reductions.
# Open MPI: bench/peers/mpi_call_cost.cpp, the same calls. Its waiting is opal_progress, called
# in a loop until the request completes, and the work of a message's arrival (matching it, copying
# it into the receiver's buffer) happens inside one of those calls, in ob1's receive callbacks.
# So callgrind collects only inside the MPI call (PMPI_<name>), and the count is the call's
# instructions minus opal_progress's plus the receive callbacks' (mca_pml_ob1_recv_frag_callback_*):
# the spins are left out, the arrivals kept. What stays out with the spins is vader's own reading
# of its queue around each callback (tens of instructions per message), so Open MPI's figure is
# a little low, not high.
set -euo pipefail
rounds=${ROUNDS:-3}
mode=trees
if [[ ${1:-} == --mpi ]]; then
  mode=mpi
  shift
  new=$1 tuttirun=$2 n=${3:-500}
  shift 2
else
  old=$1 new=$2 tuttirun=$3 n=${4:-500}
  shift 3
fi
(($#)) && shift
collectives=("$@")
if ((!${#collectives[@]})); then
  collectives=(all_reduce barrier broadcast reduce all_gather)
  [[ $mode == mpi ]] && collectives=(all_reduce broadcast reduce scatter gather all_gather all_to_all reduce_scatter barrier)
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v valgrind >/dev/null || { echo "call_cost: valgrind not found" >&2; exit 1; }
build() {  # <include dir> <name>
  mkdir -p "$work/$2"
  cp -r "$1/tutti" "$work/$2/"
  sed -i 's/^  void wait_for(const wait_context& w/  __attribute__((noinline)) void wait_for(const wait_context\& w/' \
    "$work/$2/tutti/transport/shm/transport.hpp"
  grep -q 'noinline)) void wait_for' "$work/$2/tutti/transport/shm/transport.hpp" ||
    { echo "call_cost: could not keep shm::wait_for out of line in $1" >&2; exit 1; }
  g++ -std=c++20 -O2 -g -DNDEBUG -I "$work/$2" "$here/call_cost.cpp" -o "$work/$2/call_cost" -pthread
}
count() {  # <name> <collective> <calls> -> "I(rank 0) I(rank 1)"
  rm -f "$work"/cg.*
  TUTTI_SHM_SINGLE_COPY=0 "$tuttirun" --nproc-per-node=2 valgrind --tool=callgrind \
    --callgrind-out-file="$work/cg.%q{LOCAL_RANK}" --toggle-collect='void tutti::shm::wait_for<*)' --collect-atstart=yes \
    "$work/$1/call_cost" "$2" "$3" >/dev/null 2>&1
  echo "$(grep -m1 '^totals:' "$work/cg.0" | awk '{print $2}') $(grep -m1 '^totals:' "$work/cg.1" | awk '{print $2}')"
}
least() {  # <count function> <args...> -> the least I of each rank over $rounds runs
  local i a b min_a= min_b=
  for ((i = 0; i < rounds; ++i)); do
    read -r a b <<<"$("$@")"
    [[ -z $min_a || $a -lt $min_a ]] && min_a=$a
    [[ -z $min_b || $b -lt $min_b ]] && min_b=$b
  done
  echo "$min_a $min_b"
}
mpi_symbol() {
  case $1 in
    all_reduce) echo PMPI_Allreduce ;; broadcast) echo PMPI_Bcast ;; reduce) echo PMPI_Reduce ;;
    scatter) echo PMPI_Scatter ;; gather) echo PMPI_Gather ;; all_gather) echo PMPI_Allgather ;;
    all_to_all) echo PMPI_Alltoall ;; reduce_scatter) echo PMPI_Reduce_scatter_block ;; barrier) echo PMPI_Barrier ;;
    *) echo "call_cost: unknown collective $1" >&2; exit 2 ;;
  esac
}
mpi_count() {  # <collective> <calls> -> "I(rank 0) I(rank 1)"
  rm -f "$work"/cg.*
  mpirun -np 2 "${mpi_flags[@]}" valgrind --tool=callgrind --callgrind-out-file="$work/cg.%q{OMPI_COMM_WORLD_RANK}" \
    --collect-atstart=no --toggle-collect="$(mpi_symbol "$1")" "$work/mpi_call_cost" "$1" "$2" >/dev/null 2>&1
  local r out=()
  for r in 0 1; do
    out+=("$(callgrind_annotate --inclusive=yes "$work/cg.$r" 2>/dev/null | awk '
      { gsub(",", "", $1) }
      /PROGRAM TOTALS/ { total = $1 }
      / [^ ]*:opal_progress / { progress = $1 }
      /:mca_pml_ob1_recv_frag_callback_/ { arrivals += $1 }
      END { if (total == "") exit 1; print total - progress + arrivals }')")
  done
  echo "${out[@]}"
}
if [[ $mode == trees ]]; then
  build "$old" old
  build "$new" new
  printf '%-14s %12s %12s %12s %12s %11s\n' collective "old rank 0" "old rank 1" "new rank 0" "new rank 1" "new/old"
else
  command -v mpicxx >/dev/null && command -v mpirun >/dev/null || { echo "call_cost: mpicxx or mpirun not found" >&2; exit 1; }
  mpirun --version 2>/dev/null | grep -q 'Open MPI' || { echo "call_cost: --mpi counts Open MPI's mpirun" >&2; exit 1; }
  build "$new" new
  mpicxx -std=c++20 -O2 -g "$here/peers/mpi_call_cost.cpp" -o "$work/mpi_call_cost"
  mpi_flags=(--oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
  ((EUID)) || mpi_flags+=(--allow-run-as-root)
  printf '%-14s %12s %12s %12s %12s %11s\n' collective "tutti rank 0" "tutti rank 1" "ompi rank 0" "ompi rank 1" "tutti/ompi"
fi
per_call() {  # <count function> <args...> -> instructions per call of each rank
  local a1 b1 a2 b2
  read -r a1 b1 <<<"$(least "$@" "$n")"
  read -r a2 b2 <<<"$(least "$@" $((2 * n)))"
  echo "$(((a2 - a1) / n)) $(((b2 - b1) / n))"
}
for c in "${collectives[@]}"; do
  if [[ $mode == trees ]]; then
    row=($(per_call count old "$c") $(per_call count new "$c"))
  else
    row=($(per_call count new "$c") $(per_call mpi_count "$c"))
  fi
  # Sums of both ranks (the rooted collectives split their work unevenly between them): new/old,
  # or tutti/ompi.
  ratio=$(awk -v mode=$mode -v r0="${row[0]}" -v r1="${row[1]}" -v r2="${row[2]}" -v r3="${row[3]}" \
    'BEGIN {a = r0 + r1; b = r2 + r3; printf "%.3f", mode == "mpi" ? a / b : b / a}')
  printf '%-14s %12d %12d %12d %12d %11s\n' "$c" "${row[@]}" "$ratio"
done
