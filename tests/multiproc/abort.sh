#!/usr/bin/env bash
# Runs tests/multiproc/abort.cpp under tuttirun and checks every rank's verdict, that SIGUSR1
# printed every rank's flight recorder without killing it, and that tuttirun exited 0.
# Usage: abort.sh <tuttirun> <np> <program> <aborter>
set -u
tuttirun=$1 np=$2 prog=$3 aborter=$4
out=$(TUTTI_TIMEOUT=100 timeout 120 "$tuttirun" --nproc-per-node=$np "$prog" $aborter 2>&1)
status=$?
echo "$out" | grep -v '^\[rank [0-9]*\] \[tutti rank [0-9]*\]   ' | tail -40
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
check "tuttirun exits 0" "[[ $status -eq 0 ]]"
check "all $np ranks released as expected (aborted / peer_lost naming rank $aborter)" \
  "[[ \$(grep -c 'abort verdict rank [0-9]* .*: as expected' <<<\"\$out\") -eq $np ]]"
check "SIGUSR1 printed all $np flight recorders" \
  "[[ \$(grep -c 'flight recorder (SIGUSR1): communicator 0, rank [0-9]* of $np, last 5 of 5 operations' <<<\"\$out\") -eq $np ]]"
check "each lists the all_reduces" "[[ \$(grep -c 'all_reduce(.*) #4 count=1000 dtype=float op=sum .*done in' <<<\"\$out\") -ge $np ]]"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
