#!/usr/bin/env bash
# examples/recover.cpp under tuttirun --keep-going: ranks are SIGKILLed mid-loop (by default
# at 3 and 4 ranks: the last one, then rank 0, which served the rendezvous), the survivors
# shrink() and finish every step with checked results; tuttirun names each dead rank.
# Usage: recover.sh <tuttirun> <tutti_recover> [np:victim[,victim...] ...]
set -u
tuttirun=$1 prog=$2
shift 2
runs=("$@")
[[ ${#runs[@]} -gt 0 ]] || runs=(3:2 4:3 4:0)
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
source "$(dirname "$0")/leftovers.sh"
for run in "${runs[@]}"; do
  np=${run%%:*} victim=${run#*:}
  IFS=, read -r -a lost <<<"$victim"
  left=$((np - ${#lost[@]}))
  out=$(TUTTI_TIMEOUT=10 timeout 120 "$tuttirun" --keep-going --nproc-per-node=$np "$prog" $victim 4 2>&1)
  status=$?
  check "np=$np victim=$victim: tuttirun exits 137 (the first failure)" "[[ $status -eq 137 ]]"
  for v in "${lost[@]}"; do
    check "np=$np victim=$victim: tuttirun names rank $v" "grep -q 'rank $v (pid [0-9]*) was killed by signal 9' <<<\"\$out\""
  done
  check "np=$np victim=$victim: every survivor saw the loss" \
    "[[ \$(grep 'step 4: ' <<<\"\$out\" | grep -v 'carries on' | grep -cE \"rank (${victim//,/|})\") -eq $left ]]"
  check "np=$np victim=$victim: every survivor carries on in a job of $left" \
    "[[ \$(grep -c 'carries on as rank [0-9]* of $left' <<<\"\$out\") -eq $left ]]"
  check "np=$np victim=$victim: every survivor finished all steps with checked results" \
    "[[ \$(grep -c 'finished all 10 steps with $left ranks' <<<\"\$out\") -eq $left ]]"
  [[ $fail -eq 0 ]] || echo "$out" | tail -30
done
check "nothing new in /dev/shm or /tmp" "! new_leftovers"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
