#!/usr/bin/env bash
# examples/recover.cpp under tuttirun --keep-going at 3 and 4 ranks: one rank is SIGKILLed
# mid-loop (the last one, then rank 0, which served the rendezvous), the survivors shrink() and
# finish every step with checked results; tuttirun names the dead rank and reports its status.
# Usage: recover.sh <tuttirun> <tutti_recover>
set -u
tuttirun=$1 prog=$2
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
snapshot() { ls -A /dev/shm /tmp 2>/dev/null | grep -i tutti | sort; }
before=$(snapshot)
for run in 3:2 4:3 4:0; do
  np=${run%:*} victim=${run#*:}
  out=$(TUTTI_TIMEOUT=10 timeout 120 "$tuttirun" --keep-going --nproc-per-node=$np "$prog" $victim 4 2>&1)
  status=$?
  check "np=$np victim=$victim: tuttirun exits 137 (the first failure)" "[[ $status -eq 137 ]]"
  check "np=$np victim=$victim: tuttirun names rank $victim" "grep -q 'rank $victim (pid [0-9]*) was killed by signal 9' <<<\"\$out\""
  check "np=$np victim=$victim: every survivor saw the loss" \
    "[[ \$(grep 'step 4: ' <<<\"\$out\" | grep -v 'carries on' | grep -c \"rank $victim\") -eq $((np - 1)) ]]"
  check "np=$np victim=$victim: every survivor carries on in a job of $((np - 1))" \
    "[[ \$(grep -c 'carries on as rank [0-9]* of $((np - 1))' <<<\"\$out\") -eq $((np - 1)) ]]"
  check "np=$np victim=$victim: every survivor finished all steps with checked results" \
    "[[ \$(grep -c 'finished all 10 steps with $((np - 1)) ranks' <<<\"\$out\") -eq $((np - 1)) ]]"
  [[ $fail -eq 0 ]] || echo "$out" | tail -30
done
after=$(snapshot)
check "nothing new in /dev/shm or /tmp" "[[ \"\$before\" == \"\$after\" ]]"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
