#!/usr/bin/env bash
# Hierarchical against flat collectives across hosts, and against the link's bound, in one run.
# Hosts are network namespaces joined by veth pairs to a bridge, each link shaped with tc tbf
# (both ways) to RATE; iperf3 measures one stream across a link; then on 2 hosts x 2 ranks and
# 3 hosts x 2 ranks tutti_bench_hierarchy times all_reduce, all_gather and reduce_scatter of
# BYTES, hierarchy<shm, tcp> and flat tcp alternating, best of N rounds, beside the bound: the
# bytes each host must move across its link at iperf3's rate.
# Usage (root: CAP_NET_ADMIN): bench/compare_hierarchy.sh [build-dir] [rate, default 2gbit] [bytes] [rounds]
# Where namespaces cannot be made it says so and exits 77. They are removed whatever happens.
set -u
build=${1:-build} rate=${2:-2gbit} bytes=${3:-67108864} rounds=${4:-5}
tuttirun=$build/tools/tuttirun
prog=$build/bench/tutti_bench_hierarchy
skip() { echo "SKIP: $*"; exit 77; }
for f in "$tuttirun" "$prog"; do
  [[ -x $f ]] || { echo "missing $f: build with -DTUTTI_BUILD_BENCH=ON" >&2; exit 1; }
done
[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null && command -v tc >/dev/null || skip "needs iproute2 (ip, tc)"
command -v iperf3 >/dev/null || skip "needs iperf3 to measure the link"

tag="tb$$"
hub="" nodes=()
out=$(mktemp -d)
source "$(dirname "$0")/../tests/multiproc/netns_hosts.sh"
trap 'remove_hosts; rm -rf "$out"' EXIT
trap 'exit 130' INT TERM
make_hosts "$tag" 10.78.0 eth0 "" "$rate"

echo "# machine: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus"
echo "# hosts: network namespaces, veth to a bridge, tc tbf $rate each way on every host's link"
ip netns exec "${nodes[1]}" iperf3 -s -1 -B 10.78.0.2 -p 5201 >"$out/iperf3.server" 2>&1 &
sleep 0.5
if ! ip netns exec "${nodes[0]}" iperf3 -c 10.78.0.2 -p 5201 -t 4 -f g >"$out/iperf3" 2>&1; then
  cat "$out/iperf3"
  echo "iperf3 failed" >&2
  exit 1
fi
gbit=$(awk '/receiver/ { print $(NF - 2) }' "$out/iperf3")
echo "# iperf3: one stream host a -> host b, 4 s: $gbit Gbit/s"

# job NNODES NPROC: tuttirun on the first NNODES hosts, rank 0 on host a.
job() {
  local nnodes=$1 nproc=$2 k pids=() status=0
  local port=$((20000 + RANDOM % 20000)) token
  token=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  for ((k = 0; k < nnodes; k++)); do
    TUTTI_JOB_TOKEN=$token TUTTI_TIMEOUT=300 timeout 900 ip netns exec "${nodes[$k]}" \
      "$tuttirun" --nnodes="$nnodes" --node-rank="$k" --nproc-per-node="$nproc" \
      --master-addr=10.78.0.1 --master-port="$port" "$prog" --rate-gbit "$gbit" -b "$bytes" -n "$rounds" \
      >"$out/job.$k" 2>&1 &
    pids+=($!)
  done
  for k in "${!pids[@]}"; do wait "${pids[$k]}" || status=$?; done
  grep -h '^\[rank 0\]' "$out/job.0" | sed 's/^\[rank 0\] //'
  if [[ $status -ne 0 ]]; then
    echo "job failed (exit $status):"
    for ((k = 0; k < nnodes; k++)); do tail -5 "$out/job.$k"; done
  fi
  return $status
}
echo
echo "## 2 hosts x 2 ranks"
job 2 2
echo
echo "## 3 hosts x 2 ranks"
job 3 2
