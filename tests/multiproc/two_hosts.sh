#!/usr/bin/env bash
# A job of two "hosts" on one machine: two tuttirun --nnodes=2 on loopback, each with NPROC ranks,
# sharing a master port and a job token. Runs PROGRAM on every rank; passes when both launchers
# exit 0 and every rank printed doctest's success line.
# Usage: two_hosts.sh <tuttirun> <nproc> <program> [args...]
#
# The master port is picked below the kernel's ephemeral range (where the listeners and
# connections of tests running beside this one get their ports) among ports nobody listens on;
# a port taken in between (node 0 says "already in use") is a retry with another, not a failure.
set -u
tuttirun=$1 nproc=$2
shift 2
logs=$(mktemp -d)
# The hosts are told apart by TUTTI_NODE_ID (the same kernel and namespaces): ranks 0..nproc-1
# on host 0, the rest on host 1, as the tests that learn locality check (TUTTI_TEST_HOSTS).
hosts=$(for ((r = 0; r < 2 * nproc; r++)); do printf '%s%d' "$([[ $r -gt 0 ]] && echo ,)" $((r / nproc)); done)
trap 'rm -rf "$logs"' EXIT
read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || ephemeral_low=32768
pick_port() {
  local p
  for _ in $(seq 50); do
    p=$((10000 + RANDOM % (ephemeral_low - 10000)))
    if command -v ss >/dev/null; then
      [[ -z $(ss -Htln "sport = :$p" 2>/dev/null) ]] && { echo "$p"; return; }
    else
      (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    fi
  done
  echo "$p"
}
for attempt in 1 2 3; do
  port=$(pick_port)
  token=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  pids=()
  # The launchers' limit is under ctest's (600 s) so that a stuck job still prints its logs here.
  for k in 0 1; do
    TUTTI_NODE_ID=loopback-host$k TUTTI_TEST_HOSTS=$hosts TUTTI_JOB_TOKEN=$token TUTTI_TIMEOUT=120 timeout 400 "$tuttirun" --nnodes=2 --node-rank=$k \
      --nproc-per-node="$nproc" --master-addr=127.0.0.1 --master-port=$port "$@" >"$logs/$k" 2>&1 &
    pids+=($!)
  done
  status=0
  for p in "${pids[@]}"; do wait "$p" || status=$?; done
  if [[ $status -ne 0 ]] && grep -q "is already in use" "$logs/0" && ((attempt < 3)); then
    echo "# port $port was taken before node 0 bound it; again with another"
    continue
  fi
  break
done
ok=$(cat "$logs"/0 "$logs"/1 | grep -c 'Status: SUCCESS')
if [[ $status -ne 0 || $ok -ne $((2 * nproc)) ]]; then
  echo "FAIL: launchers exited $status (124: killed after 400 s), $ok of $((2 * nproc)) ranks passed (port $port); last lines per host:"
  tail -40 "$logs"/0 "$logs"/1
  exit 1
fi
echo "PASS: 2 hosts x $nproc ranks, every rank passed (port $port)"
