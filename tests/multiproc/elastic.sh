#!/usr/bin/env bash
# examples/elastic.cpp: an undisturbed run at 4 ranks gives the reference checksum; then a rank
# is SIGKILLed mid-way (1) under tuttirun --max-restarts=2: the job restarts once from rank 0's
# checkpoint and exits 0; (2) with --shrink: the survivors carry on with 3 ranks (also when the
# lost rank is rank 0, the store's host). Each must end with the reference checksum, to the bit.
# Usage: elastic.sh <tuttirun> <tutti_elastic>
set -u
tuttirun=$1 prog=$2
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
sum_of() { grep -o 'checksum [0-9a-f]*' <<<"$1" | tail -1; }
dir=$(mktemp -d /tmp/elastic-test.XXXXXX)
trap 'rm -rf "$dir"' EXIT

out=$(timeout 120 "$tuttirun" --nproc-per-node=4 "$prog" 2>&1)
status=$?
want=$(sum_of "$out")
check "undisturbed: exits 0 with a checksum" "[[ $status -eq 0 && -n '$want' ]]"

for victim in 2 0; do
  out=$(timeout 120 "$tuttirun" --max-restarts=2 --nproc-per-node=4 "$prog" --checkpoint "$dir/ckpt$victim" --kill $victim:6 2>&1)
  status=$?
  check "restart, rank $victim killed at step 6: tuttirun exits 0" "[[ $status -eq 0 ]]"
  check "restart, rank $victim killed: the second attempt resumed from the checkpoint at step 6" \
    "grep -q 'attempt 1: resuming from the checkpoint at step 6' <<<\"\$out\""
  check "restart, rank $victim killed: the same checksum as undisturbed" "[[ '$(sum_of "$out")' == '$want' ]]"
  [[ $fail -eq 0 ]] || echo "$out" | grep -v 'tutti rank' | tail -20

  out=$(timeout 120 "$tuttirun" --keep-going --nproc-per-node=4 "$prog" --shrink --kill $victim:6 2>&1)
  check "shrink, rank $victim killed at step 6: 3 survivors carry on" \
    "[[ \$(grep -c 'carries on as rank [0-9] of 3' <<<\"\$out\") -eq 3 ]]"
  check "shrink, rank $victim killed: finished with 3 ranks and the same checksum as undisturbed" \
    "grep -q 'finished 12 steps with 3 ranks' <<<\"\$out\" && [[ '$(sum_of "$out")' == '$want' ]]"
  [[ $fail -eq 0 ]] || echo "$out" | grep -v 'tutti rank' | tail -20
done
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
