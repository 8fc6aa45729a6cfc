# Sourced by tests/multiproc/netns.sh and bench/compare_hierarchy.sh: three "hosts" made of
# network namespaces, each joined by a veth pair to a bridge in a fourth, with nothing else (no
# route anywhere). The caller defines skip() (say why and exit 77) before calling.
#   make_hosts TAG NET IFNAME [V6PREFIX] [RATE]
# makes ${TAG}a, ${TAG}b, ${TAG}c (in the array `nodes`) and the hub ${TAG}h (`hub`); host i
# (1..3) gets NET.i/24 (and V6PREFIX::i/64) on interface IFNAME; with RATE (tc's units, e.g.
# 2gbit) each host's link is shaped with tc tbf both ways (out of the host, and into it at the
# bridge's port). remove_hosts deletes them (and kills what still runs inside).
make_hosts() {
  local tag=$1 net=$2 ifname=$3 v6=${4:-} rate=${5:-} i=0 ns
  hub="${tag}h"
  nodes=("${tag}a" "${tag}b" "${tag}c")
  ip netns add "$hub" 2>/dev/null || skip "cannot create a network namespace here (ip netns add failed: no CAP_NET_ADMIN?)"
  ip -n "$hub" link add br0 type bridge || skip "cannot create a bridge"
  ip -n "$hub" link set br0 up
  for ns in "${nodes[@]}"; do
    i=$((i + 1))
    ip netns add "$ns" || skip "cannot create namespace $ns"
    ip link add "${tag}x$i" type veth peer name "${tag}y$i" || skip "cannot create veth pairs"
    ip link set "${tag}x$i" netns "$ns"
    ip link set "${tag}y$i" netns "$hub"
    ip -n "$ns" link set "${tag}x$i" name "$ifname"
    ip -n "$hub" link set "${tag}y$i" name "p$i"
    ip -n "$hub" link set "p$i" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$net.$i/24" dev "$ifname"
    [[ -n $v6 ]] && ip -n "$ns" addr add "$v6::$i/64" dev "$ifname" nodad
    ip -n "$ns" link set "$ifname" up
    if [[ -n $rate ]]; then
      tc -n "$ns" qdisc add dev "$ifname" root tbf rate "$rate" burst 1mb latency 20ms || skip "tc tbf failed"
      tc -n "$hub" qdisc add dev "p$i" root tbf rate "$rate" burst 1mb latency 20ms || skip "tc tbf failed"
    fi
  done
}
remove_hosts() {
  local ns
  for ns in "${nodes[@]}" "$hub"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  return 0
}
