#!/usr/bin/env bash
# Runs tests/multiproc/last_words.cpp under tuttirun and checks every rank's verdict.
# Usage: last_words.sh <tuttirun> <np> <program> <scenario>
set -u
tuttirun=$1 np=$2 prog=$3 scenario=$4
out=$(TUTTI_TIMEOUT=100 timeout 120 "$tuttirun" --nproc-per-node=$np "$prog" "$scenario" 2>&1)
status=$?
echo "$out" | tail -30
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
check "tuttirun exits 0" "[[ $status -eq 0 ]]"
check "all $np ranks as expected ($scenario)" \
  "[[ \$(grep -c 'last words verdict rank [0-9]* .*: as expected' <<<\"\$out\") -eq $np ]]"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
