#!/usr/bin/env bash
# One collective, one transport, one world size: tutti (tutti-bench, each of its algorithms that has
# a schedule for the collective there, automatic included) beside Open MPI and Gloo (bench/peers/),
# in one run. Prints one table of busbw per library/algorithm by size, with the ratio of tutti's
# best to the peers' best, and one of latency for the small sizes; writes the merged CSV and a PNG
# (busbw and latency against size, log-log, one line per library/algorithm) into the output dir.
#
#   bench/compare.sh --collective all_gather --transport shm --np 2 [-b 1K -e 16M -f 2 -n 20 -w 5]
#       [-d float] [-o sum] [-r 0] [--in-place 0|1] [--build DIR] [--tutti-bench PATH]
#       [--tutti-csv FILE] [--out DIR] [--latency-max BYTES] [--peer-limit SECONDS]
#
# Peers by transport: shm: Open MPI with --mca btl self,vader (its shared-memory btl, single copy
# by CMA as Open MPI defaults; retried with btl_vader_single_copy_mechanism none, and said so,
# where CMA fails); tcp: Open MPI with --mca btl self,tcp on lo, and Gloo (always tcp).
# Every run checks its results (-c 1); a size whose #wrong is not 0 is marked "!" and is never
# anyone's best. --in-place 0|1 picks the placement compared; by default the one tutti-bench has
# (in place for broadcast and reduce, out of place for the others).
# --peer-limit S (default 300): stop the Gloo run after S seconds and keep the sizes it measured
# (Gloo's tcp pairs can stall for seconds per call at some sizes, e.g. all_reduce at 4 ranks).
# --tutti-csv FILE: take tutti's figures from a CSV tutti-bench wrote earlier instead of running it.
# The tutti-bench binary: --tutti-bench, else the first tutti-bench under the build dir; without
# one, the peers alone are compared (and the script says so).
# Sizes follow nccl-tests (bench/peers/peer_bench.hpp): for all_gather, gather, scatter,
# reduce_scatter and all_to_all, bytes is the whole buffer of np pieces, rounded down to a
# multiple of np elements.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
coll="" transport="" np="" build="$here/../build" tutti_bench="" tutti_csv="" out="$here/out"
in_place="" latency_max=65536 peer_limit=300
sweep=()
usage() { sed -n '8,10p' "$0" | sed 's/^# \{0,3\}//' >&2; exit 2; }
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
    -b | -e | -f | -n | -w | -d | -o | -r) sweep+=("$1" "$2") ;;
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
# the placement tutti-bench has for every collective: broadcast and reduce in place only,
# all_to_all and reduce_scatter out of place only; out of place where it has both
if [[ -z $in_place ]]; then
  case $coll in broadcast | reduce) in_place=1 ;; *) in_place=0 ;; esac
fi
[[ $coll == barrier ]] && in_place=0
[[ $in_place == 0 || $in_place == 1 ]] || { echo "compare.sh: --in-place: 0 or 1 (got '$in_place')" >&2; exit 2; }

tuttirun=$build/tools/tuttirun
mpi_peer=$build/bench/tutti_peer_mpi_bench
gloo_peer=$build/bench/tutti_peer_gloo_bench
if [[ -z $tutti_bench && -z $tutti_csv ]]; then
  tutti_bench=$(find "$build" -name tutti-bench -type f -perm -u+x 2>/dev/null | head -1 || true)
fi
mkdir -p "$out"
tag=${coll}_${transport}_np${np}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TUTTI_SHM_ARENA_BYTES=${TUTTI_SHM_ARENA_BYTES:-$((512 << 20))}  # room for the largest sizes

echo "# compare: $coll over $transport, $np ranks, ${sweep[*]:-default sizes}, $( ((in_place)) && echo in place || echo out of place)"
echo "# machine: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus"
notes=()

# --- tutti: every algorithm that has a schedule for the collective on this transport ----------
if [[ -n $tutti_csv ]]; then
  cp "$tutti_csv" "$work/tutti.csv"
  notes+=("tutti: figures from $tutti_csv (not run now)")
elif [[ -n $tutti_bench && -x $tutti_bench ]]; then
  : >"$work/tutti.csv"
  algos=(automatic ring tree recursive_doubling direct)
  [[ $transport == shm ]] && algos+=(shared_memory)  # native is tutti::mpi's, not compared here
  for algo in "${algos[@]}"; do
    if "$tutti_bench" --collective "$coll" --transport "$transport" --algo "$algo" --np "$np" "${sweep[@]}" -c 1 \
      --csv "$work/t.$algo.csv" >"$work/t.$algo.log" 2>&1; then
      # the algorithm column says what was asked for (automatic stays automatic)
      awk -F, -v OFS=, -v a="$algo" 'NR > 1 { $4 = a; print }' "$work/t.$algo.csv" >>"$work/tutti.csv"
    else
      notes+=("tutti $algo: not run ($(grep -v '^\s*$' "$work/t.$algo.log" | tail -1 | cut -c1-120))")
    fi
  done
else
  notes+=("tutti: no tutti-bench (pass --tutti-bench PATH or build it under $build): peers only")
fi

# --- the peers ------------------------------------------------------------------------------------
peer_flags=(--collective "$coll" "${sweep[@]}" -c 1)
mpirun_flags=(--allow-run-as-root --oversubscribe --bind-to none -np "$np")
if [[ -x $mpi_peer ]] && command -v mpirun >/dev/null; then
  if [[ $transport == shm ]]; then
    btl=(--mca btl self,vader)
  else
    btl=(--mca btl self,tcp --mca btl_tcp_if_include lo)
  fi
  if ! mpirun "${mpirun_flags[@]}" "${btl[@]}" "$mpi_peer" "${peer_flags[@]}" --transport "$transport" \
    --csv "$work/openmpi.csv" >"$work/openmpi.log" 2>&1; then
    if [[ $transport == shm ]] &&
      mpirun "${mpirun_flags[@]}" "${btl[@]}" --mca btl_vader_single_copy_mechanism none "$mpi_peer" "${peer_flags[@]}" \
        --transport "$transport" --csv "$work/openmpi.csv" >"$work/openmpi.log" 2>&1; then
      notes+=("openmpi: the default single copy (CMA) failed here; ran with btl_vader_single_copy_mechanism none")
    else
      notes+=("openmpi: failed: $(tail -3 "$work/openmpi.log" | tr '\n' ' ' | cut -c1-200)")
      rm -f "$work/openmpi.csv"
    fi
  fi
  [[ -f $work/openmpi.csv ]] && notes+=("openmpi: $(head -1 "$work/openmpi.log" | sed 's/^# //')")
else
  notes+=("openmpi: $mpi_peer not built (needs libopenmpi-dev) or mpirun missing: no Open MPI column")
fi
if [[ $transport == tcp ]]; then
  if [[ -x $gloo_peer && -x $tuttirun ]]; then
    rc=0
    timeout "$peer_limit" "$tuttirun" --nproc-per-node="$np" --no-prefix "$gloo_peer" "${peer_flags[@]}" \
      --csv "$work/gloo.csv" >"$work/gloo.log" 2>&1 || rc=$?
    if ((rc == 0)); then
      notes+=("gloo: $(head -1 "$work/gloo.log" | sed 's/^# //')")
    elif ((rc == 124)) && [[ -s $work/gloo.csv ]]; then
      notes+=("gloo: stopped after ${peer_limit} s (--peer-limit) in $(tail -1 "$work/gloo.csv" | cut -d, -f4) at $(tail -1 "$work/gloo.csv" | cut -d, -f9) B; what it measured is kept, the rest is missing")
    else
      notes+=("gloo: failed: $(tail -3 "$work/gloo.log" | tr '\n' ' ' | cut -c1-200)")
      rm -f "$work/gloo.csv"
    fi
  else
    notes+=("gloo: $gloo_peer or $tuttirun not built (Gloo needs libgloo-dev): no Gloo column")
  fi
fi

# --- one CSV --------------------------------------------------------------------------------------
csv=$out/$tag.csv
echo "library,collective,transport,algorithm,np,dtype,op,root,bytes,count,in_place,time_us,algbw_GBps,busbw_GBps,wrong" >"$csv"
for f in "$work/tutti.csv" "$work/openmpi.csv" "$work/gloo.csv"; do
  [[ -f $f ]] && grep -v '^library,' "$f" | grep . >>"$csv" || true
done
for n in "${notes[@]}"; do echo "# $n"; done
[[ $(wc -l <"$csv") -gt 1 ]] || { echo "compare.sh: no figures at all (see the notes above)" >&2; exit 1; }

# --- the tables -----------------------------------------------------------------------------------
# series = library/algorithm, in the order met (tutti first); one row per size; "!" marks a size
# whose check failed (#wrong > 0), never counted as a best.
awk -F, -v coll="$coll" -v ip="$in_place" -v lat_max="$latency_max" -v dir="$work" '
  NR == 1 || $2 != coll || $11 != ip { next }
  $9 == 0 && coll != "barrier" { next }  # a size too small for one element per rank
  {
    s = $1 "/" $4
    if (!(s in seen)) { seen[s] = 1; series[++ns] = s; lib[s] = $1 }
    b = $9 + 0
    if (!(b in have)) { have[b] = 1; sizes[++nz] = b }
    bus[s, b] = $14 + 0; us[s, b] = $12 + 0; bad[s, b] = ($15 + 0 > 0)
    print b, $14, $12 > (dir "/series." ns_of(s))
  }
  function ns_of(x,   i) { for (i = 1; i <= ns; ++i) if (series[i] == x) return i }
  function cell(v, w, x,   f) { f = v >= 100 || v == 0 ? "%.0f" : "%.3g"; return sprintf("%" w "s", sprintf(f, v) (x ? "!" : "")) }
  END {
    for (i = 2; i <= nz; ++i) for (j = i; j > 1 && sizes[j - 1] > sizes[j]; --j) { t = sizes[j]; sizes[j] = sizes[j - 1]; sizes[j - 1] = t }
    for (i = 1; i <= ns; ++i) { w[i] = length(series[i]) < 9 ? 9 : length(series[i]) }
    for (pass = 1; pass <= 2; ++pass) {
      if (pass == 1 && coll == "barrier") continue
      printf "\n# %s\n", pass == 1 ? "busbw (GB/s) by size; ratio = tutti best busbw / peer best busbw" \
                                   : "latency (us) for sizes up to " lat_max " B; ratio = peer best time / tutti best time"
      printf "%12s", "bytes"
      for (i = 1; i <= ns; ++i) printf " %" w[i] "s", series[i]
      printf " %8s\n", "ratio"
      for (k = 1; k <= nz; ++k) {
        b = sizes[k]
        if (pass == 2 && b > lat_max) continue
        printf "%12d", b
        tb = pb = -1
        for (i = 1; i <= ns; ++i) {
          s = series[i]
          if (!((s, b) in bus)) { printf " %" w[i] "s", "-"; continue }
          v = pass == 1 ? bus[s, b] : us[s, b]
          printf " %s", cell(v, w[i], bad[s, b])
          if (bad[s, b]) continue
          better = pass == 1 ? 1 : -1
          if (lib[s] == "tutti") { if (tb < 0 || (v - tb) * better > 0) tb = v }
          else if (pb < 0 || (v - pb) * better > 0) pb = v
        }
        if (tb > 0 && pb > 0) printf " %7.2fx\n", pass == 1 ? tb / pb : pb / tb
        else printf " %8s\n", "-"
      }
    }
    for (i = 1; i <= ns; ++i) print series[i] > (dir "/names")
  }' "$csv"

# --- the plot -------------------------------------------------------------------------------------
png=$out/$tag.png
if command -v gnuplot >/dev/null && [[ -f $work/names ]]; then
  term=png
  gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 && term=pngcairo
  plots_bw="" plots_us="" plots_bar="" i=0
  while read -r name; do
    i=$((i + 1))
    sort -n "$work/series.$i" >"$work/s.$i"
    plots_bw+="${plots_bw:+, }'$work/s.$i' using 1:(\$2 > 0 ? \$2 : 1/0) with linespoints title '$name'"
    plots_us+="${plots_us:+, }'$work/s.$i' using 1:(\$3 > 0 ? \$3 : 1/0) with linespoints title '$name'"
    plots_bar+="${plots_bar:+, }'$work/s.$i' using ($i):3 with points pointsize 2 title '$name'"
  done <"$work/names"
  placement=$( ((in_place)) && echo "in place" || echo "out of place")
  {
    echo "set terminal $term noenhanced size 1400,560"
    echo "set output '$png'"
    echo "set multiplot layout 1,$([[ $coll == barrier ]] && echo 1 || echo 2) title '$coll over $transport, $np ranks, $placement ($(date -u +%F))'"
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
