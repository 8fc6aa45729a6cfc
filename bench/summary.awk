# The summary tables of bench/RESULTS.md from compare.sh's CSVs (bench/results/*.csv):
#   awk -f bench/summary.awk bench/results/*.csv
# Table 1, one row per cell (in the order shm, tcp; ranks; broadcast ... barrier): collective,
# transport, ranks and size (16 B, 1 MiB, 64 MiB; barrier has
# one row), in the placement compare.sh compares (in place for broadcast and reduce, out of place for
# the others): tutti's best algorithm beside Open MPI, MPICH and Gloo, each the best of its rounds;
# at 16 B and for barrier the time per call in µs (lower is better), else busbw in GB/s (higher is
# better). ratio: tutti against the best peer, above 1 when tutti is ahead (busbw: tutti / peer;
# time: peer / tutti). worst round: the same ratio in each round (tutti's best algorithm in that
# round against that round's best peer), the lowest. Rounds whose check failed (#wrong > 0) are
# left out. CSVs from before the rounds (no round column) count as one round.
# Table 2 (where compare.sh measured the copy rate: shm, 2 ranks, 64 MiB; its *.copy.csv files):
# each collective's memory-traffic bound (bench/RESULTS.md) beside tutti's and the best peer's
# time, as bound / time (1 = at the bound).
BEGIN {
  FS = ","
  split("16 1048576 67108864", cells, " ")
  label[16] = "16 B (µs)"; label[1048576] = "1 MiB (GB/s)"; label[67108864] = "64 MiB (GB/s)"; label[0] = "- (µs)"
  split("openmpi mpich gloo", peers, " ")
  n = split("broadcast reduce all_reduce gather all_gather scatter all_to_all reduce_scatter barrier", names, " ")
  for (i = 1; i <= n; ++i) corder[names[i]] = i
}
# rows in the order of the tables: transport (shm, tcp, others), ranks, collective
function order(t,   f) { split(t, f, SUBSEP); return (f[2] == "shm" ? 0 : f[2] == "tcp" ? 1 : 2) * 1e6 + f[3] * 100 + corder[f[1]] }
FNR == 1 { copyfile = ($1 == "copy_rate"); next }
copyfile {
  # copy_rate,collective,transport,np,round,rounds,bytes,threads,best_GBps,best_method,...,traffic_per_rank_S,bound_us
  t = $2 SUBSEP $3 SUBSEP $4
  if (!(t in bound) || $15 + 0 < bound[t]) { bound[t] = $15 + 0; rate[t] = $9; method[t] = $10; traffic[t] = $14; bbytes[t] = $7 }
  ncopy[t]++
  next
}
{
  c = $2; ip = (c == "broadcast" || c == "reduce") ? 1 : 0
  if ($11 != ip || $15 + 0 > 0) next
  size = $9 + 0
  # sizes of np pieces are rounded down to a multiple of np elements (16 B at 3 ranks: 12)
  unit = $5 * ($6 == "double" || $6 == "int64" ? 8 : $6 == "uint8" ? 1 : $6 == "float" || $6 == "int32" ? 4 : 2)
  if (c == "barrier") size = 0
  else if (size <= 16 && size > 16 - unit) size = 16
  else if (size <= 1048576 && size > 1048576 - unit) size = 1048576
  else if (size <= 67108864 && size > 67108864 - unit) size = 67108864
  else next
  t = c SUBSEP $3 SUBSEP $5
  if (!(t in tseen)) { tseen[t] = 1; tags[++nt] = t }
  lib = $1; k = NF >= 16 ? $16 + 0 : 1; r = NF >= 17 ? $17 + 0 : 1
  if (!(t in nr) || r > nr[t]) nr[t] = r
  timed = (size == 16 || size == 0)
  v = timed ? $12 + 0 : $14 + 0
  if (v <= 0) next
  key = t SUBSEP size SUBSEP lib
  if (!(key in best) || (timed ? v < best[key] : v > best[key])) { best[key] = v; alg[key] = $4 }
  if (!(key in btime) || $12 + 0 < btime[key]) { btime[key] = $12 + 0; talg[key] = $4 }
  rk = t SUBSEP size SUBSEP (lib == "tutti" ? "t" : "p") SUBSEP k
  if (!(rk in rbest) || (timed ? v < rbest[rk] : v > rbest[rk])) rbest[rk] = v
  rounds_of[t, size, k] = 1
  if (!((t, size) in cseen)) cseen[t, size] = 1
}
function cell(v) { return v == "" ? "-" : sprintf("%.3g", v) }
function get(key) { return (key in best) ? best[key] : "" }
END {
  for (i = 2; i <= nt; ++i) for (j = i; j > 1 && order(tags[j - 1]) > order(tags[j]); --j) { x = tags[j]; tags[j] = tags[j - 1]; tags[j - 1] = x }
  print "| collective | transport | ranks | size | rounds | tutti (alg) | Open MPI | MPICH | Gloo | ratio | worst round |"
  print "|---|---|---|---|---|---|---|---|---|---|---|"
  for (i = 1; i <= nt; ++i) {
    t = tags[i]
    split(t, f, SUBSEP)
    for (j = 0; j <= 3; ++j) {
      size = j == 0 ? 0 : cells[j]
      if (!((t, size) in cseen)) continue
      timed = (size == 16 || size == 0)
      tv = get(t SUBSEP size SUBSEP "tutti")
      pv = ""
      out = ""
      for (q = 1; q <= 3; ++q) {
        v = get(t SUBSEP size SUBSEP peers[q])
        out = out " | " cell(v)
        if (v != "" && (pv == "" || (timed ? v < pv : v > pv))) pv = v
      }
      ratio = (tv == "" || pv == "") ? "-" : sprintf("%.2fx", timed ? pv / tv : tv / pv)
      worst = ""
      for (k = 1; k <= nr[t]; ++k) {
        a = t SUBSEP size SUBSEP "t" SUBSEP k; b = t SUBSEP size SUBSEP "p" SUBSEP k
        if (!(a in rbest) || !(b in rbest)) continue
        rr = timed ? rbest[b] / rbest[a] : rbest[a] / rbest[b]
        if (worst == "" || rr < worst) worst = rr
      }
      printf "| %s | %s | %s | %s | %d | %s%s | %s | %s |\n", f[1], f[2], f[3], label[size], nr[t],
             tv == "" ? "-" : cell(tv) " (" alg[t SUBSEP size SUBSEP "tutti"] ")", out, ratio, worst == "" ? "-" : sprintf("%.2fx", worst)
    }
  }
  nb = 0
  for (i = 1; i <= nt; ++i) if (tags[i] in bound) nb++
  if (!nb) exit
  print ""
  print "| collective | transport | ranks | traffic per rank | copy rate GB/s (method) | bound µs | tutti µs (alg) | bound / time | best peer µs | bound / time |"
  print "|---|---|---|---|---|---|---|---|---|---|"
  for (i = 1; i <= nt; ++i) {
    t = tags[i]
    if (!(t in bound)) continue
    split(t, f, SUBSEP)
    s = bbytes[t] + 0
    tk = t SUBSEP s SUBSEP "tutti"
    tt = (tk in btime) ? btime[tk] : ""
    pt = ""; pl = ""
    for (q = 1; q <= 3; ++q) {
      pk = t SUBSEP s SUBSEP peers[q]
      if ((pk in btime) && (pt == "" || btime[pk] < pt)) { pt = btime[pk]; pl = peers[q] }
    }
    printf "| %s | %s | %s | %s x S | %s (%s) | %.0f | %s | %s | %s | %s |\n", f[1], f[2], f[3], traffic[t], rate[t], method[t], bound[t],
           tt == "" ? "-" : sprintf("%.0f (%s)", tt, talg[tk]), tt == "" ? "-" : sprintf("%.2f", bound[t] / tt),
           pt == "" ? "-" : sprintf("%.0f (%s)", pt, pl), pt == "" ? "-" : sprintf("%.2f", bound[t] / pt)
  }
}
