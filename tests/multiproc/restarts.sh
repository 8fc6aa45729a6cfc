#!/usr/bin/env bash
# tuttirun --max-restarts, with tests/multiproc/restarts.cpp as the ranks (a tutti::tcp world and
# a barrier in every attempt, so each attempt's rendezvous is proven; see there for the modes).
#   one node:  a rank that fails in attempt 0 only: one restart, exit 0, attempt 1 on a new job id
#              and port (the same port with --master-port); a rank that always fails with status 7:
#              exactly 2 restarts, exit 7, the root cause; --max-restarts=0 (and no flag): today's
#              behaviour; SIGTERM to tuttirun: no restart; bad values: usage errors.
#   two nodes: tuttirun in two network namespaces (tests/multiproc/netns_hosts.sh): a rank of
#              node 1 fails in attempt 0 only: both restart together and exit 0; one that always
#              fails: both exit non-zero after 2 restarts; a rank that exits 7 after its peers died
#              of peer_lost: both name it, not a victim, and exit 7; node 1's tuttirun killed: node 0 says so
#              and exits 1 at once; node 1 missing or with another token: node 0 exits 1 after
#              --rdzv-timeout. Needs root (CAP_NET_ADMIN); elsewhere this part is skipped (exit 77
#              when it is all that was asked for, or all the rest passed).
# Usage: restarts.sh <tuttirun> <restarts program> [local|nodes|all]   (default all)
set -u
tuttirun=$1 prog=$2 part=${3:-all}
pass=0 fail=0 failed_before=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# Lines of `file` matching the extended regex `re`.
count() { cat "$1" 2>/dev/null | grep -cE -- "$2"; }
# The ranks that printed "world up" in attempt $2 (log $1).
world_up() { count "$1" "restarts: attempt $2 rank [0-9]+ of [0-9]+: world up"; }
show() {
  echo "---- $1 (last lines):"
  grep -v '\[tutti rank [0-9]*\]' "$logs/$1" | tail -25
}

# local NAME TUTTIRUN-ARGS...: tuttirun on this host, bounded; sets rc; output in $logs/NAME.
local_job() {
  local name=$1
  shift
  TUTTI_TIMEOUT=30 timeout 120 "$tuttirun" --failure-grace=1 "$@" >"$logs/$name" 2>&1
  rc=$?
}

# A port below the kernel's ephemeral range (where the listeners of tests running beside this one
# get theirs) that nobody listens on, as two_hosts.sh picks.
pick_port() {
  local p low
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
  for _ in $(seq 50); do
    p=$((10000 + RANDOM % (low - 10000)))
    [[ -z $(ss -Htln "sport = :$p" 2>/dev/null) ]] && break
  done
  echo "$p"
}

job_field() { sed -nE "s/.*restarts: attempt $2 rank 0 of [0-9]+: world up, .* job ([^ ]+) port ([0-9]+)$/\\$3/p" "$1"; }

run_local() {
  echo "# one node"
  # (a) a rank fails in attempt 0 only.
  failed_before=$fail
  local_job first --nproc-per-node=3 --max-restarts=2 "$prog" fail-first 1
  check "fail-first, --max-restarts=2: tuttirun exits 0" "[[ $rc -eq 0 ]]"
  check "fail-first: every rank's world was up in attempt 0 and in attempt 1" \
    "[[ \$(world_up $logs/first 0) -eq 3 && \$(world_up $logs/first 1) -eq 3 ]]"
  check "fail-first: no attempt 2" "[[ \$(world_up $logs/first 2) -eq 0 ]]"
  check "fail-first: one restart line, naming rank 1 and its status" \
    "[[ \$(count $logs/first '^tuttirun: restart [0-9][0-9]*/') -eq 1 ]] && grep -qx 'tuttirun: restart 1/2 after rank 1 exited with status 3' $logs/first"
  local id0 id1 port0 port1
  id0=$(job_field "$logs/first" 0 1) id1=$(job_field "$logs/first" 1 1)
  port0=$(job_field "$logs/first" 0 2) port1=$(job_field "$logs/first" 1 2)
  check "fail-first: attempt 1's job id is attempt 0's with -r1 ($id0 -> $id1)" "[[ -n '$id0' && '$id1' == '$id0-r1' ]]"
  check "fail-first: attempt 1 got a new free port ($port0 -> $port1)" "[[ -n '$port0' && -n '$port1' && $port0 -ne $port1 ]]"
  check "fail-first: no root cause block (the job succeeded)" "! grep -q 'Root Cause' $logs/first"
  [[ $fail -eq $failed_before ]] || show first

  # The same with a fixed port: reused by every attempt.
  local port
  port=$(pick_port)
  local_job fixed --nproc-per-node=2 --master-port=$port --max-restarts=1 "$prog" fail-first 0
  check "fail-first, --master-port=$port: exits 0, attempt 1 on the same port" \
    "[[ $rc -eq 0 && \$(world_up $logs/fixed 1) -eq 2 && '$(job_field "$logs/fixed" 1 2)' == $port ]]"

  # (b) a rank always fails with status 7: exactly 2 restarts.
  failed_before=$fail
  local_job always --nproc-per-node=3 --max-restarts=2 "$prog" always-fail 1 7
  check "always-fail 7, --max-restarts=2: tuttirun exits 7" "[[ $rc -eq 7 ]]"
  check "always-fail: attempts 0, 1 and 2 ran, with every rank's world up, and no attempt 3" \
    "[[ \$(world_up $logs/always 0) -eq 3 && \$(world_up $logs/always 1) -eq 3 && \$(world_up $logs/always 2) -eq 3 && \$(world_up $logs/always 3) -eq 0 ]]"
  check "always-fail: exactly 2 restart lines, 1/2 then 2/2" \
    "[[ \$(grep '^tuttirun: restart [0-9][0-9]*/' $logs/always | tr '\n' '|') == 'tuttirun: restart 1/2 after rank 1 exited with status 7|tuttirun: restart 2/2 after rank 1 exited with status 7|' ]]"
  check "always-fail: the root cause names rank 1, local rank 1, status 7, attempt 2, its time and last words" \
    "grep -qx 'tuttirun: Root Cause (the failure the others followed):' $logs/always &&
     grep -qx 'tuttirun:   rank:       1 (local rank 1)' $logs/always &&
     grep -qx 'tuttirun:   exit code:  7 (exited with status 7)' $logs/always &&
     grep -qE '^tuttirun:   time:       [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}\.[0-9]{3} [+-][0-9]{4}$' $logs/always &&
     grep -q '^tuttirun:   attempt:    2 (TUTTI_RESTART_COUNT' $logs/always &&
     grep -qx 'tuttirun:   stderr:     last line: restarts: rank 1 fails on purpose with status 7 in attempt 2' $logs/always"
  [[ $fail -eq $failed_before ]] || show always

  # (c) --max-restarts=0, and no flag: today's behaviour (one attempt, the rank's status, the
  # summary last, no restart and no root cause block).
  failed_before=$fail
  local flags
  for flags in --max-restarts=0 ""; do
    local_job none --nproc-per-node=3 $flags "$prog" fail-first 1
    check "fail-first, ${flags:-no --max-restarts}: exits 3 after attempt 0 only" \
      "[[ $rc -eq 3 && \$(world_up $logs/none 0) -eq 3 && \$(world_up $logs/none 1) -eq 0 ]]"
    check "fail-first, ${flags:-no --max-restarts}: no restart, no root cause; the summary ends the output" \
      "! grep -q 'restart \|Root Cause' $logs/none && tail -n 4 $logs/none | head -1 | grep -qx 'tuttirun: 3 of 3 ranks failed, rank 1 first (exit status 3):'"
  done
  [[ $fail -eq $failed_before ]] || show none

  # --monitor-interval: a short one changes nothing but the polling.
  local_job monitor --nproc-per-node=2 --max-restarts=1 --monitor-interval=0.02 "$prog" fail-first 1
  check "--monitor-interval=0.02: fail-first still restarts once and exits 0" \
    "[[ $rc -eq 0 && \$(world_up $logs/monitor 1) -eq 2 ]]"

  # A signal to tuttirun is never followed by a restart.
  failed_before=$fail
  TUTTI_TIMEOUT=30 "$tuttirun" --nproc-per-node=2 --max-restarts=3 "$prog" sleep 30 >"$logs/term" 2>&1 &
  local pid=$! i
  for ((i = 0; i < 200 && $(world_up "$logs/term" 0) < 2; i++)); do sleep 0.1; done
  kill -TERM "$pid"
  for ((i = 0; i < 200; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  wait "$pid"
  rc=$?
  check "SIGTERM to tuttirun with --max-restarts=3: exits 143, no restart" \
    "[[ $rc -eq 143 ]] && ! grep -q '^tuttirun: restart [0-9][0-9]*/' $logs/term && [[ \$(world_up $logs/term 1) -eq 0 ]]"
  [[ $fail -eq $failed_before ]] || show term

  # Bad values.
  local bad
  for bad in --max-restarts=-1 --max-restarts=x --monitor-interval=abc --monitor-interval=0 --rdzv-timeout=-3 \
    "--nnodes=2 --master-port=65535 --max-restarts=1" "--nnodes=2 --master-port=29500 --rdzv-port=29500 --max-restarts=1"; do
    # shellcheck disable=SC2086
    timeout 10 "$tuttirun" $bad true >"$logs/bad" 2>&1
    rc=$?
    check "'tuttirun $bad true' is a usage error (exit 2, with a message naming the option)" \
      "[[ $rc -eq 2 ]] && grep -qE '^tuttirun: --(max-restarts|monitor-interval|rdzv-timeout|master-port|rdzv-port)' $logs/bad"
  done
}

# --- two nodes in network namespaces ------------------------------------------------------------

skip() {
  echo "SKIP: $*"
  [[ $fail -eq 0 ]] && exit 77
  echo "$pass passed, $fail failed"
  exit 1
}

run_nodes() {
  echo "# two nodes (network namespaces)"
  [[ $(id -u) -eq 0 ]] || skip "the two-node cases need root to create network namespaces"
  command -v ip >/dev/null || skip "the two-node cases need iproute2 (ip)"
  tag="rs$$"
  # shellcheck disable=SC2034  # hub: set by make_hosts, used by remove_hosts
  hub="" nodes=()
  # shellcheck source=tests/multiproc/netns_hosts.sh
  source "$(dirname "$0")/netns_hosts.sh"
  trap 'remove_hosts; rm -rf "$logs"' EXIT
  trap 'exit 130' INT TERM
  make_hosts "$tag" 10.79.0 eth79
  export TUTTI_JOB_TOKEN
  TUTTI_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')

  # node_bg NAME K ARGS...: node K's tuttirun (2 ranks), in the background; its pid (tuttirun's
  # own) in $logs/NAME.K.pid once it runs, its status in $logs/NAME.K.rc at the end.
  node_bg() {
    local name=$1 k=$2
    shift 2
    (
      TUTTI_TIMEOUT=30 timeout 120 ip netns exec "${nodes[$k]}" bash -c 'echo $$ >"$0"; exec "$@"' "$logs/$name.$k.pid" \
        "$tuttirun" --nnodes=2 --node-rank="$k" --nproc-per-node=2 --master-addr=10.79.0.1 --master-port=29400 \
        --failure-grace=1 "$@" >"$logs/$name.$k" 2>&1
      echo $? >"$logs/$name.$k.rc"
    ) &
  }
  # Waits (at most 150 s) for both nodes of NAME; sets rc0 and rc1.
  wait_nodes() {
    local name=$1 i
    for ((i = 0; i < 1500; i++)); do
      [[ -e $logs/$name.0.rc && -e $logs/$name.1.rc ]] && break
      sleep 0.1
    done
    rc0=$(cat "$logs/$name.0.rc" 2>/dev/null || echo none) rc1=$(cat "$logs/$name.1.rc" 2>/dev/null || echo none)
  }
  both() {
    local name=$1
    shift
    node_bg "$name" 0 "$@"
    node_bg "$name" 1 "$@"
    wait_nodes "$name"
  }
  show_nodes() { show "$1.0"; show "$1.1"; }

  # (d) rank 3 (node 1's second) fails in attempt 0 only.
  failed_before=$fail
  both nfirst --max-restarts=2 "$prog" fail-first 3
  check "two nodes, fail-first on node 1: both tuttiruns exit 0 (got $rc0, $rc1)" "[[ $rc0 == 0 && $rc1 == 0 ]]"
  check "two nodes, fail-first: both nodes' ranks had their world up in attempts 0 and 1, none in 2" \
    "[[ \$(cat $logs/nfirst.[01] | grep -cE 'restarts: attempt 0 rank [0-3] of 4: world up') -eq 4 &&
        \$(cat $logs/nfirst.[01] | grep -cE 'restarts: attempt 1 rank [0-3] of 4: world up') -eq 4 &&
        \$(cat $logs/nfirst.[01] | grep -cE 'restarts: attempt 2 rank') -eq 0 ]]"
  check "two nodes, fail-first: both say 'restart 1/2 after rank 3 (node 1) exited with status 3', once" \
    "[[ \$(grep -cx 'tuttirun: restart 1/2 after rank 3 (node 1) exited with status 3' $logs/nfirst.0) -eq 1 &&
        \$(grep -cx 'tuttirun: restart 1/2 after rank 3 (node 1) exited with status 3' $logs/nfirst.1) -eq 1 &&
        \$(cat $logs/nfirst.[01] | grep -c '^tuttirun: restart [0-9][0-9]*/') -eq 2 ]]"
  check "two nodes, fail-first: node 0 stopped its ranks on node 1's word" \
    "grep -q '^tuttirun: node 1 reports the first failure of attempt 0: rank 3 (node 1) exited with status 3$' $logs/nfirst.0"
  [[ $fail -eq $failed_before ]] || show_nodes nfirst

  # (d) rank 3 always fails with status 7.
  failed_before=$fail
  both nalways --max-restarts=2 "$prog" always-fail 3 7
  check "two nodes, always-fail 7: both exit non-zero, node 1 with 7 (got $rc0, $rc1)" \
    "[[ $rc0 != 0 && $rc0 != none && $rc1 == 7 ]]"
  check "two nodes, always-fail: 3 attempts on both nodes, each with all 4 ranks up" \
    "(for a in 0 1 2; do [[ \$(cat $logs/nalways.[01] | grep -cE \"restarts: attempt \$a rank [0-3] of 4: world up\") -eq 4 ]] || exit 1; done) &&
     [[ \$(cat $logs/nalways.[01] | grep -c 'restarts: attempt 3 rank') -eq 0 ]]"
  check "two nodes, always-fail: exactly 2 restart lines on each node" \
    "[[ \$(grep -c '^tuttirun: restart [12]/2 after rank 3 (node 1) exited with status 7$' $logs/nalways.0) -eq 2 &&
        \$(grep -c '^tuttirun: restart [12]/2 after rank 3 (node 1) exited with status 7$' $logs/nalways.1) -eq 2 ]]"
  check "two nodes, always-fail: both print the root cause: rank 3 on node 1, status 7, attempt 2" \
    "(for k in 0 1; do grep -qx 'tuttirun:   rank:       3 (local rank 1 on node 1)' $logs/nalways.\$k &&
       grep -qx 'tuttirun:   exit code:  7 (exited with status 7)' $logs/nalways.\$k &&
       grep -q '^tuttirun:   attempt:    2 ' $logs/nalways.\$k || exit 1; done)"
  [[ $fail -eq $failed_before ]] || show_nodes nalways

  # Rank 1 (node 0) exits 7 only after its peers on both nodes died of peer_lost (SIGABRT): both
  # nodes name it, not a victim, and exit 7 (multiproc.cause has more of this, on loopback).
  failed_before=$fail
  both ncause --max-restarts=1 --grace=1 "$prog" cause-lingers 1 7
  check "two nodes, cause-lingers 1 7: both exit 7 (got $rc0, $rc1)" "[[ $rc0 == 7 && $rc1 == 7 ]]"
  check "two nodes, cause-lingers: both restart after rank 1, not a victim, and name it as the root cause" \
    "(for k in 0 1; do grep -qx 'tuttirun: restart 1/1 after rank 1 (node 0) exited with status 7' $logs/ncause.\$k &&
       grep -qx 'tuttirun:   rank:       1 (local rank 1 on node 0)' $logs/ncause.\$k || exit 1; done) &&
     [[ \$(cat $logs/ncause.[01] | grep -c '^tuttirun: restart [0-9]') -eq 2 ]]"
  [[ $fail -eq $failed_before ]] || show_nodes ncause

  # Node 1's tuttirun is killed while the ranks run: node 0 says so and ends at once.
  failed_before=$fail
  node_bg ngone 0 --max-restarts=2 "$prog" sleep 60
  node_bg ngone 1 --max-restarts=2 "$prog" sleep 60
  local i
  for ((i = 0; i < 300; i++)); do
    [[ $(cat "$logs"/ngone.[01] 2>/dev/null | grep -c 'restarts: attempt 0 rank [0-3] of 4: world up') -eq 4 ]] && break
    sleep 0.1
  done
  local t0=$SECONDS
  kill -KILL "$(cat "$logs/ngone.1.pid")"
  wait_nodes ngone
  check "two nodes, node 1's tuttirun killed: node 0 exits 1 within 15 s (got $rc0 after $((SECONDS - t0)) s)" \
    "[[ $rc0 == 1 && $((SECONDS - t0)) -le 15 ]]"
  check "two nodes, node 1's tuttirun killed: node 0 names it" \
    "grep -q \"^tuttirun: node 1's tuttirun went away during attempt 0\" $logs/ngone.0"
  [[ $fail -eq $failed_before ]] || show_nodes ngone

  # Node 1 never comes, or comes with another token: node 0 gives up after --rdzv-timeout.
  failed_before=$fail
  t0=$SECONDS
  node_bg nmissing 0 --max-restarts=1 --rdzv-timeout=2 "$prog" ok
  echo 0 >"$logs/nmissing.1.rc"
  wait_nodes nmissing
  check "two nodes, node 1 missing: node 0 exits 1 after --rdzv-timeout=2, naming node 1 (got $rc0)" \
    "[[ $rc0 == 1 && $((SECONDS - t0)) -le 15 ]] && grep -q '^tuttirun: node 1 did not join the restart rendezvous on 10.79.0.1:29401 within 2 s' $logs/nmissing.0"
  node_bg ntoken 0 --max-restarts=1 --rdzv-timeout=3 "$prog" ok
  TUTTI_JOB_TOKEN=another node_bg ntoken 1 --max-restarts=1 --rdzv-timeout=3 "$prog" ok
  wait_nodes ntoken
  check "two nodes, node 1 with another TUTTI_JOB_TOKEN: refused, both exit 1 (got $rc0, $rc1)" \
    "[[ $rc0 == 1 && $rc1 == 1 ]] && grep -q '^tuttirun: node 0.s tuttirun at 10.79.0.1:29401 refused this node: wrong job token' $logs/ntoken.1"
  [[ $fail -eq $failed_before ]] || show_nodes ntoken
}

case $part in
  local) run_local ;;
  nodes) run_nodes ;;
  all) run_local; run_nodes ;;
  *) echo "usage: $0 <tuttirun> <restarts program> [local|nodes|all]" >&2; exit 2 ;;
esac
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
