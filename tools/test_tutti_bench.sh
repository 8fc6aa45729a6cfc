#!/usr/bin/env bash
# Tests of tutti-bench (registered in tests/CMakeLists.txt). No timing is asserted.
#
#   test_tutti_bench.sh BENCH run NP [flags...]   runs BENCH flags... --csv FILE; expects exit 0,
#       the exact CSV header, rows for every collective asked for (all of the table's for --collective all)
#       in the placements tutti has, np = NP, bytes consistent with count, and #wrong 0 everywhere
#       (checked, never -1), and "Out of bounds values : 0 OK" in the table.
#   test_tutti_bench.sh BENCH bad_flags           every bad invocation exits 2 naming the problem.
#   test_tutti_bench.sh BENCH outputs             --osu table and --json file (inproc, 3 ranks).
# TUTTI_BENCH_PREFIX, if set, is a launcher command put before BENCH in `run` (mpiexec -np 3 ...).
set -u
bench=$1 mode=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

case $mode in
run)
  np=$1
  shift
  # shellcheck disable=SC2086
  ${TUTTI_BENCH_PREFIX:-} "$bench" "$@" --csv "$tmp/out.csv" > "$tmp/stdout" 2> "$tmp/stderr"
  rc=$?
  cat "$tmp/stdout"
  [[ $rc == 0 ]] || { cat "$tmp/stderr" >&2; fail "tutti-bench $* exited $rc"; }
  header=$(head -n1 "$tmp/out.csv")
  want=library,collective,transport,algorithm,np,dtype,op,root,bytes,count,in_place,time_us,algbw_GBps,busbw_GBps,wrong
  [[ $header == "$want" ]] || fail "CSV header is '$header'"
  grep -q '^# Out of bounds values : 0 OK$' "$tmp/stdout" || fail "no '# Out of bounds values : 0 OK' line"
  # Which collectives were asked for, and the placements each has in tutti (0 out, 1 in).
  colls=all_reduce
  args=" $* "
  if [[ $args =~ \ --collective\ ([a-z_,]+)\  ]]; then colls=${BASH_REMATCH[1]}; fi
  # The table, as tutti-bench derives it: name, size column (np blocks or 1), placements.
  "$bench" --list-collectives > "$tmp/table" || fail "tutti-bench --list-collectives exited $?"
  [[ $colls == all ]] && colls=$(awk '{ printf "%s%s", NR > 1 ? "," : "", $1 }' "$tmp/table")
  skipped=$(sed -n 's/^tutti-bench: \([a-z_]*\): skipped, .*/\1/p' "$tmp/stderr" | tr '\n' ' ')
  awk -F, -v np="$np" -v colls="$colls" -v skipped="$skipped" -v table="$tmp/table" '
    BEGIN {
      while ((getline line < table) > 0) { split(line, f, " "); blocks_of[f[1]] = f[2]; places[f[1]] = f[3] }
    }
    FNR == 1 { next }
    {
      rows[$2 "," $11]++
      if ($1 != "tutti") { print "library " $1; bad = 1 }
      if ($5 != np) { print "np " $5 " in " $0; bad = 1 }
      if ($15 != "0") { print "wrong elements (or unchecked): " $0; bad = 1 }
      if ($12 + 0 <= 0) { print "no time: " $0; bad = 1 }
      # the size column: count elements, times np for the per-rank-block collectives
      w = ($6 == "double" || $6 == "int64") ? 8 : ($6 == "int32" || $6 == "float") ? 4 : ($6 == "uint8") ? 1 : 2
      if (!($2 in blocks_of)) { print "collective " $2 " is not in the table"; bad = 1 }
      blocks = blocks_of[$2] == "np" ? np : 1
      # (a v-collective: the sum of the counts, which every --counts pattern keeps at np blocks)
      if ($2 != "barrier" && $9 != $10 * w * blocks) { print "bytes " $9 " != count " $10 " x " w " x " blocks; bad = 1 }
    }
    END {
      n = split(colls, c, ",")
      for (i = 1; i <= n; i++) {
        if (index(" " skipped, " " c[i] " ")) continue
        for (k = 0; k <= 1; k++) {
          has = (c[i] "," k) in rows
          if (has != (index(places[c[i]], k) > 0)) { print c[i] " in_place=" k ": " (has ? "unexpected rows" : "no rows"); bad = 1 }
        }
      }
      exit bad
    }' "$tmp/out.csv" || fail "CSV check failed (above); CSV:
$(cat "$tmp/out.csv")"
  echo "PASS: $(($(wc -l < "$tmp/out.csv") - 1)) rows, every result checked and right"
  ;;

bad_flags)
  # flags... | what the message must contain
  cases=(
    "-b 1X|-b 1X: expected a size"
    "-e 8 -b 16|-b 16 is larger than -e 8"
    "-f 1 -b 8 -e 64|the step factor must be at least 2"
    "-d complex|-d complex: unknown type"
    "-o xor|-o xor: unknown op"
    "--collective allreduce_fast|--collective allreduce_fast: unknown collective"
    "--transport carrier_pigeon|--transport carrier_pigeon: unknown transport"
    "--algo fastest|--algo fastest: unknown algorithm"
    "--algo ring --collective all_to_all|--algo ring has no all_to_all schedule"
    "--algo tree --collective all_to_all,all_reduce|--algo tree has no all_to_all schedule"
    "--algo shared_memory --transport inproc|--algo shared_memory needs a transport with shared windows"
    "--algo native --transport shm|--algo native needs a transport with collectives of its own"
    "--counts lumpy --collective all_gather_v|--counts lumpy: unknown pattern"
    "--np 3 -r 3|-r 3 is not a rank of --np 3"
    "--transport inproc -r 1|-r 1 is not a rank of --np 1"
    "--np 0|--np 0: expected an integer"
    "-n|-n needs a value"
    "--frobnicate|unknown flag --frobnicate"
    "--osu=1|--osu takes no value"
    "--tune --algo ring|--tune measures every algorithm itself"
    "--tune --transport mpi|--tune measures every algorithm itself over a transport with rows in the tuned table (inproc, shm, tcp), not --transport mpi"
  )
  for c in "${cases[@]}"; do
    flags=${c%%|*} want=${c#*|}
    # shellcheck disable=SC2086
    out=$("$bench" $flags 2>&1 > /dev/null)
    rc=$?
    [[ $rc == 2 ]] || fail "tutti-bench $flags exited $rc, not 2 ($out)"
    [[ $out == *"$want"* ]] || fail "tutti-bench $flags said '$out', not '$want'"
    echo "ok: tutti-bench $flags -> exit 2: ${out%%$'\n'*}"
  done
  "$bench" --help | grep -q -- '--collective' || fail "--help does not list the flags"
  echo "PASS: ${#cases[@]} bad invocations exit 2 with a message"
  ;;

outputs)
  "$bench" --transport inproc --np 3 --collective all_gather,barrier -b 1K -e 4K -f 4 -n 3 -w 1 --osu \
    --json "$tmp/out.json" > "$tmp/stdout" || fail "the --osu run exited $?"
  cat "$tmp/stdout"
  grep -q '^# Size *Avg Latency(us) *Min Latency(us) *Max Latency(us) *Iterations$' "$tmp/stdout" ||
    fail "no OSU header line"
  [[ $(grep -c '^[0-9]' "$tmp/stdout") == 3 ]] || fail "expected 3 OSU rows (2 sizes of all_gather, barrier)"
  if command -v python3 > /dev/null; then
    python3 - "$tmp/out.json" << 'EOF' || fail "JSON check failed"
import json, sys
d = json.load(open(sys.argv[1]))
m = d["meta"]
for k in ("host", "cores", "date", "command_line", "transport", "np"):
    assert k in m, k
assert m["transport"] == "inproc" and m["np"] == 3, m
r = d["results"]
assert len(r) == 5, len(r)  # all_gather: 2 sizes x 2 placements; barrier: 1
assert all(x["wrong"] == 0 and x["library"] == "tutti" for x in r), r
print("JSON ok:", len(r), "results")
EOF
  fi
  echo "PASS: OSU table and JSON"
  ;;
*) fail "unknown mode $mode" ;;
esac
