#!/usr/bin/env bash
# tuttirun's hang report, end to end (tests/multiproc/hang.cpp at 4 ranks): rank 2 comes late,
# stops itself (SIGSTOP), or passes another count; tuttirun's report must name rank 2 (or both
# counts), and `tuttirun --dump` must say the same of a job that hangs.
# With a launcher after the program (mpirun and its flags: an MPI program), only `--dump=DIR` of
# a job that launcher started with TUTTI_FLIGHT_MAP=DIR.
# Usage: hang.sh <tuttirun> <program> [mpirun args...]
set -u
tuttirun=$1 prog=$2
shift 2
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
# `tuttirun --dump[=DIR]` ($1: --dump or --dump=DIR) until it names a cause (at most 20 s), then
# checks that the cause is rank 2, which never entered all_reduce #3 ($2: the checks' prefix).
dump_names_rank_2() {
  out=""
  for _ in $(seq 1 100); do
    sleep 0.2
    out=$("$tuttirun" "$1" 2>&1)
    grep -q '^cause' <<<"$out" && break
  done
  echo "--- $2"; echo "$out"
  check "$2: rank 2 never entered all_reduce #3" "grep -q 'never entered it: rank 2: last finished barrier' <<<\"\$out\""
  check "$2: the cause names rank 2" "grep -q 'cause: communicator 0: rank 2 has not entered all_reduce(.*) #3' <<<\"\$out\""
}

if (($# > 0)); then  # an MPI job: mpirun starts it, tuttirun --dump=DIR reads it
  dir=$(mktemp -d)
  timeout 60 "$@" -x TUTTI_FLIGHT_MAP="$dir" -x TUTTI_TIMEOUT=30 -np 4 "$prog" late >/dev/null 2>&1 &
  job=$!
  dump_names_rank_2 --dump="$dir" "mpi dump"
  kill -TERM $job 2>/dev/null; wait $job 2>/dev/null
  rm -rf "$dir"
  echo "$pass passed, $fail failed"
  [[ $fail -eq 0 ]]
  exit
fi
report() { grep '^tuttirun:' | sed -n '/hang report/,/^tuttirun: cause/p'; }

out=$(TUTTI_TIMEOUT=3 timeout 60 "$tuttirun" --nproc-per-node=4 "$prog" late 2>&1 | report)
echo "--- late"; echo "$out"
check "late: ranks 0, 1, 3 are in all_reduce #3" "grep -q 'in it (up to .*): rank 0.*rank 1.*rank 3' <<<\"\$out\""
check "late: rank 2 never entered it, last seen after barrier #2" \
  "grep -q 'never entered it: rank 2: last finished barrier(.*) #2 .* ago; in its own code since' <<<\"\$out\""
check "late: the cause names rank 2" "grep -q 'cause: communicator 0: rank 2 has not entered all_reduce(.*) #3 count=1000' <<<\"\$out\""

out=$(TUTTI_TIMEOUT=3 timeout 60 "$tuttirun" --nproc-per-node=4 "$prog" stop 2>&1 | report)
echo "--- stop"; echo "$out"
check "stop: rank 2 is reported stopped" "grep -q 'rank 2 (pid [0-9]*): stopped by SIGSTOP' <<<\"\$out\""
check "stop: the cause names rank 2, stopped" \
  "grep -q 'cause: communicator 0: rank 2 \[stopped by SIGSTOP\] has not entered all_reduce(.*) #3' <<<\"\$out\""

out=$(TUTTI_TIMEOUT=3 timeout 60 "$tuttirun" --nproc-per-node=4 "$prog" count 2>&1 | report)
echo "--- count"; echo "$out"
check "count: both counts side by side" \
  "grep -q 'rank 2.*: all_reduce(.*) #3 count=999' <<<\"\$out\" && grep -q 'rank 0.*: all_reduce(.*) #3 count=1000' <<<\"\$out\""
check "count: the cause is the different arguments" "grep -q 'cause: communicator 0: the ranks called #3 with different arguments' <<<\"\$out\""

# --dump against a job that hangs: rank 2 sleeps 60 s, the others wait (30 s deadline).
dir=$(mktemp -d)
TMPDIR=$dir TUTTI_TIMEOUT=30 timeout 60 "$tuttirun" --nproc-per-node=4 "$prog" late >/dev/null 2>&1 &
job=$!
TMPDIR=$dir dump_names_rank_2 --dump "dump"
kill -INT $job 2>/dev/null; wait $job 2>/dev/null
out=$(TMPDIR=$dir "$tuttirun" --dump 2>&1); status=$?
check "dump: with no job left, a clear error" "[[ $status -ne 0 ]] && grep -q 'no tuttirun job' <<<\"\$out\""
rm -rf "$dir"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
