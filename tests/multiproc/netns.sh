#!/usr/bin/env bash
# Jobs across hosts, simulated with network namespaces: three "nodes" (namespaces) joined by veth
# pairs to a bridge in a fourth, with private addresses 10.77.0.1-3/24 and fd77::1-3/64 and
# nothing else (no route anywhere). tuttirun runs in each node; every collective is verified by
# tutti_tcp_tests in a 4-rank (2 nodes x 2) and a 6-rank (3 x 2) job, once over IPv6, once with
# TUTTI_SOCKET_IFNAME; the tcp demo runs across two nodes too. Needs root (CAP_NET_ADMIN);
# elsewhere it exits 77, which ctest reports as skipped. The namespaces are always removed.
# hierarchy<shm, tcp> learns the hosts from the node keys (one hostname and kernel, different
# network namespaces) and runs every collective against the reference and the flat one on
# 2 x 2, 3 x 2 and an uneven 2+1+1 job whose ranks are not numbered host by host (started
# without tuttirun); a mesh with tp over shm and dp over tcp runs on 3 x 2.
# Usage: netns.sh <tuttirun> <tutti_tcp_tests> <tutti_hierarchy_tests> <tutti_mesh_tcp> [tutti_demo_tcp]
# TUTTI_NETNS_FEWER=1 (the sanitizer builds, as their other suites over processes run fewer
# sizes): the 3x2 repeats of the 2x2 jobs over IPv4 (every collective, the hierarchy) are left to
# the release build; three nodes still run there (the mesh, the uneven hierarchy).
set -u
tuttirun=$1 prog=$2 hier=$3 meshes=$4 demo=${5:-}
fewer=${TUTTI_NETNS_FEWER:-0}
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "needs iproute2 (ip)"

tag="t77$$"
hub="" nodes=()
source "$(dirname "$0")/netns_hosts.sh"
trap remove_hosts EXIT
trap 'exit 130' INT TERM
make_hosts "$tag" 10.77.0 eth77 fd77
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
logs=$(mktemp -d)
trap 'remove_hosts; rm -rf "$logs"' EXIT

# job NAME NNODES NPROC MASTER PROGRAM ARGS...: tuttirun on the first NNODES nodes at once.
job() {
  local name=$1 nnodes=$2 nproc=$3 master=$4
  shift 4
  local port=$((20000 + RANDOM % 20000)) token
  token=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  local pids=() k
  for ((k = 0; k < nnodes; k++)); do
    TUTTI_JOB_TOKEN=$token TUTTI_TIMEOUT=120 timeout 600 ip netns exec "${nodes[$k]}" \
      "$tuttirun" --nnodes="$nnodes" --node-rank="$k" --nproc-per-node="$nproc" \
      --master-addr="$master" --master-port="$port" "$@" >"$logs/$name.$k" 2>&1 &
    pids+=($!)
  done
  local status=0
  for k in "${!pids[@]}"; do wait "${pids[$k]}" || status=$?; done
  if [[ $status -ne 0 ]]; then
    echo "---- $name (exit $status), last lines per node:"
    for ((k = 0; k < nnodes; k++)); do tail -15 "$logs/$name.$k"; done
  fi
  return $status
}
# Every rank of the job printed doctest's success line.
all_passed() {
  local name=$1 ranks=$2
  [[ $(cat "$logs/$name".* | grep -c 'Status: SUCCESS') -eq $ranks ]]
}

job v4_2x2 2 2 10.77.0.1 "$prog"
check "4 ranks on 2 nodes (2x2) over IPv4: every collective verified" "all_passed v4_2x2 4"

if [[ $fewer == 1 ]]; then
  echo "SKIP 6 ranks on 3 nodes (3x2) over IPv4 (TUTTI_NETNS_FEWER: left to the release build)"
else
  job v4_3x2 3 2 10.77.0.1 "$prog"
  check "6 ranks on 3 nodes (3x2) over IPv4: every collective verified" "all_passed v4_3x2 6"
fi

job v6_2x2 2 2 fd77::1 "$prog"
check "4 ranks on 2 nodes (2x2) over IPv6: every collective verified" "all_passed v6_2x2 4"

TUTTI_SOCKET_IFNAME=eth77 TUTTI_TCP_STREAMS=2 job ifname_2x3 2 3 10.77.0.1 "$prog" -tc='*every collective*automatic*,*large*'
check "6 ranks on 2 nodes (2x3), TUTTI_SOCKET_IFNAME=eth77, 2 streams per pair" "all_passed ifname_2x3 6"

TUTTI_TEST_HOSTS=0,0,1,1 job hier_2x2 2 2 10.77.0.1 "$hier"
check "hierarchy<shm, tcp> on 2 nodes (2x2): the hosts learned, every collective as the reference and flat" "all_passed hier_2x2 4"

if [[ $fewer == 1 ]]; then
  echo "SKIP hierarchy<shm, tcp> on 3 nodes (3x2) (TUTTI_NETNS_FEWER: left to the release build)"
else
  TUTTI_TEST_HOSTS=0,0,1,1,2,2 job hier_3x2 3 2 10.77.0.1 "$hier"
  check "hierarchy<shm, tcp> on 3 nodes (3x2): the hosts learned, every collective as the reference and flat" "all_passed hier_3x2 6"
fi

TUTTI_TEST_HOSTS=0,0,1,1,2,2 job mesh_3x2 3 2 10.77.0.1 "$meshes"
check "mesh dp x tp = 3 x 2 with tp over shm on 3 nodes: every collective on every axis" "all_passed mesh_3x2 6"

# spawn NAME HOSTS PROGRAM: rank r in node HOSTS[r] (a, b or c), started directly with the
# launcher variables, rank 0's node the master.
spawn() {
  local name=$1 hosts=$2 program=$3
  local -a at=(${hosts//,/ })
  local n=${#at[@]} port=$((20000 + RANDOM % 20000)) token r pids=() status=0
  token=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  local master="10.77.0.$(( $(printf '%d' "'${at[0]}") - 96 ))"
  for ((r = 0; r < n; r++)); do
    local local_rank=0 local_size=0 q
    for ((q = 0; q < n; q++)); do
      [[ ${at[$q]} == "${at[$r]}" ]] || continue
      ((q < r)) && local_rank=$((local_rank + 1))
      local_size=$((local_size + 1))
    done
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$local_rank LOCAL_WORLD_SIZE=$local_size MASTER_ADDR=$master \
      MASTER_PORT=$port TUTTI_JOB_ID=$name.$$ TUTTI_JOB_TOKEN=$token TUTTI_TIMEOUT=120 TUTTI_TEST_HOSTS=$hosts \
      timeout 600 ip netns exec "${tag}${at[$r]}" "$program" >"$logs/$name.$r" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || status=$?; done
  if [[ $status -ne 0 ]]; then
    echo "---- $name (exit $status), last lines per rank:"
    for ((r = 0; r < n; r++)); do tail -15 "$logs/$name.$r"; done
  fi
  return $status
}

spawn hier_uneven b,a,c,a "$hier"
check "hierarchy<shm, tcp> on 2+1+1 ranks numbered out of host order (b,a,c,a): hosts learned, every collective" "all_passed hier_uneven 4"

if [[ -n $demo ]]; then
  TUTTI_DEBUG=info job demo 2 2 10.77.0.1 "$demo"
  status=$?
  check "the tcp demo on 2 nodes (2x2) exits 0" "[[ $status -eq 0 ]]"
  check "the demo's ranks on node 1 listen on node 1's address" \
    "grep -q 'tcp: listening on 10.77.0.2:' '$logs/demo.1'"
  check "the demo's all_reduce gives [24, 28, 32, 36] on all 4 ranks" \
    "[[ \$(cat '$logs'/demo.* | grep -c 'all_reduce(SUM): input .* -> output \[24, 28, 32, 36\]') -eq 4 ]]"
  check "the demo's broadcast gives rank 0's data on all 4 ranks" \
    "[[ \$(cat '$logs'/demo.* | grep -c 'broadcast(src=0): input .* -> output \[0, 1, 2, 3\]') -eq 4 ]]"
fi

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
