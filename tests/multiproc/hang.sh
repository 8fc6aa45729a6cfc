#!/usr/bin/env bash
# tuttirun's hang report, end to end (tests/multiproc/hang.cpp at 4 ranks): rank 2 comes late,
# stops itself (SIGSTOP), or passes another count; tuttirun's report must name rank 2 (or both
# counts), and `tuttirun --dump` must say the same of a job that hangs.
# With a launcher after the program (mpirun and its flags: an MPI program), `tuttirun --dump=DIR`
# of the same three jobs started by that launcher with TUTTI_FLIGHT_MAP=DIR.
# Usage: hang.sh <tuttirun> <program> [mpirun args...]
set -u
tuttirun=$1 prog=$2
shift 2
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
# `tuttirun --dump[=DIR]` ($1: --dump or --dump=DIR) until it names a cause in all_reduce #3 (at
# most 20 s: a dump taken while the ranks still start, or pass #1 and #2, names a passing one)
# and, where $3 is given, also matches that pattern; then checks that the cause is rank 2, which
# never entered all_reduce #3 ($2: the checks' prefix).
dump_names_rank_2() {
  out=""
  for _ in $(seq 1 100); do
    sleep 0.2
    out=$("$tuttirun" "$1" 2>&1)
    grep -q '^cause.* #3' <<<"$out" && { [[ -z ${3:-} ]] || grep -q "$3" <<<"$out"; } && break
  done
  echo "--- $2"; echo "$out"
  check "$2: rank 2 never entered all_reduce #3" "grep -q 'never entered it: rank 2\( \[stopped\]\)\?: last finished barrier' <<<\"\$out\""
  check "$2: the cause names rank 2" "grep -q 'cause: communicator 0: rank 2\( \[stopped\]\)\? has not entered all_reduce(.*) #3' <<<\"\$out\""
}

if (($# > 0)); then  # an MPI job: mpirun starts it, tuttirun --dump=DIR reads it
  mpi_job() {  # <mode>: starts the job in the background (pid in $job), its maps in a fresh $dir
    dir=$(mktemp -d)
    timeout 60 "$@" -x TUTTI_FLIGHT_MAP="$dir" -x TUTTI_TIMEOUT=30 -np 4 "$prog" "$mode" >/dev/null 2>&1 &
    job=$!
  }
  end_mpi_job() {  # kills what is left (a stopped rank ignores all but SIGKILL)
    for m in "$dir"/*.map; do [[ -e $m ]] && kill -KILL "$(basename "$m" .map)" 2>/dev/null; done
    kill -TERM $job 2>/dev/null; wait $job 2>/dev/null
    rm -rf "$dir"
  }
  mode=late mpi_job "$@"
  dump_names_rank_2 --dump="$dir" "mpi late"
  end_mpi_job
  mode=stop mpi_job "$@"
  # (Rank 2 stops just after the barrier: a dump between the two sees it running still.)
  dump_names_rank_2 --dump="$dir" "mpi stop" 'rank 2 (pid [0-9]*): stopped'
  check "mpi stop: rank 2 is seen stopped" "grep -q 'rank 2 (pid [0-9]*): stopped' <<<\"\$out\""
  end_mpi_job
  # A count mismatch fails the ranks at once; --dump reads, after the job, the records they saved.
  mode=count mpi_job "$@"
  wait $job 2>/dev/null
  out=$("$tuttirun" --dump="$dir" 2>&1)
  echo "--- mpi count"; echo "$out"
  # mpirun ends the other ranks as soon as one exits (the program's failing ranks wait a second
  # for the others); those that learn of the difference from a peer may still be killed first.
  check "mpi count: rank 2's call with count=999, from its saved records" \
    "grep -q 'all_reduce(.*) #3 count=999' <<<\"\$out\""
  check "mpi count: beside another rank's count=1000, the cause is the different arguments" \
    "! grep -q ': all_reduce(.*) #3 count=1000' <<<\"\$out\" || grep -q 'cause: communicator 0: the ranks called #3 with different arguments' <<<\"\$out\""
  end_mpi_job
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
check "tuttirun removed its flight-recorder directory" "! ls -A \"$dir\" | grep -q tuttirun-flight"
# One left by a tuttirun that was killed (its pid gone) is removed by the next one.
stale="$dir/tuttirun-flight.$(hostname).999999999.XXXXXX"
mkdir -p "$stale" && touch "$stale/1.map"
# ... but never through a link: the files of the directory it points to stay.
mkdir -p "$dir/kept" && touch "$dir/kept/precious"
ln -s "$dir/kept" "$dir/tuttirun-flight.$(hostname).999999998.XXXXXX"
TMPDIR=$dir timeout 20 "$tuttirun" --nproc-per-node=1 true >/dev/null 2>&1
check "a dead tuttirun's flight-recorder directory is removed by the next" "[[ ! -e \"$stale\" ]]"
check "a link named like one is left, and what it points to" "[[ -e \"$dir/kept/precious\" ]]"
rm -rf "$dir"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
