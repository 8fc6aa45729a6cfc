#!/usr/bin/env bash
# Randomized faults under tuttirun (see fault_random.cpp): each trial picks, from its seed, 2..5
# ranks, SIGKILL or SIGSTOP, a victim and a moment, and checks that
#   - every survivor raised peer_lost/timeout_error naming the victim within TUTTI_TIMEOUT + 2 s,
#     and no collective before the fault returned a wrong result;
#   - tuttirun ended (no outer timeout), exited non-zero and named the victim (for SIGSTOP: that it
#     was stopped, and that tuttirun killed it);
#   - no rank process is left, nothing of the job in /dev/shm, /tmp or /proc/net/unix, and for tcp
#     nothing listens on the job's master port, which can be bound again.
#   With TUTTI_FAULT_SHRINK=1 (3..5 ranks, tuttirun --keep-going), also that every survivor
#   shrank into a job of the others and ran 20 more verified collectives.
# Usage: fault_random.sh <tuttirun> <fault_random binary> <shm|tcp>
# Environment: TUTTI_FAULT_TRIALS (default 30; soak: e.g. 300), TUTTI_FAULT_SEED (a trial seed
# printed by an earlier run: replays that one trial), TUTTI_FAULT_BASE_SEED (first trial seed;
# default random), TUTTI_TIMEOUT (default 3).
set -u
tuttirun=$1 prog=$2 transport=$3
trials=${TUTTI_FAULT_TRIALS:-30}
timeout_s=${TUTTI_TIMEOUT:-3}
base=${TUTTI_FAULT_BASE_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
if [[ -n ${TUTTI_FAULT_SEED:-} ]]; then base=$TUTTI_FAULT_SEED trials=1; fi
shrink=${TUTTI_FAULT_SHRINK:-0}
keep=()
[[ $shrink == 1 ]] && keep=(--keep-going)
echo "fault_random $transport${keep:+ (shrink)}: $trials trials from seed $base (replay one: TUTTI_FAULT_SEED=<seed> $0 $*)"
pass=0 fail=0 failed_seeds=()
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); bad=1; echo "FAIL seed $seed: $1"; fi; }
source "$(dirname "$0")/leftovers.sh"
start_all=$SECONDS
for ((t = 0; t < trials; ++t)); do
  seed=$((base + t)) bad=0
  read -r np sig victim at delay port < <("$prog" --plan "$seed" | sed 's/[a-z_]*=//g')
  job="faultrand$$-$seed"
  t0=${EPOCHREALTIME/./}
  out=$(TUTTI_JOB_ID=$job TUTTI_TIMEOUT=$timeout_s timeout -k 5 60 "$tuttirun" --nproc-per-node="$np" \
        --master-port="$port" --grace=5 "${keep[@]}" "$prog" "$seed" 2>&1)
  status=$?
  took=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))
  echo "trial $t seed $seed: np=$np SIG$sig victim=$victim at=$at delay=${delay}us -> tuttirun status $status in ${took} ms"
  check "tuttirun ended by itself (not the outer timeout)" "[[ $status -ne 124 ]]"
  check "tuttirun exited non-zero" "[[ $status -ne 0 ]]"
  if [[ $sig == KILL ]]; then
    check "tuttirun names rank $victim as killed" "grep -q 'rank $victim (pid [0-9]*) was killed by signal 9' <<<\"\$out\""
  else
    check "tuttirun names rank $victim as stopped" "grep -q 'rank $victim (pid [0-9]*) was stopped by signal 19' <<<\"\$out\""
    check "tuttirun killed the stopped rank $victim" "grep -q 'rank $victim (pid [0-9]*) is stopped: killing it' <<<\"\$out\""
  fi
  ok=$(grep -c "survivor rank .*\[expected kind, names rank $victim: yes, in time: yes, transport fds: 0\]" <<<"$out")
  check "all $((np - 1)) survivors raised peer_lost/timeout_error naming rank $victim in time" "[[ $ok -eq $((np - 1)) ]]"
  if [[ $shrink == 1 ]]; then
    ok=$(grep -c "shrunk: rank [0-9]* carries on as rank [0-9]* of $((np - 1)); 20 collectives verified" <<<"$out")
    check "all $((np - 1)) survivors shrank and ran on" "[[ $ok -eq $((np - 1)) ]]"
  fi
  check "no wrong result, no victim that ran on" "! grep -q 'WRONG RESULT\\|VICTIM ran on\\|SHRINK' <<<\"\$out\""
  grep -o 'survivor rank [0-9]* in collective [0-9]* ([^)]*) after [0-9.]* s' <<<"$out" | sed 's/^/  /'
  check "no rank process left" "! pgrep -f -- '$prog $seed\$' >/dev/null"
  check "no abstract socket of the job left" "! grep -q '$job' /proc/net/unix"
  check "nothing of the job in /dev/shm or /tmp" "! ls -A /dev/shm /tmp 2>/dev/null | grep -q '$job'"
  if [[ $transport == tcp ]]; then
    check "nothing listens on the master port $port" "[[ -z \$(ss -Htln 'sport = :$port') ]]"
    check "the master port $port can be bound again" "'$prog' --bind-port $port >/dev/null"
  fi
  if ((bad)); then
    failed_seeds+=("$seed")
    echo "$out" | tail -25 | sed 's/^/  | /'
  fi
done
seed=all
check "nothing new in /dev/shm or /tmp" "! new_leftovers"
echo "fault_random $transport${keep:+ (shrink)}: $trials trials in $((SECONDS - start_all)) s, $pass checks passed, $fail failed${failed_seeds[*]:+; failed seeds: ${failed_seeds[*]}}"
[[ $fail -eq 0 ]]
