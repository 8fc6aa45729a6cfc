#!/usr/bin/env bash
# tests/multiproc/grow.cpp: tuttirun starts a job of 3 ranks (tcp or shm) on a known port and token;
# a joiner with a wrong token is refused (tcp: by the store; shm: by rank 0 in grow); then three
# joiners (TUTTI_JOIN=1) start beside it; the job grows by 1, then by 2, every collective checked
# at each size. Nothing is left.
# Usage: grow.sh <tuttirun> <tutti_grow>
set -u
tuttirun=$1 prog=$2
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
dir=$(mktemp -d /tmp/grow-test.XXXXXX)
trap 'rm -rf "$dir"' EXIT
port=$("$prog" --free-port)
token=grow$$x$RANDOM
export TUTTI_TIMEOUT=${TUTTI_TIMEOUT:-60} TUTTI_JOB_ID=grow$$x$RANDOM  # shm's joiners find the job by its id
TUTTI_JOB_TOKEN=$token timeout 180 "$tuttirun" --nproc-per-node=3 --master-port="$port" "$prog" >"$dir/job" 2>&1 &
job=$!
# The wrong-token joiner goes first and alone: shm's rank 0 answers joiners only while it is in
# grow(), so with the right joiners already waiting it could take them and close before the wrong
# one ever reached it (CI saw it wait out its timeout). Alone, it is the only one grow(1) can see.
TUTTI_TIMEOUT=100 TUTTI_JOIN=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TUTTI_JOB_TOKEN=not-$token timeout 120 "$prog" --wrong-token >"$dir/wrong" 2>&1
wrong=$?
joiners=()
for j in 1 2 3; do
  TUTTI_JOIN=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TUTTI_JOB_TOKEN=$token timeout 180 "$prog" >"$dir/joiner$j" 2>&1 &
  joiners+=($!)
done
wait $job
status=$?
jstatus=0
for p in "${joiners[@]}"; do wait "$p" || jstatus=$?; done
all=$(cat "$dir"/job "$dir"/joiner*)
check "tuttirun's 3 ranks exit 0" "[[ $status -eq 0 ]]"
check "the 3 joiners exit 0" "[[ $jstatus -eq 0 ]]"
check "one joiner joined the world of 4, two the world of 6" \
  "[[ \$(grep -c 'joined as rank 3 of 4' <<<\"\$all\") -eq 1 && \$(grep -cE 'joined as rank [45] of 6' <<<\"\$all\") -eq 2 ]]"
check "all 6 members checked every collective at each size and caught the mismatch" \
  "[[ \$(grep -c 'grow verdict: rank [0-5] of 6: ok' <<<\"\$all\") -eq 6 ]]"
check "the wrong-token joiner was refused, and told why" "[[ $wrong -eq 0 ]] && grep -q 'wrong token refused' '$dir/wrong'"
check "nothing listens on the job's port any more" "[[ -z \$(ss -Htln 'sport = :$port' 2>/dev/null) ]]"
[[ $fail -eq 0 ]] || { grep -h 'verdict\|rror' "$dir"/* | grep -v 'tutti rank' | head -30; }
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
