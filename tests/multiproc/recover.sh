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
# A running tuttirun's flight-recorder directory (/tmp/tuttirun-flight.<pid>.*, gone when it exits)
# may belong to another test's job running meanwhile: not a leftover.
# Other tests' files come and go meanwhile (the Gloo peers' store, $TMPDIR/tutti-gloo-bench-*): only
# an entry that is there after the jobs and was not before counts, and not those.
snapshot() { ls -A /dev/shm /tmp 2>/dev/null | grep -i tutti | grep -v '^tuttirun-flight\.\|^tutti-gloo-bench-' | sort; }
new_entries() { comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | grep -v '^$'; }
before=$(snapshot)
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
after=$(snapshot)
check "nothing new in /dev/shm or /tmp" "! new_entries"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
