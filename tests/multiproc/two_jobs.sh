#!/usr/bin/env bash
# Two jobs at once on one host do not interfere (each gets its own job id from tuttirun). A
# second job reusing a running job's id is refused: tests/transport/shm_startup.cpp.
# Usage: two_jobs.sh <tuttirun> <tutti_shm_tests>
set -u
tuttirun=$1 prog=$2
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
a=$(mktemp) b=$(mktemp)
timeout 300 "$tuttirun" --nproc-per-node=3 "$prog" -tc='over shm: every collective*automatic*' >"$a" 2>&1 & pa=$!
timeout 300 "$tuttirun" --nproc-per-node=2 "$prog" -tc='over shm: every collective*automatic*' >"$b" 2>&1 & pb=$!
wait $pa; sa=$?
wait $pb; sb=$?
check "job A (3 ranks) passed alongside job B" "[[ $sa -eq 0 ]]"
check "job B (2 ranks) passed alongside job A" "[[ $sb -eq 0 ]]"
[[ $sa -eq 0 && $sb -eq 0 ]] || tail -30 "$a" "$b"
rm -f "$a" "$b"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
