#!/usr/bin/env bash
# A start-up that cannot complete says what it waits for, early, then at growing intervals
# (bootstrap/progress.hpp), and its error names who never came; a healthy one says nothing.
# With TUTTI_TIMEOUT=4 the first word is due after 1 s, the next after 2 s, the deadline at 4 s;
# each log is looked at once at 2.5 s (the job still running) and again at the end.
#   tcp.missing: a job of 3 on loopback (tuttirun --nnodes=3, one rank a node) whose node 2 is
#     never started: rank 0's store names rank 2 and its address before the deadline, rank 1 (it
#     reached the store) stays quiet, and the errors name rank 2 as never signed in.
#   tcp.other_port: the job: node 0 and node 1 with different MASTER_PORTs. Rank 1 says
#     early, and again while it retries, that it cannot reach 127.0.0.1:<its port>; rank 0's
#     store names rank 1 as missing.
#   shm.missing: a shm job of 3 started by hand whose rank 2 names another TUTTI_JOB_ID: rank 0
#     names rank 2 and the job, rank 2 says it cannot reach rank 0 of its job, rank 1 is quiet.
#   tcp.healthy, shm.healthy: tuttirun --nproc-per-node=3: no line of tutti's at all.
# Usage: startup.sh <tuttirun> <tutti_startup_tcp> <tutti_startup_shm>
set -u
tuttirun=$1 tcp_prog=$2 shm_prog=$3
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); echo "PASS $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# Lines of `file` matching the extended regex `re`.
count() { grep -cE -- "$2" "$1" 2>/dev/null; }
has() { [[ $(count "$1" "$2") -gt 0 ]]; }
read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || ephemeral_low=32768
# A port below the ephemeral range that nobody listens on (as two_hosts.sh picks).
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
token=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(pick_port) p1=$(pick_port) p2=$(pick_port)
while [[ $p1 == "$port" ]]; do p1=$(pick_port); done
while [[ $p2 == "$port" || $p2 == "$p1" ]]; do p2=$(pick_port); done
# node NAME NNODES K PORT: tuttirun for node K of NNODES (one rank each), in the background.
pids=()
node() {
  TUTTI_JOB_TOKEN=$token TUTTI_TIMEOUT=4 timeout 60 "$tuttirun" --failure-grace=1 --nnodes="$2" --node-rank="$3" \
    --master-addr=127.0.0.1 --master-port="$4" "$tcp_prog" >"$logs/$1" 2>&1 &
  pids+=($!)
}
# shm_rank NAME RANK JOB: rank RANK of a 3-rank shm job JOB started by hand.
shm_rank() {
  RANK=$2 WORLD_SIZE=3 LOCAL_RANK=$2 LOCAL_WORLD_SIZE=3 TUTTI_JOB_ID=$3 TUTTI_TIMEOUT=4 \
    timeout 60 "$shm_prog" >"$logs/$1" 2>&1 &
  pids+=($!)
}
start=$EPOCHREALTIME
node missing.0 3 0 "$port"
node missing.1 3 1 "$port"
node other_port.0 2 0 "$p1"
node other_port.1 2 1 "$p2"
shm_rank shm.0 0 "startup.$$"
shm_rank shm.1 1 "startup.$$"
shm_rank shm.2 2 "startup.$$.other"
sleep 2.5
running=0
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && running=$((running + 1)); done
for f in missing.0 missing.1 other_port.0 other_port.1 shm.0 shm.1 shm.2; do cp "$logs/$f" "$logs/$f.early"; done
early_at=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
for p in "${pids[@]}"; do wait "$p"; done
echo "# looked at the logs after ${early_at} s, with $running of ${#pids[@]} processes still running"

# The store's progress lines, and a rank's word that it cannot reach the store.
store_says="^(\[rank 0\] )?\[tutti store 127\.0\.0\.1:$port\] start-up: "
check "tcp.missing: all 4 processes still ran at 2.5 s (the deadline is 4 s)" "[[ $running -eq ${#pids[@]} ]]"
check "tcp.missing: by 2.5 s rank 0's store named rank 2 as missing and its address 127.0.0.1:$port" \
  "has '$logs/missing.0.early' '${store_says}.*2 of 3 ranks signed in.*waiting for rank 2 .*127\.0\.0\.1:$port'"
check "tcp.missing: at most one store line an interval (1 s, 2 s: 2 lines, 3 at most)" \
  "n=\$(count '$logs/missing.0' '$store_says'); [[ \$n -ge 1 && \$n -le 3 ]]"
check "tcp.missing: rank 1 reached the store, so it printed nothing of start-up" \
  "! has '$logs/missing.1' '\[tutti (rank|store)'"
check "tcp.missing: rank 0's error names rank 2 as never signed in to the store at 127.0.0.1:$port" \
  "has '$logs/missing.0' 'startup error: .*rank 2 never signed in to the store at 127\.0\.0\.1:$port'"

check "tcp.other_port: by 2.5 s rank 1 said it cannot reach 127.0.0.1:$p2" \
  "has '$logs/other_port.1.early' '\[tutti rank 1\] start-up: cannot reach the store at .*127\.0\.0\.1:$p2'"
check "tcp.other_port: rank 1 said it again while it retried (2 lines at least)" \
  "[[ \$(count '$logs/other_port.1' '\[tutti rank 1\] start-up: cannot reach the store at .*127\.0\.0\.1:$p2') -ge 2 ]]"
check "tcp.other_port: rank 1's error names 127.0.0.1:$p2" \
  "has '$logs/other_port.1' 'startup error: .*cannot reach the store at .*127\.0\.0\.1:$p2'"
check "tcp.other_port: by 2.5 s rank 0's store named rank 1 as missing" \
  "has '$logs/other_port.0.early' '\[tutti store 127\.0\.0\.1:$p1\] start-up: .*waiting for rank 1 '"
check "tcp.other_port: rank 0's error names rank 1 as never signed in to 127.0.0.1:$p1" \
  "has '$logs/other_port.0' 'startup error: .*rank 1 never signed in to the store at 127\.0\.0\.1:$p1'"

check "shm.missing: by 2.5 s rank 0 named rank 2 as missing from job startup.$$" \
  "has '$logs/shm.0.early' '^\[tutti rank 0\] shm start-up: .*2 of 3 ranks joined.*startup\.$$.*waiting for rank 2 '"
check "shm.missing: by 2.5 s rank 2 said it cannot reach rank 0 of job startup.$$.other" \
  "has '$logs/shm.2.early' '^\[tutti rank 2\] shm start-up: cannot reach rank 0 of job .*startup\.$$\.other'"
check "shm.missing: rank 1 reached rank 0, so it printed nothing of start-up" "! has '$logs/shm.1' '\[tutti (rank|store)'"
check "shm.missing: rank 0's error names rank 2 as never joined" \
  "has '$logs/shm.0' 'startup error: .*rank 2 never joined'"

# Healthy jobs, with the default deadline's first interval (3 s): not a line of tutti's.
TUTTI_TIMEOUT=120 timeout 120 "$tuttirun" --nproc-per-node=3 "$tcp_prog" >"$logs/tcp.healthy" 2>&1
rc_tcp=$?
TUTTI_TIMEOUT=120 timeout 120 "$tuttirun" --nproc-per-node=3 "$shm_prog" >"$logs/shm.healthy" 2>&1
rc_shm=$?
check "tcp.healthy: 3 ranks started, exit 0" "[[ $rc_tcp -eq 0 && \$(count '$logs/tcp.healthy' 'startup verdict: rank . of 3 started; all_reduce gives 3') -eq 3 ]]"
check "tcp.healthy: no line of tutti's" "! has '$logs/tcp.healthy' '\[tutti (rank|store)'"
check "shm.healthy: 3 ranks started, exit 0" "[[ $rc_shm -eq 0 && \$(count '$logs/shm.healthy' 'startup verdict: rank . of 3 started; all_reduce gives 3') -eq 3 ]]"
check "shm.healthy: no line of tutti's" "! has '$logs/shm.healthy' '\[tutti (rank|store)'"

if [[ $fail -gt 0 ]]; then
  for f in missing.0 missing.1 other_port.0 other_port.1 shm.0 shm.1 shm.2 tcp.healthy shm.healthy; do
    echo "---- $f:"
    tail -12 "$logs/$f"
  done
fi
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
