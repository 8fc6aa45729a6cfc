#!/usr/bin/env bash
# One collective, one transport, one world size: tutti (tutti-bench, each of its algorithms that has
# a schedule for the collective there, automatic included) beside Open MPI, MPICH and Gloo
# (bench/peers/), in one run of R alternating rounds. Prints one table of busbw per
# library/algorithm by size (each the best of the R rounds), with the ratio of tutti's best to the
# peers' best and the worst single round's ratio, and one of latency for the small sizes; at 2
# ranks over shm, each 64 MiB figure against the memory-traffic bound; writes the merged CSV (every
# round's rows) and a PNG (busbw and latency against size, log-log, one line per library/algorithm)
# into the output dir.
#
#   bench/compare.sh --collective all_gather --transport shm --np 2 [-b 1K -e 16M -f 2 -n 20 -w 5]
#       [--time-per-size S (with -n 0: calls timed per size at the warm-up's pace, every library)]
#       [--data-varying BYTES (every library's calls rotate over buffer sets filling BYTES per rank)]
#       [-d float] [-o sum] [-r 0] [--rounds 3] [--in-place 0|1] [--build DIR] [--tutti-bench PATH]
#       [--tutti-csv FILE] [--out DIR] [--latency-max BYTES] [--peer-limit SECONDS] [--peers LIST]
#
# Rounds (--rounds R, default 3): tutti (all its algorithms), Open MPI, MPICH, Gloo, then again,
# R times, so that a slow minute on a shared machine hits every library alike. Each library's
# figure per size is its best round (least time, most busbw); every round's figure is kept in the
# CSV (columns round and rounds), and the tables add the worst round's ratio: per round, tutti's
# best algorithm against the best peer of that round, the lowest of the R. A ratio is trustworthy
# when the best-of-rounds ratio and the worst round's say the same.
#
# Peers by transport (--peers: which of openmpi, mpich, gloo to run; default all that apply):
#   shm  Open MPI: mpirun --mca btl self,vader (its shared-memory btl, single copy by CMA as Open
#        MPI defaults; retried with btl_vader_single_copy_mechanism none, and said so, where CMA
#        fails). MPICH 4.0 (Debian: device ch4:ucx): mpiexec.mpich -n N, as shipped: ranks of one
#        node talk through ch4's own shared memory (posix), UCX is not used between them.
#   tcp  Open MPI: mpirun --mca btl self,tcp --mca btl_tcp_if_include lo. MPICH: the same
#        mpiexec.mpich with MPIR_CVAR_NOLOCAL=1 (no shared-memory path: every message through the
#        netmod, as if the ranks were on other nodes), UCX_TLS=tcp (UCX's tcp transport only: no
#        UCX shm or CMA), UCX_NET_DEVICES=lo (loopback) and UCX_TCP_NODELAY=y (UCX 1.13 leaves
#        Nagle's algorithm on, which costs 4-20 ms per small message; Open MPI, Gloo and tutti
#        all set TCP_NODELAY); the bytes counted on lo during its run confirm the path. (Debian's
#        MPICH has no ch4:ofi or ch3 build, so FI_PROVIDER and MPIR_CVAR_CH4_NETMOD do not apply.)
#        Gloo: its tcp transport on 127.0.0.1 under tuttirun (Gloo has no shm transport).
# Every run checks its results (-c 1); a size whose #wrong is not 0 in a round is marked "!", and
# that round's figure is never anyone's best. --in-place 0|1 picks the placement compared; by
# default the one tutti-bench has (in place for broadcast and reduce, out of place for the
# others); the peers measure only that placement (--placement).
# --peer-limit S (default 300): stop a peer's run after S seconds and keep the sizes it measured
# (Gloo's tcp pairs can stall for seconds per call at some sizes, e.g. unbound_ring all_reduce at
# 4 ranks, which the later rounds then leave out; MPICH over UCX tcp now and then hangs in a large
# call).
# --tutti-csv FILE: take tutti's figures from a CSV tutti-bench wrote earlier instead of running it
# (its rows count as round 1, or as the rounds its round column names).
# The tutti-bench binary: --tutti-bench, else the first tutti-bench under the build dir; without
# one, the peers alone are compared (and the script says so).
# Memory-traffic bound (shm, 2 ranks, when the sweep has 64 MiB): each round first runs
# bench/copy_rate.cpp (tutti_bench_copy_rate -b 64M: one thread's copy rate C, the fastest of
# memcpy, streaming stores and rep movsb); a schedule that must read and write T bytes per rank
# (bench/RESULTS.md lists T per collective) takes at least T / (2 C), both ranks working at once,
# each on its own core. The table gives bound / time for each library/algorithm (1 = at the bound).
# Sizes follow nccl-tests (bench/peers/peer_bench.hpp): for all_gather, gather, scatter,
# reduce_scatter and all_to_all, bytes is the whole buffer of np pieces, rounded down to a
# multiple of np elements.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
coll="" transport="" np="" build="$here/../build" tutti_bench="" tutti_csv="" out="$here/out"
in_place="" latency_max=65536 peer_limit=300 rounds=3 peers="openmpi mpich gloo" root=0
sweep=()
usage() { grep -A2 -m1 '^#   bench/compare.sh --collective' "$0" | sed 's/^# \{0,3\}//' >&2; exit 2; }
[[ ${1:-} == -h || ${1:-} == --help ]] && { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
while (($#)); do
  (($# >= 2)) || { echo "compare.sh: $1 needs a value" >&2; usage; }
  case $1 in
    --collective) coll=$2 ;;
    --transport) transport=$2 ;;
    --np) np=$2 ;;
    --build) build=$2 ;;
    --tutti-bench) tutti_bench=$2 ;;
    --tutti-csv) tutti_csv=$2 ;;
    --out) out=$2 ;;
    --in-place) in_place=$2 ;;
    --latency-max) latency_max=$2 ;;
    --peer-limit) peer_limit=$2 ;;
    --rounds) rounds=$2 ;;
    --peers) peers=$2 ;;
    -b | -e | -f | -n | -w | -d | -o | --time-per-size | --data-varying) sweep+=("$1" "$2") ;;
    -r) sweep+=("$1" "$2"); root=$2 ;;
    *) echo "compare.sh: unknown flag $1" >&2; usage ;;
  esac
  shift 2
done
case $coll in
  broadcast | reduce | all_reduce | gather | all_gather | scatter | all_to_all | reduce_scatter | barrier) ;;
  *) echo "compare.sh: --collective: one of broadcast, reduce, all_reduce, gather, all_gather, scatter, all_to_all, reduce_scatter, barrier (got '$coll')" >&2; exit 2 ;;
esac
[[ $transport == shm || $transport == tcp ]] || { echo "compare.sh: --transport: shm or tcp (got '$transport')" >&2; exit 2; }
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: --np: a positive integer (got '$np')" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: --rounds: a positive integer (got '$rounds')" >&2; exit 2; }
for p in $peers; do
  [[ $p == openmpi || $p == mpich || $p == gloo ]] || { echo "compare.sh: --peers: openmpi, mpich, gloo (got '$p')" >&2; exit 2; }
done
# the placement tutti-bench has for every collective: broadcast and reduce in place only,
# all_to_all and reduce_scatter out of place only; out of place where it has both
if [[ -z $in_place ]]; then
  case $coll in broadcast | reduce) in_place=1 ;; *) in_place=0 ;; esac
fi
[[ $coll == barrier ]] && in_place=0
[[ $in_place == 0 || $in_place == 1 ]] || { echo "compare.sh: --in-place: 0 or 1 (got '$in_place')" >&2; exit 2; }

tuttirun=$build/tools/tuttirun
mpi_peer=$build/bench/tutti_peer_mpi_bench
mpich_peer=$build/bench/tutti_peer_mpich_bench
gloo_peer=$build/bench/tutti_peer_gloo_bench
copy_rate=$build/bench/tutti_bench_copy_rate
if [[ -z $tutti_bench && -z $tutti_csv ]]; then
  tutti_bench=$(find "$build" -name tutti-bench -type f -perm -u+x 2>/dev/null | head -1 || true)
fi
mkdir -p "$out"
tag=${coll}_${transport}_np${np}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TUTTI_SHM_ARENA_BYTES=${TUTTI_SHM_ARENA_BYTES:-$((512 << 20))}  # room for the largest sizes
csv_header="library,collective,transport,algorithm,np,dtype,op,root,bytes,count,in_place,time_us,algbw_GBps,busbw_GBps,wrong,round,rounds"

# The sizes the sweep visits (peer_bench.hpp's defaults where a flag is missing), to know whether
# it reaches 64 MiB.
bytes_of() {
  local v=$1 n m=1
  n=${v%[KkMmGg]}
  case ${v: -1} in K | k) m=$((1 << 10)) ;; M | m) m=$((1 << 20)) ;; G | g) m=$((1 << 30)) ;; esac
  echo $((n * m))
}
sweep_min=8 sweep_max=$((64 << 20)) sweep_factor=2
for ((i = 0; i < ${#sweep[@]}; i += 2)); do
  case ${sweep[i]} in
    -b) sweep_min=$(bytes_of "${sweep[i + 1]}") ;;
    -e) sweep_max=$(bytes_of "${sweep[i + 1]}") ;;
    -f) sweep_factor=${sweep[i + 1]} ;;
  esac
done
bound_bytes=$((64 << 20))
want_bound=0
if [[ $transport == shm && $np == 2 && $coll != barrier ]]; then
  for ((s = sweep_min; s <= sweep_max; s = s ? s * sweep_factor : 1)); do
    ((s == bound_bytes)) && want_bound=1
    ((s == 0 && sweep_max == 0)) && break
  done
fi

echo "# compare: $coll over $transport, $np ranks, ${sweep[*]:-default sizes}, $( ((in_place)) && echo in place || echo out of place), $rounds round$( ((rounds > 1)) && echo s) (tutti, then each peer, alternating)"
echo "# machine: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A note=()  # one line per library (the last round's says), failures per round
notes_order=()
say() {  # say KEY TEXT: KEY's note (replaced by a later round's)
  [[ -v "note[$1]" ]] || notes_order+=("$1")
  note[$1]=$2
}
: >"$work/rows.csv"
# append FILE ROUND: FILE's rows (tutti-bench's or a peer's CSV) with the round and rounds columns
append() {
  [[ -s $1 ]] || return 0
  awk -F, -v OFS=, -v k="$2" -v r="$rounds" 'NR > 1 && NF >= 15 { print $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, k, r }' "$1" >>"$work/rows.csv"
}
# limited NAME LOG -- CMD...: CMD with --peer-limit; 0 done, 124 stopped at the limit, else
# failed. A peer prints "# done" once its figures are written: one still running 15 s later (MPICH
# over UCX tcp now and then hangs in MPI_Finalize) is stopped and counts as done.
limited() {
  local name=$1 log=$2 rc=0 pid i
  shift 3
  timeout -k 10 "$peer_limit" "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q '^# done' "$log" 2>/dev/null; then
      for ((i = 0; i < 75; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true  # timeout passes it on to the launcher
        wait "$pid" 2>/dev/null || true
        say "$name.hung" "$name: still running 15 s after its last figure (hung in its shutdown); stopped, its figures kept"
        return 0
      fi
      break
    fi
    sleep 0.2
  done
  wait "$pid" || rc=$?
  return $rc
}
# peer_outcome NAME ROUND RC LOG CSV: the note for a peer's run; a failed run's CSV is dropped
peer_outcome() {
  local name=$1 k=$2 rc=$3 log=$4 csv=$5
  if ((rc == 0)); then
    say "$name" "$name: $(grep -m1 '^# ' "$log" | sed 's/^# //')"
  elif ((rc == 124 || rc == 137)) && [[ -s $csv ]] && (($(wc -l <"$csv") > 1)); then
    say "$name.$k" "$name, round $k: stopped after ${peer_limit} s (--peer-limit) in $(tail -1 "$csv" | cut -d, -f4) at $(tail -1 "$csv" | cut -d, -f9) B; what it measured is kept, the rest is missing"
  else
    say "$name.$k" "$name, round $k: failed (exit $rc): $(grep -v '^\s*$' "$log" | tail -3 | tr '\n' ' ' | cut -c1-200)"
    rm -f "$csv"
  fi
}

placement=$( ((in_place)) && echo in || echo out)
peer_flags=(--collective "$coll" "${sweep[@]}" -c 1 --placement "$placement")
mpirun_flags=(--allow-run-as-root --oversubscribe --bind-to none -np "$np")
has_peer() { [[ " $peers " == *" $1 "* ]]; }
gloo_skip=""  # Gloo algorithms that stalled past --peer-limit in an earlier round
vader_cma=1  # Open MPI's single copy works here (else: retried without it, and then always without)

# --- one round ------------------------------------------------------------------------------------
round() {
  local k=$1 rc algo lo0 lo1
  # the copy rate first, for the bound (at 2 ranks over shm, when the sweep has 64 MiB)
  if ((want_bound)); then
    if [[ -x $copy_rate ]] && "$copy_rate" -b "$bound_bytes" -n 10 >"$work/copy.$k" 2>&1; then
      echo "$k $(cat "$work/copy.$k")" >>"$work/copy"
    else
      say copy "copy rate: $copy_rate not built or failed: no memory-traffic bound"
    fi
  fi

  # tutti: every algorithm that has a schedule for the collective on this transport
  if [[ -n $tutti_csv ]]; then
    if ((k == 1)); then
      awk -F, -v OFS=, -v r="$rounds" 'NR > 1 && NF >= 15 { print $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, (NF >= 16 ? $16 : 1), r }' "$tutti_csv" >>"$work/rows.csv"
      say tutti "tutti: figures from $tutti_csv (not run now)"
    fi
  elif [[ -n $tutti_bench && -x $tutti_bench ]]; then
    local algos=(automatic ring tree recursive_doubling direct)
    [[ $transport == shm ]] && algos+=(shared_memory)  # native is tutti::mpi's, not compared here
    for algo in "${algos[@]}"; do
      rm -f "$work/t.csv"
      if "$tutti_bench" --collective "$coll" --transport "$transport" --algo "$algo" --np "$np" "${sweep[@]}" -c 1 \
        --csv "$work/t.csv" >"$work/t.$algo.log" 2>&1; then
        # the algorithm column says what was asked for (automatic stays automatic)
        awk -F, -v OFS=, -v a="$algo" 'NR == 1 { print; next } { $4 = a; print }' "$work/t.csv" >"$work/t.named.csv"
        append "$work/t.named.csv" "$k"
      else
        say "tutti.$algo" "tutti $algo: not run ($(grep -v '^\s*$\|--help lists the flags' "$work/t.$algo.log" | tail -1 | cut -c1-160))"
      fi
    done
  elif ((k == 1)); then
    say tutti "tutti: no tutti-bench (pass --tutti-bench PATH or build it under $build): peers only"
  fi

  # Open MPI
  if has_peer openmpi; then
    if [[ -x $mpi_peer ]] && command -v mpirun >/dev/null; then
      local btl
      if [[ $transport == shm ]]; then
        btl=(--mca btl self,vader)
        ((vader_cma)) || btl+=(--mca btl_vader_single_copy_mechanism none)
      else
        btl=(--mca btl self,tcp --mca btl_tcp_if_include lo)
      fi
      rm -f "$work/openmpi.csv"
      rc=0
      limited openmpi "$work/openmpi.log" -- mpirun "${mpirun_flags[@]}" "${btl[@]}" "$mpi_peer" "${peer_flags[@]}" \
        --transport "$transport" --csv "$work/openmpi.csv" || rc=$?
      if ((rc != 0 && rc != 124 && rc != 137)) && [[ $transport == shm ]] && ((vader_cma)); then
        vader_cma=0
        rc=0
        limited openmpi "$work/openmpi.log" -- mpirun "${mpirun_flags[@]}" "${btl[@]}" --mca btl_vader_single_copy_mechanism none \
          "$mpi_peer" "${peer_flags[@]}" --transport "$transport" --csv "$work/openmpi.csv" || rc=$?
        ((rc == 0)) && say openmpi.cma "openmpi: the default single copy (CMA) failed here; ran with btl_vader_single_copy_mechanism none"
      fi
      peer_outcome openmpi "$k" "$rc" "$work/openmpi.log" "$work/openmpi.csv"
      append "$work/openmpi.csv" "$k"
    elif ((k == 1)); then
      say openmpi "openmpi: $mpi_peer not built (needs libopenmpi-dev) or mpirun missing: no Open MPI column"
    fi
  fi

  # MPICH
  if has_peer mpich; then
    if [[ -x $mpich_peer ]] && command -v mpiexec.mpich >/dev/null; then
      local env=()
      [[ $transport == tcp ]] && env=(MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_TCP_NODELAY=y)
      # MPICH 4.0.2's shm (device) reduce crashes in place at a root other than 0 from about 16 KiB
      if [[ $transport == shm && $coll == reduce && $in_place == 1 && $root != 0 ]]; then
        env+=(MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE=0)
        say mpich.root "mpich: MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE=0 (its shm reduce crashes in place at root $root otherwise)"
      fi
      rm -f "$work/mpich.csv"
      rc=0
      lo0=$(awk '/^ *lo:/ { print $2 }' /proc/net/dev)
      limited mpich "$work/mpich.log" -- env "${env[@]}" mpiexec.mpich -n "$np" "$mpich_peer" "${peer_flags[@]}" \
        --transport "$transport" --csv "$work/mpich.csv" || rc=$?
      lo1=$(awk '/^ *lo:/ { print $2 }' /proc/net/dev)
      peer_outcome mpich "$k" "$rc" "$work/mpich.log" "$work/mpich.csv"
      # over tcp, the loopback interface must have carried MPICH's bytes (else it found shared memory)
      if [[ $transport == tcp && $rc == 0 && $coll != barrier && -n $lo0 && -n $lo1 ]]; then
        local moved=$(((lo1 - lo0) / 1024))
        say mpich.lo "mpich: ${moved} KiB through lo in round $k (its tcp path: sockets, not shared memory)"
      fi
      append "$work/mpich.csv" "$k"
    elif ((k == 1)); then
      say mpich "mpich: $mpich_peer not built (needs Debian's mpich and libmpich-dev) or mpiexec.mpich missing: no MPICH column"
    fi
  fi

  # Gloo (tcp only)
  if [[ $transport == tcp ]] && has_peer gloo; then
    if [[ -x $gloo_peer && -x $tuttirun ]]; then
      rm -f "$work/gloo.csv"
      rc=0
      local skip=()
      [[ -n $gloo_skip ]] && skip=(--skip-algo "$gloo_skip")
      limited gloo "$work/gloo.log" -- "$tuttirun" --nproc-per-node="$np" --no-prefix "$gloo_peer" "${peer_flags[@]}" \
        "${skip[@]}" --csv "$work/gloo.csv" || rc=$?
      peer_outcome gloo "$k" "$rc" "$work/gloo.log" "$work/gloo.csv"
      # an algorithm that stalled past the limit is left out of the later rounds (its sizes from
      # this round are kept): each round would otherwise spend --peer-limit on it again
      if ((rc == 124 || rc == 137)) && [[ -s $work/gloo.csv ]] && ((k < rounds)); then
        local stalled
        stalled=$(tail -1 "$work/gloo.csv" | cut -d, -f4)
        gloo_skip+="${gloo_skip:+,}$stalled"
        say gloo.skip "gloo: $gloo_skip left out after round $k (stalled past --peer-limit); the sizes it measured before are kept"
      fi
      append "$work/gloo.csv" "$k"
    elif ((k == 1)); then
      say gloo "gloo: $gloo_peer or $tuttirun not built (Gloo needs libgloo-dev): no Gloo column"
    fi
  fi
}

for ((k = 1; k <= rounds; k++)); do
  ((rounds > 1)) && [[ -t 2 ]] && echo "compare.sh: $tag round $k of $rounds" >&2
  round "$k"
done

# --- one CSV: every round's rows ------------------------------------------------------------------
csv=$out/$tag.csv
{ echo "$csv_header"; cat "$work/rows.csv"; } >"$csv"
for key in "${notes_order[@]}"; do echo "# ${note[$key]}"; done
[[ $(wc -l <"$csv") -gt 1 ]] || { echo "compare.sh: no figures at all (see the notes above)" >&2; exit 1; }

# The memory-traffic bound, per rank, in units of S (the size column), at 2 ranks: see
# bench/RESULTS.md, "The memory-traffic bound" (a rank reads what it needs from wherever it lies
# and writes only its own buffers; a 64 MiB buffer is never in a cache it could skip).
case $coll in
  broadcast) traffic=2 ;;        # a non-root reads S from the root and writes S
  reduce) traffic=2.25 ;;        # the non-root reduces 3/4 into its own memory, the root the rest and copies it in
  all_reduce) traffic=2.5 ;;     # each reduces its half (reads 2 x S/2, writes S/2) and copies the other's (S/2 + S/2)
  gather) traffic=2 ;;           # the root reads both blocks (S) and writes them (S)
  all_gather) traffic=2 ;;       # each reads both blocks (S) and writes them (S)
  scatter) traffic=1 ;;          # each reads its block (S/2) and writes it (S/2)
  all_to_all) traffic=2 ;;       # each reads its two blocks (S) and writes two (S)
  reduce_scatter) traffic=1.5 ;; # each reads its block of both inputs (S) and writes it (S/2)
  *) traffic=0 ;;
esac
copy_csv=$out/$tag.copy.csv
rm -f "$copy_csv"
if ((want_bound)) && [[ -s $work/copy ]]; then
  # copy_rate,collective,transport,np,round,rounds,bytes,threads,best_GBps,best_method,memcpy_GBps,stream_GBps,movsb_GBps,traffic_per_rank_S,bound_us
  awk -v coll="$coll" -v tr="$transport" -v np="$np" -v r="$rounds" -v t="$traffic" '
    BEGIN { print "copy_rate,collective,transport,np,round,rounds,bytes,threads,best_GBps,best_method,memcpy_GBps,stream_GBps,movsb_GBps,traffic_per_rank_S,bound_us" }
    {
      delete kv
      for (i = 3; i <= NF; ++i) { split($i, a, "="); kv[a[1]] = a[2] }
      bound = t * kv["bytes"] / (2 * kv["best_GBps"] * 1e9) * 1e6
      printf "copy_rate,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%.1f\n", coll, tr, np, $1, r, kv["bytes"], kv["threads"],
             kv["best_GBps"], kv["best_method"], kv["memcpy_GBps"], kv["stream_GBps"], kv["movsb_GBps"], t, bound
    }' "$work/copy" >"$copy_csv"
fi

# --- the tables -----------------------------------------------------------------------------------
# series = library/algorithm, in the order met (tutti first); one row per size, each the best round
# of the series; "!" marks a size where a round's check failed (#wrong > 0): that round never
# counts. ratio: tutti's best / the best peer's (by rounds' bests); worst: per round, tutti's best
# against that round's best peer, the lowest; peer: the library with the best peer figure.
awk -F, -v coll="$coll" -v ip="$in_place" -v lat_max="$latency_max" -v dir="$work" -v nrounds="$rounds" \
    -v bound_bytes="$bound_bytes" -v copy_csv="$( ((want_bound)) && [[ -s $copy_csv ]] && echo "$copy_csv")" '
  NR == 1 || $2 != coll || $11 != ip { next }
  $9 == 0 && coll != "barrier" { next }  # a size too small for one element per rank
  {
    s = $1 "/" $4
    if (!(s in seen)) { seen[s] = 1; series[++ns] = s; lib[s] = $1 }
    b = $9 + 0; k = $16 + 0
    if (!(b in have)) { have[b] = 1; sizes[++nz] = b }
    bw = $14 + 0; t = $12 + 0
    if ($15 + 0 > 0) { bad[s, b] = 1; if (!((s, b) in us)) { bus[s, b] = bw; us[s, b] = t }; next }
    if (!((s, b) in good) || bw > bus[s, b]) bus[s, b] = bw
    if (!((s, b) in good) || t < us[s, b]) us[s, b] = t
    good[s, b] = 1
    c = $1 == "tutti" ? "t" : "p"
    if (!((c, k, b) in rbus) || bw > rbus[c, k, b]) rbus[c, k, b] = bw
    if (!((c, k, b) in rus) || t < rus[c, k, b]) rus[c, k, b] = t
    if (!(k in kseen)) { kseen[k] = 1; ks[++nk] = k }
  }
  function cell(v, w, x,   f) { f = v >= 100 || v == 0 ? "%.0f" : "%.3g"; return sprintf("%" w "s", sprintf(f, v) (x ? "!" : "")) }
  END {
    for (i = 2; i <= nz; ++i) for (j = i; j > 1 && sizes[j - 1] > sizes[j]; --j) { t = sizes[j]; sizes[j] = sizes[j - 1]; sizes[j - 1] = t }
    for (i = 1; i <= ns; ++i) { w[i] = length(series[i]) < 9 ? 9 : length(series[i]) }
    for (pass = 1; pass <= 2; ++pass) {
      if (pass == 1 && coll == "barrier") continue
      what = pass == 1 ? "busbw (GB/s) by size; ratio = tutti best busbw / peer best busbw" \
                       : "latency (us) for sizes up to " lat_max " B; ratio = peer best time / tutti best time"
      printf "\n# %s; each the best of %d round%s, worst = the lowest per-round ratio\n", what, nrounds, (nrounds > 1 ? "s" : "")
      printf "%12s", "bytes"
      for (i = 1; i <= ns; ++i) printf " %" w[i] "s", series[i]
      printf " %8s %8s %8s\n", "ratio", "worst", "peer"
      for (q = 1; q <= nz; ++q) {
        b = sizes[q]
        if (pass == 2 && b > lat_max) continue
        printf "%12d", b
        tb = pb = -1; pl = "-"
        better = pass == 1 ? 1 : -1
        for (i = 1; i <= ns; ++i) {
          s = series[i]
          if (!((s, b) in us)) { printf " %" w[i] "s", "-"; continue }
          v = pass == 1 ? bus[s, b] : us[s, b]
          x = ((s, b) in bad)
          printf " %s", cell(v, w[i], x)
          if (!((s, b) in good)) continue
          if (lib[s] == "tutti") { if (tb < 0 || (v - tb) * better > 0) tb = v }
          else if (pb < 0 || (v - pb) * better > 0) { pb = v; pl = lib[s] }
        }
        # the worst round: per round, tutti best / that rounds best peer
        worst = -1
        for (j = 1; j <= nk; ++j) {
          k = ks[j]
          if (pass == 1) { if (!(("t", k, b) in rbus) || !(("p", k, b) in rbus) || rbus["p", k, b] <= 0) continue; r = rbus["t", k, b] / rbus["p", k, b] }
          else { if (!(("t", k, b) in rus) || !(("p", k, b) in rus) || rus["t", k, b] <= 0) continue; r = rus["p", k, b] / rus["t", k, b] }
          if (worst < 0 || r < worst) worst = r
        }
        if (tb > 0 && pb > 0) printf " %7.2fx %8s %8s\n", pass == 1 ? tb / pb : pb / tb, worst < 0 ? "-" : sprintf("%.2fx", worst), pl
        else printf " %8s %8s %8s\n", "-", "-", pl
      }
    }
    for (i = 1; i <= ns; ++i) {
      print series[i] > (dir "/names")
      for (q = 1; q <= nz; ++q) if ((series[i], sizes[q]) in us) print sizes[q], bus[series[i], sizes[q]], us[series[i], sizes[q]] > (dir "/series." i)
    }
    # the memory-traffic bound at 64 MiB (2 ranks, shm)
    if (copy_csv == "" || !(bound_bytes in have)) exit
    best_bound = -1
    while ((getline line < copy_csv) > 0) {
      split(line, f, ",")
      if (f[1] != "copy_rate" || f[15] + 0 <= 0) continue
      n_copy++
      if (best_bound < 0 || f[15] + 0 < best_bound) { best_bound = f[15] + 0; rate = f[9]; method = f[10]; traffic = f[14]; cb = f[7] }
    }
    if (best_bound < 0) exit
    printf "\n# memory-traffic bound at %d B, 2 ranks: %s x S read + written per rank (bench/RESULTS.md); copy rate %s GB/s\n", bound_bytes, traffic, rate
    printf "# (%s; one thread copying %d B, best of %d rounds x 10), so at least %s x S / (2 x rate) = %.1f us per call\n", method, cb, n_copy, traffic, best_bound
    printf "%-28s %12s %12s\n", "library/algorithm", "time (us)", "bound/time"
    for (i = 1; i <= ns; ++i) {
      s = series[i]
      if (!((s, bound_bytes) in good)) continue
      printf "%-28s %12.1f %12.2f\n", s, us[s, bound_bytes], best_bound / us[s, bound_bytes]
    }
  }' "$csv"

# --- the plot -------------------------------------------------------------------------------------
png=$out/$tag.png
if command -v gnuplot >/dev/null && [[ -f $work/names ]]; then
  term=png
  gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 && term=pngcairo
  plots_bw="" plots_us="" plots_bar="" i=0
  while read -r name; do
    i=$((i + 1))
    [[ -f $work/series.$i ]] || continue
    sort -n "$work/series.$i" >"$work/s.$i"
    plots_bw+="${plots_bw:+, }'$work/s.$i' using 1:(\$2 > 0 ? \$2 : 1/0) with linespoints title '$name'"
    plots_us+="${plots_us:+, }'$work/s.$i' using 1:(\$3 > 0 ? \$3 : 1/0) with linespoints title '$name'"
    plots_bar+="${plots_bar:+, }'$work/s.$i' using ($i):3 with points pointsize 2 title '$name'"
  done <"$work/names"
  placement_text=$( ((in_place)) && echo "in place" || echo "out of place")
  {
    echo "set terminal $term noenhanced size 1400,560"
    echo "set output '$png'"
    echo "set multiplot layout 1,$([[ $coll == barrier ]] && echo 1 || echo 2) title '$coll over $transport, $np ranks, $placement_text, best of $rounds round(s) ($(date -u +%F))'"
    echo "set grid; set key below; set format y '%g'"
    if [[ $coll == barrier ]]; then  # no sizes: one point per library/algorithm
      echo "set logscale y 10; set xrange [0:$((i + 1))]; set xtics 1; set xlabel 'library/algorithm (see key)'"
      echo "set title 'barrier latency'; set ylabel 'time per call (us)'; plot $plots_bar"
    else
      echo "set logscale x 2; set logscale y 10; set format x '%.0b%B'; set xlabel 'bytes'"
      echo "set title 'bus bandwidth'; set ylabel 'busbw (GB/s)'; plot $plots_bw"
      echo "set title 'latency'; set ylabel 'time per call (us)'; plot $plots_us"
    fi
    echo "unset multiplot"
  } >"$work/plot.gp"
  if gnuplot "$work/plot.gp" 2>"$work/gnuplot.err"; then
    echo; echo "# plot: $png ($term)"
  else
    echo "# plot: gnuplot failed: $(head -3 "$work/gnuplot.err" | tr '\n' ' ')"
  fi
else
  echo "# plot: gnuplot not installed (Debian: gnuplot-nox): no PNG"
fi
echo "# csv: $csv"
[[ -f $copy_csv ]] && echo "# copy rate csv: $copy_csv"
exit 0
