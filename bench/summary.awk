# The summary table of bench/RESULTS.md from compare.sh's CSVs (bench/results/*.csv):
#   awk -f bench/summary.awk bench/results/*_shm_np2.csv ...
# One row per CSV (collective, transport, ranks): at 16 B (time), 1 MiB and 64 MiB (busbw), tutti's
# best algorithm beside Open MPI and Gloo, in the placement compare.sh compares (in place for
# broadcast and reduce, out of place for the others), and the ratio tutti / the best peer (for
# time: the best peer's / tutti's, so above 1 means tutti is faster everywhere). Sizes whose check
# failed (#wrong > 0) are left out.
BEGIN {
  FS = ","
  print "| collective | transport | ranks | 16 B: tutti µs (alg) | Open MPI | Gloo | ratio | 1 MiB: tutti GB/s (alg) | Open MPI | Gloo | ratio | 64 MiB: tutti GB/s (alg) | Open MPI | Gloo | ratio |"
  print "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
}
FNR == 1 { if (NR > 1) row(); delete best; delete alg; coll = ""; next }
{
  c = $2; ip = (c == "broadcast" || c == "reduce") ? 1 : 0
  if ($11 != ip || $15 + 0 > 0) next
  coll = c; tr = $3; np = $5
  size = $9 + 0
  if (c == "barrier") size = 16  # barrier: one row, time only
  if (size != 16 && size != 1048576 && size != 67108864) next
  v = size == 16 ? $12 + 0 : $14 + 0
  if (v <= 0) next
  key = $1 SUBSEP size
  if (!(key in best) || (size == 16 ? v < best[key] : v > best[key])) { best[key] = v; alg[key] = $4 }
}
END { row() }
function cell(v, digits) { return v == "" ? "-" : sprintf("%." digits "g", v) }
function row(   out, s, t, m, g, peer, r, i, sizes) {
  if (coll == "") return
  out = "| " coll " | " tr " | " np
  split("16 1048576 67108864", sizes, " ")
  for (i = 1; i <= 3; ++i) {
    s = sizes[i]
    t = (("tutti" SUBSEP s) in best) ? best["tutti" SUBSEP s] : ""
    m = (("openmpi" SUBSEP s) in best) ? best["openmpi" SUBSEP s] : ""
    g = (("gloo" SUBSEP s) in best) ? best["gloo" SUBSEP s] : ""
    peer = m
    if (g != "" && (peer == "" || (s == 16 ? g < peer : g > peer))) peer = g
    r = (t == "" || peer == "") ? "-" : sprintf("%.2fx", s == 16 ? peer / t : t / peer)
    out = out " | " (t == "" ? "-" : cell(t, 3) " (" alg["tutti" SUBSEP s] ")") " | " cell(m, 3) " | " cell(g, 3) " | " r
  }
  print out " |"
}
