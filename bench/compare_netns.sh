#!/usr/bin/env bash
# tutti over real (shaped) links beside Open MPI, MPICH and Gloo: every collective at 16 B and
# 64 MiB across 2 and 3 "hosts", one rank per host, in one run. Hosts are network namespaces
# (tests/multiproc/netns_hosts.sh: one veth pair per host to a bridge in a hub namespace, nothing
# routed anywhere else), every host's link shaped both ways with tc tbf to each RATE in turn
# (netem is not available here). Per rate, iperf3 first measures one stream from host a to host b;
# then, per host count, R alternating rounds: tutti-bench over tcp (one tuttirun per namespace,
# joined through MASTER_ADDR on host a), Open MPI, MPICH and Gloo, then again. Prints per (rate,
# hosts) one table: 16 B latency (µs) and 64 MiB busbw as a fraction of iperf3's rate, each
# library's best round side by side, the ratio of tutti to the best peer and the worst round's
# ratio; and the bytes each library's run moved across the shaped links (the proof that it used
# them: a library finding shared memory between the namespaces would move almost none).
#
#   bench/compare_netns.sh [--build DIR] [--rates "2gbit 10gbit"] [--hosts "2 3"] [--rounds 3]
#       [--collectives "broadcast ... barrier"] [--algos automatic|all|"ring tree ..."]
#       [--peers "openmpi mpich gloo"] [--limit SECONDS]
#       [-b 16 -e 64M -f 2048 -n 0 -w 2 --time-per-size 0.05] [--out DIR]
# (the sweep visits 16 B, 32 KiB and 64 MiB; the tables show 16 B and 64 MiB, the CSVs all three;
# -n 0: every library times as many calls per size as fill --time-per-size seconds at its
# warm-up's pace, at least 5: thousands at 16 B, 5 at 64 MiB, as compare.sh does)
#
# How each library reaches the other hosts (addresses 10.79.0.1-3 on interface tnet0, host a runs
# rank 0 and every launcher):
#   tutti    ip netns exec HOST tuttirun --nnodes=H --node-rank=K --nproc-per-node=1
#            --master-addr=10.79.0.1 --master-port=P tutti-bench --transport tcp --algo A ...
#   Open MPI mpirun (in host a) --host 10.79.0.1:1,10.79.0.2:1[,..3:1] --mca plm_rsh_agent AGENT
#            --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include tnet0 --mca btl self,tcp
#            --mca btl_tcp_if_include tnet0 (AGENT: `ip netns exec` into the namespace holding
#            the address it is given, in place of ssh)
#   MPICH    MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp UCX_NET_DEVICES=tnet0 UCX_TCP_NODELAY=y (as in
#            compare.sh) mpiexec.mpich -launcher ssh
#            -launcher-exec AGENT -iface tnet0 -hosts 10.79.0.1,10.79.0.2[,..3] -ppn 1 -n H
#            (NOLOCAL matters here: the namespaces share one hostname, so MPICH would otherwise
#            take them for one node and talk through shared memory)
#   Gloo     ip netns exec HOST env RANK=K WORLD_SIZE=H TUTTI_GLOO_HOST=10.79.0.(K+1) gloo peer
#            (tcp transport on that address; FileStore rendezvous in /tmp, which all share)
# --algos: tutti's algorithms to run (default automatic, what a user gets; all: automatic ring
# tree recursive_doubling direct), tutti's figure being the best of them. Gloo runs every
# algorithm it has for a collective and its figure is the best. --limit S (default 600): a run
# still going after S seconds is stopped, what it measured is kept. Placement as compare.sh's:
# in place for broadcast and reduce, out of place for the others.
# At 3 hosts three ranks share this VM's two cores: the MPIs poll busily, so their 16 B times
# there measure the scheduler (milliseconds) more than the link; the 64 MiB figures are the
# link's. With the defaults (2 rates x 2 and 3 hosts, 3 rounds, -n 5 -w 2) a run takes about
# 30 minutes on the project's 2-core VM.
# Needs root (CAP_NET_ADMIN), iproute2 and iperf3; where namespaces cannot be made it says so and
# exits 77. Namespaces and everything running in them are removed on exit, whatever happens.
# Traffic never leaves the namespaces: no address outside 10.79.0.0/24 is used.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$here/../build rates="2gbit 10gbit" host_counts="2 3" rounds=3 limit=600 out=$here/out
collectives="broadcast reduce all_reduce gather all_gather scatter all_to_all reduce_scatter barrier"
algos=automatic peers="openmpi mpich gloo"
declare -A flag=([-b]=16 [-e]=64M [-f]=2048 [-n]=0 [-w]=2 [--time-per-size]=0.05)
[[ ${1:-} == -h || ${1:-} == --help ]] && { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
while (($#)); do
  (($# >= 2)) || { echo "compare_netns.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --build) build=$2 ;;
    --rates) rates=$2 ;;
    --hosts) host_counts=$2 ;;
    --rounds) rounds=$2 ;;
    --collectives) collectives=$2 ;;
    --algos) algos=$2 ;;
    --peers) peers=$2 ;;
    --limit) limit=$2 ;;
    --out) out=$2 ;;
    -b | -e | -f | -n | -w | --time-per-size) flag[$1]=$2 ;;
    *) echo "compare_netns.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift 2
done
sweep=(-b "${flag[-b]}" -e "${flag[-e]}" -f "${flag[-f]}" -n "${flag[-n]}" -w "${flag[-w]}"
       --time-per-size "${flag[--time-per-size]}")
[[ $algos == all ]] && algos="automatic ring tree recursive_doubling direct"
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "compare_netns.sh: --rounds: a positive integer (got '$rounds')" >&2; exit 2; }
for h in $host_counts; do
  [[ $h == 2 || $h == 3 ]] || { echo "compare_netns.sh: --hosts: 2 and/or 3 (got '$h')" >&2; exit 2; }
done
skip() { echo "SKIP: $*"; exit 77; }
tuttirun=$build/tools/tuttirun
tutti_bench=$build/tools/tutti-bench
mpi_peer=$build/bench/tutti_peer_mpi_bench
mpich_peer=$build/bench/tutti_peer_mpich_bench
gloo_peer=$build/bench/tutti_peer_gloo_bench
[[ -x $tuttirun ]] || { echo "missing $tuttirun: build the tools (cmake --build $build --target tuttirun)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null && command -v tc >/dev/null || skip "needs iproute2 (ip, tc)"
command -v iperf3 >/dev/null || skip "needs iperf3 to measure the link"

tag="tn$$"
net=10.79.0 ifname=tnet0
hub="" nodes=()
work=$(mktemp -d)
# shellcheck source=../tests/multiproc/netns_hosts.sh
source "$here/../tests/multiproc/netns_hosts.sh"
cleanup() {
  remove_hosts
  rm -rf "$work" /tmp/tutti-gloo-bench-"$(id -u)"-"$tag"-* 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
make_hosts "$tag" "$net" "$ifname" "" ""
mkdir -p "$out"

# The launchers' stand-in for ssh: `AGENT [ssh options] ADDRESS COMMAND...` runs COMMAND (a shell
# command line, as ssh would hand it to the remote shell) in the namespace holding ADDRESS.
agent=$work/agent.sh
{
  echo '#!/usr/bin/env bash'
  echo 'while [[ ${1:-} == -* ]]; do shift; done'
  echo 'host=$1; shift'
  echo 'case $host in'
  for i in 1 2 3; do echo "  $net.$i) ns=${nodes[$((i - 1))]} ;;"; done
  echo "  *) echo \"agent: no namespace holds \$host\" >&2; exit 255 ;;"
  echo 'esac'
  echo 'exec ip netns exec "$ns" /bin/sh -c "$*"'
} >"$agent"
chmod +x "$agent"

# shape RATE: every host's link, both ways (out of the host, and into it at the bridge's port)
shape() {
  local rate=$1 burst=1mb i
  [[ $rate == *[0-9]gbit ]] && ((${rate%gbit} > 4)) && burst=4mb  # tbf needs a burst of at least rate / HZ
  for i in 1 2 3; do
    tc -n "${nodes[$((i - 1))]}" qdisc replace dev "$ifname" root tbf rate "$rate" burst "$burst" latency 20ms || skip "tc tbf failed"
    tc -n "$hub" qdisc replace dev "p$i" root tbf rate "$rate" burst "$burst" latency 20ms || skip "tc tbf failed"
  done
}
# link_bytes H: bytes the first H hosts' links have carried (both ways, counted at the bridge)
link_bytes() {
  local i sum=0 tx rx
  for ((i = 1; i <= $1; i++)); do
    tx=$(ip netns exec "$hub" cat "/sys/class/net/p$i/statistics/tx_bytes")
    rx=$(ip netns exec "$hub" cat "/sys/class/net/p$i/statistics/rx_bytes")
    sum=$((sum + tx + rx))
  done
  echo "$sum"
}

echo "# machine: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# hosts: network namespaces $tag{a,b,c} on $net.1-3 ($ifname), veth to a bridge, tc tbf each way; one rank per host"
echo "# sweep: ${sweep[*]} -c 1; $rounds rounds (tutti, then each peer, alternating); tutti algorithms: $algos; peers: $peers"

list=$(echo $collectives | tr ' ' ',')
csv_header="library,collective,transport,algorithm,np,dtype,op,root,bytes,count,in_place,time_us,algbw_GBps,busbw_GBps,wrong,round,rounds"
job=0
notes=()

# run_hosts NAME H K CSV CMD...: CMD on each of the first H hosts at once (the string @K@ in CMD
# becomes the host's index, @ADDR@ its address; --csv only on host a), within --limit; then notes
# what it moved across the links and appends CSV's rows (round K) to the merged CSV.
append() {
  [[ -s $1 ]] || return 0
  awk -F, -v OFS=, -v k="$2" -v r="$rounds" -v lib="$3" 'NR > 1 && NF >= 15 { if (lib != "") $1 = lib; print $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, k, r }' "$1" >>"$merged"
}
# outcome NAME K RC LOG CSV BYTES: the note for one run
outcome() {
  local name=$1 k=$2 rc=$3 log=$4 csv=$5 moved=$6
  if ((rc == 0)); then
    notes+=("$name, round $k: $(awk -v b="$moved" 'BEGIN { printf "%.2f GB", b / 1e9 }') across the links")
  elif [[ -s $csv ]] && (($(wc -l <"$csv") > 1)); then
    notes+=("$name, round $k: stopped (exit $rc, --limit $limit s) after $(tail -1 "$csv" | cut -d, -f2,9 | tr , ' ') B; what it measured is kept")
  else
    notes+=("$name, round $k: failed (exit $rc): $(grep -v '^\s*$' "$log" 2>/dev/null | tail -3 | tr '\n' ' ' | cut -c1-240)")
  fi
}

# watched NAME LOG -- CMD...: CMD within --limit, its output in LOG. A peer prints "# done" once
# its figures are written: one still running 15 s later (hung in its MPI's shutdown) is stopped
# and counts as done.
watched() {
  local name=$1 log=$2 rc=0 pid i
  shift 3
  timeout -k 10 "$limit" "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q '^# done' "$log" 2>/dev/null; then
      for ((i = 0; i < 75; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        notes+=("$name: still running 15 s after its last figure (hung in its shutdown); stopped, its figures kept")
        return 0
      fi
      break
    fi
    sleep 0.2
  done
  wait "$pid" || rc=$?
  return $rc
}

run_tutti() {  # H K ALGO
  local h=$1 k=$2 algo=$3 i pids=() rc=0 b0 b1 port token
  [[ -x $tutti_bench ]] || return 0
  job=$((job + 1))
  port=$((20000 + RANDOM % 20000))
  token=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  rm -f "$work/tutti.csv"
  b0=$(link_bytes "$h")
  for ((i = 0; i < h; i++)); do
    local csvflag=()
    ((i == 0)) && csvflag=(--csv "$work/tutti.csv")
    TUTTI_JOB_TOKEN=$token TUTTI_TIMEOUT=120 timeout -k 10 "$limit" ip netns exec "${nodes[$i]}" \
      "$tuttirun" --nnodes="$h" --node-rank="$i" --nproc-per-node=1 --master-addr="$net.1" --master-port="$port" \
      "$tutti_bench" --transport tcp --algo "$algo" --collective "$list" "${sweep[@]}" -c 1 "${csvflag[@]}" \
      >"$work/tutti.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || rc=$?; done
  b1=$(link_bytes "$h")
  outcome "tutti $algo" "$k" "$rc" "$work/tutti.0.log" "$work/tutti.csv" $((b1 - b0))
  # the algorithm column says what was asked for (automatic stays automatic)
  [[ -s $work/tutti.csv ]] && awk -F, -v OFS=, -v a="$algo" 'NR == 1 { print; next } { $4 = a; print }' "$work/tutti.csv" >"$work/tutti.named.csv" &&
    append "$work/tutti.named.csv" "$k" ""
}

run_openmpi() {  # H K
  local h=$1 k=$2 rc=0 b0 b1 hosts="" i
  [[ -x $mpi_peer ]] && command -v mpirun >/dev/null || { ((k == 1)) && notes+=("openmpi: $mpi_peer or mpirun missing"); return 0; }
  for ((i = 1; i <= h; i++)); do hosts+="${hosts:+,}$net.$i:1"; done
  rm -f "$work/openmpi.csv"
  b0=$(link_bytes "$h")
  watched openmpi "$work/openmpi.log" -- ip netns exec "${nodes[0]}" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$h" \
    --host "$hosts" --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include "$ifname" \
    --mca btl self,tcp --mca btl_tcp_if_include "$ifname" \
    "$mpi_peer" --collective "$list" "${sweep[@]}" -c 1 --placement tutti --transport tcp --csv "$work/openmpi.csv" || rc=$?
  b1=$(link_bytes "$h")
  outcome openmpi "$k" "$rc" "$work/openmpi.log" "$work/openmpi.csv" $((b1 - b0))
  append "$work/openmpi.csv" "$k" ""
}

run_mpich() {  # H K
  local h=$1 k=$2 rc=0 b0 b1 hosts="" i
  [[ -x $mpich_peer ]] && command -v mpiexec.mpich >/dev/null || { ((k == 1)) && notes+=("mpich: $mpich_peer or mpiexec.mpich missing"); return 0; }
  for ((i = 1; i <= h; i++)); do hosts+="${hosts:+,}$net.$i"; done
  rm -f "$work/mpich.csv"
  b0=$(link_bytes "$h")
  watched mpich "$work/mpich.log" -- ip netns exec "${nodes[0]}" env MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp UCX_NET_DEVICES="$ifname" UCX_TCP_NODELAY=y \
    mpiexec.mpich -launcher ssh -launcher-exec "$agent" -iface "$ifname" -hosts "$hosts" -ppn 1 -n "$h" \
    "$mpich_peer" --collective "$list" "${sweep[@]}" -c 1 --placement tutti --transport tcp --csv "$work/mpich.csv" || rc=$?
  b1=$(link_bytes "$h")
  outcome mpich "$k" "$rc" "$work/mpich.log" "$work/mpich.csv" $((b1 - b0))
  append "$work/mpich.csv" "$k" ""
}

run_gloo() {  # H K
  local h=$1 k=$2 rc=0 b0 b1 i pids=()
  [[ -x $gloo_peer ]] || { ((k == 1)) && notes+=("gloo: $gloo_peer missing (Gloo needs libgloo-dev)"); return 0; }
  job=$((job + 1))
  rm -f "$work/gloo.csv"
  b0=$(link_bytes "$h")
  for ((i = 0; i < h; i++)); do
    timeout -k 10 "$limit" ip netns exec "${nodes[$i]}" env RANK="$i" WORLD_SIZE="$h" TUTTI_JOB_ID="$tag-$job" \
      TUTTI_GLOO_HOST="$net.$((i + 1))" "$gloo_peer" --collective "$list" "${sweep[@]}" -c 1 --placement tutti \
      --csv "$work/gloo.csv" >"$work/gloo.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || rc=$?; done
  b1=$(link_bytes "$h")
  rm -rf /tmp/tutti-gloo-bench-"$(id -u)"-"$tag-$job"
  outcome gloo "$k" "$rc" "$work/gloo.0.log" "$work/gloo.csv" $((b1 - b0))
  append "$work/gloo.csv" "$k" ""
}

has_peer() { [[ " $peers " == *" $1 "* ]]; }

# table CSV GBPS: one row per collective: 16 B latency and 64 MiB busbw / link, best of rounds
table() {
  awk -F, -v link="$2" -v nrounds="$rounds" -v order="$collectives" '
    NR == 1 { next }
    {
      c = $2; ip = (c == "broadcast" || c == "reduce") ? 1 : 0
      if ($11 != ip || $15 + 0 > 0) next  # the placement compared; a wrong result never counts
      size = $9 + 0; lib = $1; k = $16 + 0
      # sizes of np pieces are rounded down to a multiple of np elements (16 B at 3 ranks: 12)
      unit = $5 * ($6 == "double" || $6 == "int64" ? 8 : 4)
      if (c == "barrier") size = 16
      else if (size <= 16 && size > 16 - unit) size = 16
      else if (size <= 67108864 && size > 67108864 - unit) size = 67108864
      else next
      timed = size == 16
      v = timed ? $12 + 0 : $14 / link
      if (v <= 0) next
      key = c SUBSEP size SUBSEP lib
      if (!(key in best) || (timed ? v < best[key] : v > best[key])) best[key] = v
      rk = c SUBSEP size SUBSEP (lib == "tutti" ? "t" : "p") SUBSEP k
      if (!(rk in rb) || (timed ? v < rb[rk] : v > rb[rk])) rb[rk] = v
    }
    function get(c, s, l) { return ((c, s, l) in best) ? best[c, s, l] : "" }
    function f(v, d) { return v == "" ? "-" : sprintf("%." d "f", v) }
    END {
      n = split("tutti openmpi mpich gloo", libs, " ")
      printf "%-15s | %-52s | %-52s\n", "", "16 B: latency (us), best of " nrounds " rounds", "64 MiB: busbw / iperf3 rate, best of " nrounds " rounds"
      printf "%-15s |", "collective"
      for (j = 1; j <= 2; ++j) { for (i = 1; i <= n; ++i) printf " %7s", libs[i]; printf " %7s %7s |", "ratio", "worst" }
      printf "\n"
      m = split(order, colls, " ")
      for (q = 1; q <= m; ++q) {
        c = colls[q]
        printf "%-15s |", c
        for (j = 1; j <= 2; ++j) {
          s = j == 1 ? 16 : 67108864
          timed = j == 1
          if (c == "barrier" && j == 2) { printf " %47s |", ""; continue }
          tv = get(c, s, "tutti"); pv = ""
          for (i = 1; i <= n; ++i) {
            v = get(c, s, libs[i])
            printf " %7s", f(v, timed ? 1 : 3)
            if (i > 1 && v != "" && (pv == "" || (timed ? v < pv : v > pv))) pv = v
          }
          worst = ""
          for (k = 1; k <= nrounds; ++k) {
            a = c SUBSEP s SUBSEP "t" SUBSEP k; b = c SUBSEP s SUBSEP "p" SUBSEP k
            if (!(a in rb) || !(b in rb)) continue
            r = timed ? rb[b] / rb[a] : rb[a] / rb[b]
            if (worst == "" || r < worst) worst = r
          }
          ratio = (tv == "" || pv == "") ? "" : (timed ? pv / tv : tv / pv)
          printf " %7s %7s |", ratio == "" ? "-" : sprintf("%.2fx", ratio), worst == "" ? "-" : sprintf("%.2fx", worst)
        }
        printf "\n"
      }
    }' "$1"
}

for rate in $rates; do
  shape "$rate"
  # iperf3: one stream host a -> host b, 3 s
  ip netns exec "${nodes[1]}" iperf3 -s -1 -B "$net.2" -p 5201 >"$work/iperf3.server" 2>&1 &
  for _ in $(seq 50); do
    ip netns exec "${nodes[1]}" ss -Hltn "sport = :5201" 2>/dev/null | grep -q . && break
    sleep 0.1
  done
  gbit=""
  if ip netns exec "${nodes[0]}" timeout 30 iperf3 -c "$net.2" -p 5201 -t 3 -f g >"$work/iperf3" 2>&1; then
    gbit=$(awk '/receiver/ { print $(NF - 2) }' "$work/iperf3")
  fi
  wait 2>/dev/null
  [[ -n $gbit ]] || { cat "$work/iperf3"; echo "compare_netns.sh: iperf3 failed over the $rate link" >&2; exit 1; }
  gbs=$(awk -v g="$gbit" 'BEGIN { printf "%.4f", g / 8 }')
  for h in $host_counts; do
    merged=$out/netns_${rate}_h${h}.csv
    echo "$csv_header" >"$merged"
    notes=()
    for ((k = 1; k <= rounds; k++)); do
      [[ -t 2 ]] && echo "compare_netns.sh: $rate, $h hosts, round $k of $rounds" >&2
      for algo in $algos; do run_tutti "$h" "$k" "$algo"; done
      has_peer openmpi && run_openmpi "$h" "$k"
      has_peer mpich && run_mpich "$h" "$k"
      has_peer gloo && run_gloo "$h" "$k"
    done
    echo
    echo "## $h hosts x 1 rank, links shaped to $rate (tc tbf); iperf3, one stream: $gbit Gbit/s = $gbs GB/s"
    for n in "${notes[@]}"; do echo "# $n"; done
    table "$merged" "$gbs"
    echo "# csv: $merged"
  done
done
exit 0
