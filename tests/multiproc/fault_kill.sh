#!/usr/bin/env bash
# SIGKILL one rank mid-collective under tuttirun, at 2..5 ranks and two sizes: the launcher exits with 137 naming
# the rank, every survivor reports peer_lost/timeout naming it (see fault_kill.cpp), and nothing
# is left behind: no new entry in /dev/shm or /tmp, no abstract socket of the job.
# Usage: fault_kill.sh <tuttirun> <fault_kill binary>
set -u
tuttirun=$1 prog=$2
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
source "$(dirname "$0")/leftovers.sh"
# 100000 floats go through the windows; at np=3 also 1000000 (4 MB), which survivors read straight
# from the victim's memory (single copy) while it dies.
# Then point-to-point rounds (a ring of isend and recv), rendezvous-sized and eager.
for run in 2:100000 3:100000 4:100000 5:100000 3:1000000 2:100000:p2p 4:100000:p2p 3:100:p2p; do
  IFS=: read -r np count mode <<<"$run"
  victim=$((np - 1))
  job="faultkill$$-$np-$count$mode"
  out=$(TUTTI_JOB_ID=$job TUTTI_TIMEOUT=10 timeout 60 "$tuttirun" --nproc-per-node=$np --grace=5 "$prog" $victim 40 $count $mode 2>&1)
  status=$?
  check "np=$np$mode launcher exits 137" "[[ $status -eq 137 ]]"
  check "np=$np$mode launcher names rank $victim" "grep -q 'rank $victim (pid [0-9]*) was killed by signal 9' <<<\"\$out\""
  survivors=$(grep -c 'survivor rank .*expected kind, names rank [0-9]*: yes, transport fds: 0 ' <<<"$out")
  check "np=$np$mode all $((np - 1)) survivors raised peer_lost/timeout naming rank $victim" "[[ $survivors -eq $((np - 1)) ]]"
  check "np=$np$mode no abstract socket left" "! grep -q 'tutti\.[0-9]*\.$job' /proc/net/unix"
  [[ $fail -eq 0 ]] || echo "$out" | tail -20
done
check "nothing new in /dev/shm or /tmp" "! new_leftovers"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
