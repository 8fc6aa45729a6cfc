#!/usr/bin/env bash
# The job's hang report across nodes (tests/multiproc/hang.cpp over tcp, 4 ranks on two "hosts":
# network namespaces joined by a bridge, a tuttirun --nnodes=2 in each, 2 ranks each, rank 2 on
# node 1). Rank 2 comes late, stops itself (SIGSTOP) or passes another count; node 0's tuttirun
# gathers every node's flight records through the nodes' rendezvous and prints one report naming
# rank 2 (or both counts), and the node that asked prints it too. `tuttirun --dump` on node 1 and
# SIGUSR1 to node 1's tuttirun give the whole job's report of a job that hangs.
# Needs root (CAP_NET_ADMIN); elsewhere it exits 77, which ctest reports as skipped.
# Usage: hang_nodes.sh <tuttirun> <tutti_hang_tcp>
set -u
tuttirun=$1 prog=$2
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "needs iproute2 (ip)"

hub="" nodes=()
source "$(dirname "$0")/netns_hosts.sh"
logs=$(mktemp -d)
trap 'remove_hosts; rm -rf "$logs"' EXIT
trap 'exit 130' INT TERM
make_hosts "t78$$" 10.78.0 eth78
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }

# start MODE TIMEOUT: the job on nodes a (node 0) and b (node 1), in the background; each node
# has its own TMPDIR (the namespaces share the host's name and /tmp). tuttirun's pids: $pid0 $pid1.
start() {
  local mode=$1 timeout=$2 k
  port=$((20000 + RANDOM % 10000))
  local token
  token=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  for k in 0 1; do
    mkdir -p "$logs/tmp$k"
    ip netns exec "${nodes[$k]}" env TMPDIR="$logs/tmp$k" TUTTI_JOB_TOKEN="$token" TUTTI_TIMEOUT="$timeout" \
      "$tuttirun" --nnodes=2 --node-rank=$k --nproc-per-node=2 --master-addr=10.78.0.1 --master-port=$port \
      "$prog" "$mode" >"$logs/$mode.$k" 2>&1 &
    eval "pid$k=$!"
  done
}
# finish: waits for both (at most 60 s, then kills what is left).
finish() {
  local k
  for _ in $(seq 1 300); do
    kill -0 "$pid0" 2>/dev/null || kill -0 "$pid1" 2>/dev/null || return 0
    sleep 0.2
  done
  for k in 0 1; do ip netns pids "${nodes[$k]}" | xargs -r kill -KILL 2>/dev/null; done
  wait
}
# The job's report in node K's log of MODE.
job_report() { grep '^tuttirun:' "$logs/$1.$2" | sed -n '/what each rank of the job was doing/,/^tuttirun: cause/p'; }

start late 3
finish
out=$(job_report late 0)
echo "--- late, node 0"; echo "$out"
check "late, node 0: one report of the job's four ranks" \
  "[[ \$(grep -c '^tuttirun:   rank [0-3] (pid' <<<\"\$out\") -eq 4 ]]"
check "late, node 0: ranks 0, 1, 3 are in all_reduce #3" "grep -q 'in it (up to .*): rank 0.*rank 1.*rank 3' <<<\"\$out\""
check "late, node 0: rank 2 never entered it" \
  "grep -q 'never entered it: rank 2: last finished barrier(.*) #2 .* ago; in its own code since' <<<\"\$out\""
check "late, node 0: the cause names rank 2" \
  "grep -q 'cause: communicator 0: rank 2 has not entered all_reduce(.*) #3 count=1000' <<<\"\$out\""
# Node 1 prints the job's report when node 0's tuttirun is still there to answer; when node 0's
# ranks all failed first and it has ended (a slow machine: rank 3's deadline passes later), node
# 1 prints its own node's. Either names rank 2.
out=$(grep '^tuttirun:' "$logs/late.1" | sed -n '/hang report/,/^tuttirun: cause/p')
echo "--- late, node 1"; echo "$out"
check "late, node 1: a report whose cause names rank 2" \
  "grep -q 'cause: communicator 0: rank 2 has not entered all_reduce(.*) #3 count=1000' <<<\"\$out\""

start stop 3
finish
out=$(job_report stop 0)
echo "--- stop, node 0"; echo "$out"
check "stop: node 0's report sees rank 2 on node 1 stopped" "grep -q 'rank 2 (pid [0-9]*): stopped by SIGSTOP' <<<\"\$out\""
check "stop: the cause names rank 2, stopped" \
  "grep -q 'cause: communicator 0: rank 2 \[stopped by SIGSTOP\] has not entered all_reduce(.*) #3' <<<\"\$out\""

start count 3
finish
out=$(job_report count 0)
echo "--- count, node 0"; echo "$out"
check "count: both nodes' counts side by side" \
  "grep -q 'rank 2.*: all_reduce(.*) #3 count=999' <<<\"\$out\" && grep -q 'rank 0.*: all_reduce(.*) #3 count=1000' <<<\"\$out\""
check "count: the cause is the different arguments" \
  "grep -q 'cause: communicator 0: the ranks called #3 with different arguments' <<<\"\$out\""

# A job that hangs (rank 2 sleeps 60 s, the others' deadline is 30 s): `tuttirun --dump` on
# node 1 asks node 0's tuttirun, which gathers both nodes' records; then SIGUSR1 to node 1's.
start late 30
for _ in $(seq 1 100); do
  sleep 0.2
  out=$(ip netns exec "${nodes[1]}" env TMPDIR="$logs/tmp1" "$tuttirun" --dump 2>&1)
  grep -q '^cause' <<<"$out" && break
done
echo "--- dump on node 1"; echo "$out"
check "dump on node 1: the job's four ranks" "grep -q 'what each rank of the job was doing' <<<\"\$out\" &&
  [[ \$(grep -c '^  rank [0-3] (pid' <<<\"\$out\") -eq 4 ]]"
check "dump on node 1: the cause names rank 2" \
  "grep -q 'cause: communicator 0: rank 2 has not entered all_reduce(.*) #3' <<<\"\$out\""
kill -USR1 "$pid1"
for _ in $(seq 1 50); do
  sleep 0.2
  grep -q 'hang report (tuttirun received SIGUSR1 on node 1): what each rank of the job' "$logs/late.1" && break
done
check "SIGUSR1 to node 1's tuttirun: the job's report there" \
  "grep -q 'hang report (tuttirun received SIGUSR1 on node 1): what each rank of the job was doing' \"$logs/late.1\""
check "... and on node 0" \
  "grep -q 'hang report (tuttirun received SIGUSR1 on node 1): what each rank of the job was doing' \"$logs/late.0\""
kill -INT "$pid0" "$pid1" 2>/dev/null
finish
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
