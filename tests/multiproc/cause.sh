#!/usr/bin/env bash
# tuttirun names the cause of a failure, not the first failure it saw (its victim), with
# tests/multiproc/restarts.cpp as the ranks:
#   cause-lingers 1 7: rank 1 closes its communicator, so its peers die of peer_lost (SIGABRT)
#     at once, and exits 7 only 0.5 s later. Across two nodes (two tuttiruns on loopback, 2 ranks
#     each, --max-restarts=1; three times, each on new ports): both exit 7, and both name rank 1 as
#     the cause in the restart line, the summary and the root cause, never a victim. Without
#     --max-restarts, node 0 exits 7 and node 1 names rank 1 all the same. On one node: exit 7, the
#     cause named before the summary, and the summary's exit status 7.
#   sleep 30, and SIGTERM to node 1's tuttirun: that is the cause on both nodes, not the ranks
#     tuttirun stopped.
#   return-early 2: rank 2 returns 0 at once while the others wait in an all_reduce and exit 1
#     (peer_lost): the summary names rank 2, which exited with status 0 before the others finished.
#     Also across two nodes (rank 1 on node 0 returns early): both name it.
# Loopback rather than network namespaces: the attribution is tuttirun's, whatever the network,
# and this runs without root, in a few seconds.
# Usage: cause.sh <tuttirun> <restarts program>
set -u
tuttirun=$1 prog=$2
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
logs=$(mktemp -d)
trap '[[ -n ${KEEP_LOGS:-} ]] || rm -rf "$logs"' EXIT
show() {
  echo "---- $1 (rc $(cat "$logs/$1.rc" 2>/dev/null)):"
  grep -v '^\[rank [0-9]*\] \[tutti rank' "$logs/$1" | tail -30
}

# Two free ports below the kernel's ephemeral range (--master-port P, the rendezvous on P + 1).
pick_ports() {
  local p low
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
  for _ in $(seq 50); do
    p=$((10000 + RANDOM % (low - 10001)))
    [[ -z $(ss -Htln "sport = :$p" 2>/dev/null) && -z $(ss -Htln "sport = :$((p + 1))" 2>/dev/null) ]] && break
  done
  echo "$p"
}

# nodes NAME ARGS...: two tuttiruns (2 ranks each) on loopback; logs NAME.0, NAME.1, statuses
# in rc0, rc1.
nodes() {
  local name=$1 port k
  shift
  port=$(pick_ports)
  export TUTTI_JOB_TOKEN
  TUTTI_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  for k in 0 1; do
    (
      TUTTI_TIMEOUT=5 timeout 60 "$tuttirun" --nnodes=2 --node-rank=$k --nproc-per-node=2 --master-addr=127.0.0.1 \
        --master-port="$port" --failure-grace=1 --grace=1 --rdzv-timeout=10 "$@" >"$logs/$name.$k" 2>&1
      echo $? >"$logs/$name.$k.rc"
    ) &
  done
  wait
  rc0=$(cat "$logs/$name.0.rc") rc1=$(cat "$logs/$name.1.rc")
}

cause_line='tuttirun: restart 1/1 after rank 1 (node 0) exited with status 7'
for run in 1 2 3; do
  failed_before=$fail
  nodes lingers$run --max-restarts=1 "$prog" cause-lingers 1 7
  check "two nodes, run $run: rank 1 exits 7 after its peers died of peer_lost: both tuttiruns exit 7 (got $rc0, $rc1)" \
    "[[ $rc0 == 7 && $rc1 == 7 ]]"
  check "two nodes, run $run: both restart naming rank 1, and only it" \
    "[[ \$(grep -cx '$cause_line' $logs/lingers$run.0) -eq 1 && \$(grep -cx '$cause_line' $logs/lingers$run.1) -eq 1 &&
        \$(cat $logs/lingers$run.[01] | grep -c '^tuttirun: restart [0-9]') -eq 2 ]]"
  check "two nodes, run $run: both name rank 1 as the cause in the summary and the root cause" \
    "(for k in 0 1; do grep -qx 'tuttirun: the cause: rank 1 (node 0) exited with status 7' $logs/lingers$run.\$k &&
       grep -qx 'tuttirun:   rank:       1 (local rank 1 on node 0)' $logs/lingers$run.\$k &&
       grep -qx 'tuttirun:   exit code:  7 (exited with status 7)' $logs/lingers$run.\$k || exit 1; done)"
  check "two nodes, run $run: node 0's summary lists rank 1 first, as the cause" \
    "[[ \$(grep -A1 '^tuttirun: 2 of 2 ranks on this node failed' $logs/lingers$run.0 | sed -n 2p | cut -c1-60) == 'tuttirun:   rank 1 (pid '* ]] &&
     grep -q '^tuttirun:   rank 1 (pid [0-9]*) exited with status 7 (the cause);' $logs/lingers$run.0"
  [[ $fail -eq $failed_before ]] || { show lingers$run.0; show lingers$run.1; }
done

# Two nodes without --max-restarts (no rendezvous: the nodes do not compare notes): node 0 exits
# 7 naming rank 1; node 1, whose ranks only lost it, names it too.
failed_before=$fail
nodes alone "$prog" cause-lingers 1 7
check "two nodes, no restarts: node 0 exits 7 (got $rc0), node 1 non-zero (got $rc1)" "[[ $rc0 == 7 && $rc1 != 0 ]]"
check "two nodes, no restarts: node 1 names rank 1 (node 0) as the cause" \
  "grep -qx 'tuttirun: the cause: rank 1 (node 0), which the ranks here lost' $logs/alone.1"
[[ $fail -eq $failed_before ]] || { show alone.0; show alone.1; }

# A signal to node 1's tuttirun is the cause, not the ranks it stopped on either node. Sent to
# tuttirun itself (GNU timeout, signalled, passes it on twice: to its child and to its group).
# twice: a second SIGTERM while node 1 waits for node 0's decision makes it leave at once; node 0
# still ends the job with the first one as the cause.
for times in once twice; do
failed_before=$fail
port=$(pick_ports)
TUTTI_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
for k in 0 1; do
  (
    TUTTI_TIMEOUT=5 timeout 60 "$tuttirun" --nnodes=2 --node-rank=$k --nproc-per-node=2 --master-addr=127.0.0.1 \
      --master-port="$port" --failure-grace=1 --grace=1 --rdzv-timeout=10 --max-restarts=2 "$prog" sleep 30 \
      >"$logs/term.$k" 2>&1 &
    echo $! >"$logs/term.$k.pid"
    wait $!
    echo $? >"$logs/term.$k.rc"
  ) &
done
for ((i = 0; i < 200; i++)); do
  [[ $(cat "$logs"/term.[01] 2>/dev/null | grep -c 'restarts: attempt 0 rank [0-3] of 4: world up') -eq 4 ]] && break
  sleep 0.05
done
node1=$(pgrep -P "$(cat "$logs/term.1.pid")" -x tuttirun || cat "$logs/term.1.pid")
kill -TERM "$node1"
if [[ $times == twice ]]; then
  for ((i = 0; i < 100; i++)); do
    grep -q 'forwarding it to the ranks' "$logs/term.1" && break
    sleep 0.02
  done
  sleep 0.2
  kill -TERM "$node1" 2>/dev/null
fi
wait
rc0=$(cat "$logs/term.0.rc") rc1=$(cat "$logs/term.1.rc")
check "two nodes, SIGTERM $times to node 1's tuttirun: both exit 143 (got $rc0, $rc1)" "[[ $rc0 == 143 && $rc1 == 143 ]]"
nodes_naming=(0 1)
[[ $times == twice ]] && nodes_naming=(0)  # node 1 left before the end, which names the cause
check "two nodes, SIGTERM $times to node 1's tuttirun: ${#nodes_naming[@]} name it as the root cause" \
  "(for k in ${nodes_naming[*]}; do grep -qx 'tuttirun:   rank:       none (tuttirun on node 1 received SIGTERM)' $logs/term.\$k || exit 1; done)"
[[ $fail -eq $failed_before ]] || { show term.0; show term.1; }
done

# One node: the same, no restarts.
failed_before=$fail
TUTTI_TIMEOUT=5 timeout 60 "$tuttirun" --nproc-per-node=3 --failure-grace=1 --grace=1 "$prog" cause-lingers 1 7 \
  >"$logs/one" 2>&1
echo $? >"$logs/one.rc"
check "one node: rank 1 exits 7 after its peers died of peer_lost: tuttirun exits 7 (got $(cat "$logs/one.rc"))" \
  "[[ \$(cat $logs/one.rc) == 7 ]]"
check "one node: the cause, rank 1, is named before the summary, whose exit status is 7" \
  "grep -B1 '^tuttirun: 3 of 3 ranks failed, rank [02] first (exit status 7):$' $logs/one | head -1 | grep -qx 'tuttirun: the cause: rank 1 exited with status 7'"
[[ $fail -eq $failed_before ]] || show one

# A rank returns 0 early: the others' failure began there.
failed_before=$fail
TUTTI_TIMEOUT=5 timeout 60 "$tuttirun" --nproc-per-node=4 --failure-grace=1 --grace=1 "$prog" return-early 2 \
  >"$logs/early" 2>&1
echo $? >"$logs/early.rc"
check "return-early 2: tuttirun exits 1, the others' status (got $(cat "$logs/early.rc"))" "[[ \$(cat $logs/early.rc) == 1 ]]"
check "return-early 2: the summary names rank 2, which exited with status 0 before the others finished" \
  "grep -qxE 'tuttirun: the cause: rank 2 exited with status 0 at [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}\.[0-9]{3} [+-][0-9]{4}, before the others finished: the job.s failure began there' $logs/early"
[[ $fail -eq $failed_before ]] || show early

failed_before=$fail
nodes early2 --max-restarts=1 "$prog" return-early 1
check "two nodes, return-early 1: both exit 1 (got $rc0, $rc1)" "[[ $rc0 == 1 && $rc1 == 1 ]]"
check "two nodes, return-early 1: both restart after rank 1 (node 0), which exited with status 0 early" \
  "(for k in 0 1; do grep -qE '^tuttirun: restart 1/1 after rank 1 \(node 0\) exited with status 0 at .*, before the others finished' $logs/early2.\$k || exit 1; done)"
[[ $fail -eq $failed_before ]] || { show early2.0; show early2.1; }

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
