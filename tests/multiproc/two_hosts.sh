#!/usr/bin/env bash
# A job of two "hosts" on one machine: two tuttirun --nnodes=2 on loopback, each with NPROC ranks,
# sharing a master port and a job token. Runs PROGRAM on every rank; passes when both launchers
# exit 0 and every rank printed doctest's success line.
# Usage: two_hosts.sh <tuttirun> <nproc> <program> [args...]
set -u
tuttirun=$1 nproc=$2
shift 2
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
port=$((20000 + RANDOM % 20000))
token=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
for k in 0 1; do
  TUTTI_JOB_TOKEN=$token TUTTI_TIMEOUT=120 timeout 600 "$tuttirun" --nnodes=2 --node-rank=$k --nproc-per-node="$nproc" \
    --master-addr=127.0.0.1 --master-port=$port "$@" >"$logs/$k" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
ok=$(cat "$logs"/0 "$logs"/1 | grep -c 'Status: SUCCESS')
if [[ $status -ne 0 || $ok -ne $((2 * nproc)) ]]; then
  echo "FAIL: launchers exited $status, $ok of $((2 * nproc)) ranks passed; last lines per host:"
  tail -25 "$logs"/0 "$logs"/1
  exit 1
fi
echo "PASS: 2 hosts x $nproc ranks, every rank passed"
