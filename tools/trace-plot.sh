#!/usr/bin/env bash
# Draws a tutti trace as a PNG timeline: one row per rank (and a thin row under it for the
# operations posted to its progress engine, where it has any), each operation a box from its start
# to its end, coloured by its name, with a legend; the x axis in milliseconds from the first
# operation. Needs gnuplot (Debian: gnuplot-nox) and awk.
# Usage: tools/trace-plot.sh trace.json out.png
#   trace.json: the trace tuttirun merges with TUTTI_TRACE=dir (dir/trace.json), or one process's
#   dir/tutti-trace-<host>-<pid>.json: one event a line, as both are written.
set -euo pipefail

me=$(basename "$0")
die() { echo "$me: $*" >&2; exit 1; }
[[ $# -eq 2 ]] || { echo "usage: $me trace.json out.png" >&2; exit 2; }
in=$1 png=$2
[[ -e $in ]] || die "no such file: $in"
[[ -f $in && -r $in ]] || die "not a readable file: $in"
[[ -s $in ]] || die "$in is empty"
command -v gnuplot >/dev/null || die "needs gnuplot (Debian: gnuplot-nox)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One pass over the events (one a line). Top-level members come before "args" in tutti's events,
# so the first "pid", "tid", "ts", "dur" and "name" of a line are the event's own. Writes
#   $tmp/boxes: for each name, a block of "x_lo x_hi y_lo y_hi" lines (gnuplot index i), in the
#               order of $tmp/names;
#   $tmp/names: one name a line;  $tmp/ytics: the rows' labels;  $tmp/info: "events ranks span_ms".
awk -v tmp="$tmp" '
function field(line, key,    re) {
  re = "\"" key "\":"
  if (!match(line, re)) return ""
  line = substr(line, RSTART + RLENGTH)
  if (substr(line, 1, 1) == "\"") {
    if (!match(line, /^"([^"\\]|\\.)*"/)) return ""
    return substr(line, 2, RLENGTH - 2)
  }
  if (!match(line, /^-?[0-9.eE+-]+/)) return ""
  return substr(line, 1, RLENGTH)
}
# Microseconds since the first event: the whole part and the fraction apart, as an epoch time in
# microseconds has more digits than a double keeps.
BEGIN { nnames = 0; npids = 0; n = 0; span = 0; unsafe = "[\"\\\\" sprintf("%c", 39) "]" }  # a quote, a backslash, an apostrophe
function whole(t) { return (t ~ /[eE]/) ? t + 0 : int(t) }
function frac(t,    i) { if (t ~ /[eE]/) return 0; i = index(t, "."); return i ? ("0" substr(t, i)) + 0 : 0 }
/"ph":"M"/ {
  pid = field($0, "pid"); tid = field($0, "tid")
  what = field($0, "name")
  sub(/^.*"args":\{/, "")
  label = field($0, "name")
  if (what == "process_name") pname[pid] = label
  if (what == "thread_name" && label ~ /, posted$/) posted_tid[pid SUBSEP tid] = 1
  next
}
/"ph":"X"/ {
  pid = field($0, "pid"); tid = field($0, "tid"); ts = field($0, "ts"); dur = field($0, "dur")
  name = field($0, "name")
  if (pid == "" || ts == "") next
  if (dur == "") dur = 0
  if (name == "") name = "?"
  gsub(unsafe, "_", name)
  n++
  epid[n] = pid; etid[n] = tid; ewhole[n] = whole(ts); efrac[n] = frac(ts); edur[n] = dur + 0; ename[n] = name
  if (!(pid in seen)) { seen[pid] = 1; npids++; pids[npids] = pid + 0 }
  if (!(name in nameidx)) { nameidx[name] = nnames; names[nnames++] = name }
  if (n == 1 || ewhole[n] < w0 || (ewhole[n] == w0 && efrac[n] < f0)) { w0 = ewhole[n]; f0 = efrac[n] }
}
END {
  if (n == 0) exit 3
  # Ranks in order, rank 0 on top.
  for (i = 2; i <= npids; i++) { v = pids[i]; for (j = i - 1; j >= 1 && pids[j] > v; j--) pids[j + 1] = pids[j]; pids[j + 1] = v }
  for (i = 1; i <= npids; i++) row[pids[i]] = -(i - 1)
  for (k = 1; k <= n; k++) {
    x0 = ((ewhole[k] - w0) + (efrac[k] - f0)) / 1000
    x1 = x0 + edur[k] / 1000
    if (x1 > span) span = x1
    y = row[epid[k] + 0]
    if ((epid[k] SUBSEP etid[k]) in posted_tid) { lo = y - 0.42; hi = y - 0.24; hasposted[epid[k] + 0] = 1 }
    else { lo = y - 0.18; hi = y + 0.38 }
    block[nameidx[ename[k]]] = block[nameidx[ename[k]]] sprintf("%.6f %.6f %.3f %.3f\n", x0, x1, lo, hi)
  }
  for (i = 0; i < nnames; i++) {
    printf "%s\n\n", block[i] > (tmp "/boxes")
    print names[i] > (tmp "/names")
  }
  tics = ""
  for (i = 1; i <= npids; i++) {
    p = pids[i]
    label = (p in pname) ? pname[p] : "rank " p
    gsub(unsafe, "_", label)
    tics = tics (tics == "" ? "" : ", ") sprintf("\"%s\" %.2f", label, row[p] + 0.1)
    if (p in hasposted) tics = tics sprintf(", \"posted\" %.2f", row[p] - 0.33)
  }
  print tics > (tmp "/ytics")
  print n, npids, span > (tmp "/info")
}' "$in" || {
  rc=$?
  [[ $rc == 3 ]] && die "no operations (\"ph\":\"X\" events) in $in: nothing to draw"
  die "cannot read $in (awk exited with status $rc)"
}

read -r events ranks span <"$tmp/info"
nnames=$(wc -l <"$tmp/names")

# pngcairo where gnuplot has it, else the libgd png terminal.
if gnuplot -e 'set terminal' 2>&1 | grep -qw pngcairo; then
  term="pngcairo noenhanced size 1400,$((160 + 70 * ranks)) font ',10'"
else
  term="png noenhanced size 1400,$((160 + 70 * ranks))"
fi

{
  echo "set terminal $term"
  echo "set output '${png//\'/\'\'}'"
  echo "set title '$(basename "${in//\'/}"): $events operations of $ranks ranks'"
  echo "set xlabel 'ms since the first operation'"
  echo "set xrange [0:$span * 1.02 + 1e-6]"
  echo "set yrange [$(( -ranks )) + 0.45:0.6]"
  echo "set ytics ($(cat "$tmp/ytics"))"
  echo "set ytics nomirror scale 0"
  echo "set grid xtics"
  echo "set key outside right top title 'operation'"
  echo "set style fill solid 0.85 border -1"
  # 16 colours that tell apart, then again.
  colours=(0x1f77b4 0xff7f0e 0x2ca02c 0xd62728 0x9467bd 0x8c564b 0xe377c2 0x7f7f7f 0xbcbd22 0x17becf
           0x393b79 0xe7ba52 0x637939 0xad494a 0x7b4173 0x3182bd)
  printf 'plot '
  i=0
  while IFS= read -r name; do
    ((i > 0)) && printf ', \\\n     '
    printf "'%s' index %d using (\$1+\$2)/2:(\$3+\$4)/2:1:2:3:4 with boxxyerror lc rgb %d title '%s'" \
      "$tmp/boxes" "$i" "$((colours[i % ${#colours[@]}]))" "$name"
    i=$((i + 1))
  done <"$tmp/names"
  echo
} >"$tmp/plot.gp"

gnuplot "$tmp/plot.gp" 2>"$tmp/gnuplot.err" || die "gnuplot failed: $(cat "$tmp/gnuplot.err")"
[[ -s $png ]] || die "gnuplot wrote no $png: $(cat "$tmp/gnuplot.err")"
echo "$me: $events operations of $ranks ranks ($nnames kinds, ${span} ms) drawn in $png"
