#!/usr/bin/env bash
# Tests of the tuttirun launcher.
# Usage: tools/test_tuttirun.sh path/to/tuttirun [case...]   (no case: all of them)
# Prints one line per case and a last line "N passed, M failed"; exits 1 if any failed.
# Every tuttirun run is bounded by `timeout 20` (or, in the background, by wait_bounded).
set -u

if [[ $# -lt 1 || ! -x $1 ]]; then
  echo "usage: $0 path/to/tuttirun [case...]" >&2
  exit 2
fi
T=$(realpath "$1")
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/out err=$work/err

# --- helpers ------------------------------------------------------------------------------------

now() { echo "${EPOCHREALTIME/./}"; }  # microseconds

# Runs tuttirun in the foreground; sets rc and secs (elapsed, whole seconds rounded up).
run() {
  local t0=$(now)
  timeout 20 "$T" "$@" >"$out" 2>"$err"
  rc=$?
  secs=$(( ($(now) - t0 + 999999) / 1000000 ))
}

# Waits for background pid $1 at most $2 seconds (SIGKILL after); sets rc and secs.
wait_bounded() {
  local pid=$1 limit=$2 t0=$(now)
  while kill -0 "$pid" 2>/dev/null && (( $(now) - t0 < limit * 1000000 )); do sleep 0.05; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  wait "$pid"
  rc=$?
  secs=$(( ($(now) - t0 + 999999) / 1000000 ))
}

# Waits until $2 files match glob $1 (at most 10 s).
wait_files() {
  local i
  for ((i = 0; i < 200; i++)); do
    local n=$(compgen -G "$1" | wc -l)
    (( n >= $2 )) && return 0
    sleep 0.05
  done
  bad "only $(compgen -G "$1" | wc -l) of $2 files $1 appeared"
}

# Prints "yes" if process $1 exists and is not a zombie (an orphan's reaper may be slow).
alive() { [[ -e /proc/$1/stat ]] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null && echo yes; }

bad() { echo "    $*"; ok=0; }
expect_rc() { [[ $rc == "$1" ]] || bad "exit status $rc, expected $1"; }
expect_within() { (( secs <= $1 )) || bad "took ${secs}s, expected at most $1 s"; }
expect_line() { grep -qxF -- "$2" "$1" || bad "no line '$2' in $(basename "$1")"; }
expect_match() { grep -qE -- "$2" "$1" || bad "nothing matches /$2/ in $(basename "$1")"; }
expect_no_match() { ! grep -qE -- "$2" "$1" || bad "unexpected /$2/ in $(basename "$1")"; }
expect_dead() {
  local p
  for p in "$@"; do [[ $(alive "$p") ]] && bad "process $p is still alive" && kill -KILL "$p"; done
}

# --- cases --------------------------------------------------------------------------------------

case_env_three_ranks() {
  run --nproc-per-node=3 --no-prefix -- sh -c \
    'echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $NODE_RANK $MASTER_ADDR $TUTTI_LAUNCHER'
  expect_rc 0
  sort "$out" >"$work/sorted"
  printf '%s\n' "0 3 0 3 0 0 127.0.0.1 tuttirun" "1 3 1 3 0 0 127.0.0.1 tuttirun" \
    "2 3 2 3 0 0 127.0.0.1 tuttirun" >"$work/want"
  cmp -s "$work/sorted" "$work/want" || bad "environment lines: $(tr '\n' '|' <"$out")"
}

case_env_second_node() {
  run --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 127.0.0.3 --master-port 29512 \
    --no-prefix sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $NODE_RANK $MASTER_ADDR $MASTER_PORT $TUTTI_JOB_ID $TUTTI_JOB_TOKEN'
  expect_rc 0
  expect_match "$out" '^2 4 0 2 1 1 127\.0\.0\.3 29512 [0-9a-f]{16} [0-9a-f]{32}$'
  expect_match "$out" '^3 4 1 2 1 1 127\.0\.0\.3 29512 [0-9a-f]{16} [0-9a-f]{32}$'
  # Node 0 of the same job derives the same id and token from master addr:port.
  local node1=$(cut -d' ' -f9,10 "$out" | sort -u)
  run --nnodes=2 --node-rank=0 --master-addr=127.0.0.3 --master-port=29512 --no-prefix \
    sh -c 'echo $TUTTI_JOB_ID $TUTTI_JOB_TOKEN'
  [[ $(cat "$out") == "$node1" ]] || bad "node 0 has '$(cat "$out")', node 1 '$node1'"
  # That token is not secret: tuttirun says so, and not when a token is given.
  expect_match "$err" 'warning: no TUTTI_JOB_TOKEN with --nnodes > 1'
  TUTTI_JOB_TOKEN=mine run --nnodes=2 --node-rank=0 --master-addr=127.0.0.3 --master-port=29512 --no-prefix \
    sh -c 'echo $TUTTI_JOB_TOKEN'
  expect_line "$out" "mine"
  grep -q 'warning' "$err" && bad "a warning although TUTTI_JOB_TOKEN is set: $(cat "$err")"
}

case_env_foreign_conventions() {
  # Inside an srun/mpirun task: the outer task's rank variables must not reach the ranks.
  TUTTI_RANK=7 TUTTI_WORLD_SIZE=8 SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_JOB_ID=99 OMPI_COMM_WORLD_RANK=1 \
    PMI_RANK=2 run --nproc-per-node=2 --no-prefix sh -c \
    'echo $RANK ${TUTTI_RANK-x} ${TUTTI_WORLD_SIZE-x} ${SLURM_PROCID-x} ${SLURM_NTASKS-x} ${OMPI_COMM_WORLD_RANK-x} ${PMI_RANK-x} $SLURM_JOB_ID'
  expect_rc 0
  expect_line "$out" "0 x x x x x x 99"
  expect_line "$out" "1 x x x x x x 99"
}

case_prefix_and_streams() {
  run --nproc-per-node=2 sh -c 'echo out $RANK; echo err $RANK >&2; printf "tail $RANK"'
  expect_rc 0
  local r
  for r in 0 1; do
    expect_line "$out" "[rank $r] out $r"
    expect_line "$out" "[rank $r] tail $r"
    expect_line "$err" "[rank $r] err $r"
  done
  expect_no_match "$out" 'err'
  expect_no_match "$err" 'out|tail'
}

case_no_prefix() {
  run --no-prefix --nproc_per_node 2 sh -c 'echo plain; echo e >&2'
  expect_rc 0
  [[ $(cat "$out") == $'plain\nplain' ]] || bad "stdout: $(cat "$out")"
  [[ $(cat "$err") == $'e\ne' ]] || bad "stderr: $(cat "$err")"
}

case_lines_not_interleaved() {
  # 4 ranks race to print 300 lines of 300 characters each, in small writes.
  run --nproc-per-node=4 sh -c \
    'l=$(printf "%0300d" 0); i=0; while [ $i -lt 300 ]; do printf "%s" "$RANK:"; echo "$l"; i=$((i+1)); done'
  expect_rc 0
  [[ $(wc -l <"$out") == 1200 ]] || bad "$(wc -l <"$out") lines, expected 1200"
  local badlines=$(grep -cvE '^\[rank ([0-3])\] \1:0{300}$' "$out")
  [[ $badlines == 0 ]] || bad "$badlines mangled lines"
}

case_failing_rank() {
  # --failure-grace=0: the others get SIGTERM at once.
  run --nproc-per-node=3 --failure-grace=0 sh -c 'if [ $RANK = 1 ]; then exit 3; fi; sleep 30'
  expect_rc 3
  expect_within 6
  expect_match "$err" '^tuttirun: rank 1 \(pid [0-9]+\) exited with status 3$'
  expect_line "$err" "tuttirun: stopping the other ranks"
  expect_no_match "$err" 'waiting up to'
  expect_match "$err" '^tuttirun: 3 of 3 ranks failed, rank 1 first \(exit status 3\):$'
  expect_match "$err" '^tuttirun:   rank 1 \(pid [0-9]+\) exited with status 3; nothing on stderr$'
  local r
  for r in 0 2; do
    expect_match "$err" "^tuttirun:   rank $r \\(pid [0-9]+\\) was killed by signal 15 \\(SIGTERM\\), sent by tuttirun"
  done
}

case_every_rank_says_why() {
  # As tutti ranks do when a peer fails: the others notice (here after 0.3 s), print why and exit.
  # The default failure grace (3 s) lets them, and ends as soon as they have exited.
  run --nproc-per-node=3 sh -c \
    'if [ $RANK = 1 ]; then echo boom >&2; exit 3; fi; sleep 0.3; echo "peer lost" >&2; echo >&2; exit 1'
  expect_rc 3
  expect_within 2
  expect_line "$err" "[rank 1] boom"
  expect_line "$err" "[rank 0] peer lost"
  expect_line "$err" "[rank 2] peer lost"
  expect_match "$err" '^tuttirun: waiting up to 3 s for the other ranks to exit on their own \(--failure-grace\)$'
  expect_no_match "$err" 'stopping the other ranks'
  # The summary ends stderr: the first failure first, then the others, each with its last line
  # that is not blank.
  tail -n 4 "$err" >"$work/summary"
  expect_match "$work/summary" '^tuttirun: 3 of 3 ranks failed, rank 1 first \(exit status 3\):$'
  [[ $(sed -n 2p "$work/summary") =~ ^tuttirun:\ \ \ rank\ 1\ \(pid\ [0-9]+\)\ exited\ with\ status\ 3\;\ last\ line\ on\ stderr:\ boom$ ]] ||
    bad "summary does not start with rank 1: $(sed -n 2p "$work/summary")"
  local r
  for r in 0 2; do
    expect_match "$work/summary" "^tuttirun:   rank $r \\(pid [0-9]+\\) exited with status 1; last line on stderr: peer lost$"
  done
}

case_failure_grace_then_term_then_kill() {
  # Rank 0 says why and exits within the failure grace; rank 2 ignores the SIGTERM that follows it
  # and is SIGKILLed after --grace.
  run --nproc-per-node=3 --failure-grace=1.5 --grace=0.5 sh -c '
    case $RANK in
      1) echo boom >&2; exit 3 ;;
      0) sleep 0.2; echo "peer lost" >&2; exit 1 ;;
      2) exec 3>&2; trap "echo ignoring SIGTERM >&3" TERM; while :; do sleep 0.1; done 2>/dev/null ;;
    esac'
  expect_rc 3
  expect_within 6
  expect_line "$err" "[rank 0] peer lost"
  expect_line "$err" "[rank 2] ignoring SIGTERM"
  expect_line "$err" "tuttirun: failure grace over: stopping the other ranks"
  expect_line "$err" "tuttirun: grace period over: killing the remaining ranks"
  # SIGTERM only after the grace: rank 0's line comes before it.
  local said=$(grep -nxF "[rank 0] peer lost" "$err" | cut -d: -f1) term=$(grep -n 'failure grace over' "$err" | cut -d: -f1)
  (( ${said:-999} < ${term:-0} )) || bad "rank 0's line (line ${said:-none}) is not before the SIGTERM (line ${term:-none})"
  expect_match "$err" '^tuttirun: 3 of 3 ranks failed, rank 1 first \(exit status 3\):$'
  expect_match "$err" '^tuttirun:   rank 1 \(pid [0-9]+\) exited with status 3; last line on stderr: boom$'
  expect_match "$err" '^tuttirun:   rank 0 \(pid [0-9]+\) exited with status 1; last line on stderr: peer lost$'
  expect_match "$err" '^tuttirun:   rank 2 \(pid [0-9]+\) was killed by signal 9 \(SIGKILL\), sent by tuttirun; last line on stderr: ignoring SIGTERM$'
}

case_keep_going() {
  run --nproc-per-node=3 --keep-going sh -c 'if [ $RANK = 1 ]; then echo boom >&2; exit 3; fi; sleep 0.5; echo done'
  expect_rc 3
  expect_line "$err" "tuttirun: --keep-going: the other ranks run on"
  expect_line "$out" "[rank 0] done"
  expect_line "$out" "[rank 2] done"
  expect_no_match "$err" 'stopping|waiting up to'
  expect_match "$err" '^tuttirun: 1 of 3 ranks failed, rank 1 first \(exit status 3\):$'
  expect_match "$err" '^tuttirun:   rank 1 \(pid [0-9]+\) exited with status 3; last line on stderr: boom$'
}

case_killed_rank() {
  run --nproc-per-node=2 sh -c 'if [ $RANK = 1 ]; then kill -KILL $$; fi; sleep 30'
  expect_rc 137
  expect_within 6
  expect_match "$err" '^tuttirun: rank 1 \(pid [0-9]+\) was killed by signal 9 \(SIGKILL\)$'
}

case_sigterm_stops_all() {
  "$T" --nproc-per-node=3 sh -c "echo \$\$ >$work/pid.\$RANK; exec sleep 30" >"$out" 2>"$err" &
  local launcher=$!
  wait_files "$work/pid.*" 3
  kill -TERM "$launcher"
  wait_bounded "$launcher" 10
  expect_rc 143
  expect_within 6
  expect_match "$err" 'received SIGTERM'
  expect_dead $(cat "$work"/pid.*)
}

case_grace_kills_stubborn_and_stopped() {
  # rank 0 ignores SIGTERM, rank 1 stops itself, rank 2 fails once both are set up.
  run --nproc-per-node=3 --failure-grace=0.2 --grace=1 sh -c "
    case \$RANK in
      0) trap '' TERM; echo \$\$ >$work/ready.0; while :; do sleep 1; done ;;
      1) echo \$\$ >$work/ready.1; kill -STOP \$\$; sleep 30 ;;
      2) while [ ! -e $work/ready.0 ] || [ ! -e $work/ready.1 ]; do sleep 0.05; done; sleep 0.2; exit 5 ;;
    esac"
  expect_rc 5
  expect_within 8
  expect_match "$err" '^tuttirun: rank 2 \(pid [0-9]+\) exited with status 5$'
  expect_match "$err" '^tuttirun: rank 1 \(pid [0-9]+\) was stopped by signal 19 \(SIGSTOP\)$'
  expect_match "$err" '^tuttirun: rank 1 \(pid [0-9]+\) is stopped: killing it \(SIGKILL\)$'
  expect_line "$err" "tuttirun: grace period over: killing the remaining ranks"
  expect_dead $(cat "$work"/ready.*)
}

case_second_sigint_kills() {
  # Job control, so that the background launcher does not start with SIGINT ignored.
  set -m
  "$T" --nproc-per-node=2 --grace=60 sh -c "trap '' INT; echo \$\$ >$work/int.\$RANK; exec sleep 30" \
    >"$out" 2>"$err" &
  local launcher=$!
  set +m
  wait_files "$work/int.*" 2
  kill -INT "$launcher"
  sleep 0.5
  kill -0 "$launcher" 2>/dev/null || bad "the first SIGINT already ended tuttirun"
  kill -INT "$launcher"
  wait_bounded "$launcher" 10
  expect_rc 130
  expect_within 3
  expect_match "$err" 'second SIGINT'
  expect_dead $(cat "$work"/int.*)
}

# Writes $work/leaves_sleep.sh, a rank that runs `sleep 300 &` through a shell of its own, as
# system("sleep 300 &") does, and then runs "$@". The shell runs the sleep with SIGINT ignored, as
# every `&` job of a non-interactive shell, and exits: the sleep is left with ppid 1 in the rank's
# process group. $work/left.R holds rank R's sleep's pid, $work/rank.R the rank's. Rank 0's sleep
# keeps tuttirun's pipes open, rank 1's does not.
left_behind_rank() {
  cat >"$work/leaves_sleep.sh" <<EOF
if [ \$RANK = 0 ]; then
  sh -c 'sleep 300 & echo \$! >$work/left.\$RANK'
else
  sh -c 'sleep 300 >/dev/null 2>&1 & echo \$! >$work/left.\$RANK'
fi
echo \$\$ >$work/rank.\$RANK
$*
EOF
}

# Fails the case if a sleep whose pid is in $work/left.* is still there 2 s after tuttirun exited
# (a SIGKILL may take a moment to land), and kills it. The pid is that sleep's as long as its
# command line is "sleep 300". The 2 s are for all the sleeps together, so that a case that fails
# does not wait them out once per sleep.
expect_left_dead() {
  local f p deadline=$(( $(now) + 2000000 ))
  for f in "$work"/left.*; do
    [[ -e $f ]] || { bad "no $f: the rank did not start its sleep"; continue; }
    p=$(cat "$f")
    while [[ $(alive "$p") ]] && (( $(now) < deadline )); do sleep 0.05; done
    if [[ $(alive "$p") && $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) == "sleep 300 " ]]; then
      bad "the sleep $p that rank ${f##*.} left in its process group outlived tuttirun"
      kill -KILL "$p"
    fi
  done
}

case_sigint_kills_what_ranks_left() {
  # Issue 26: the ranks exit on SIGINT, the sleeps they left ignore it; after --grace, tuttirun
  # kills both ranks' process groups, although their leaders have exited.
  left_behind_rank 'exec sleep 30'
  set -m
  "$T" --nproc-per-node=2 --grace=1 sh "$work/leaves_sleep.sh" >"$out" 2>"$err" &
  local launcher=$!
  set +m
  wait_files "$work/rank.*" 2
  wait_files "$work/left.*" 2
  kill -INT "$launcher"
  wait_bounded "$launcher" 10
  expect_rc 130
  expect_within 4
  expect_match "$err" '^tuttirun: received SIGINT, forwarding it to the ranks$'
  expect_line "$err" "tuttirun: grace period over: killing what is left in the process groups of ranks 0, 1"
  expect_dead $(cat "$work"/rank.*)
  expect_left_dead
}

case_failure_stops_what_ranks_left() {
  # Both ranks fail on their own within the failure grace, leaving sleeps behind: once no rank
  # runs, what they left is stopped at once (SIGTERM, which it does not ignore).
  left_behind_rank 'if [ $RANK = 1 ]; then exit 3; fi; sleep 0.2; exit 1'
  run --nproc-per-node=2 --failure-grace=10 --grace=10 sh "$work/leaves_sleep.sh"
  expect_rc 3
  expect_within 3
  expect_match "$err" '^tuttirun: rank 1 \(pid [0-9]+\) exited with status 3$'
  expect_line "$err" "tuttirun: stopping what is left in the process groups of ranks 0, 1"
  expect_no_match "$err" 'grace period over'
  expect_left_dead
}

case_success_stops_what_ranks_left() {
  # Every rank exits 0, leaving sleeps behind: the job is over, and so are they. Rank 1's sleep
  # ignores SIGTERM too, and gets SIGKILL after --grace; the job still succeeds.
  cat >"$work/leaves_sleep.sh" <<EOF
if [ \$RANK = 0 ]; then
  sh -c 'sleep 300 & echo \$! >$work/left.\$RANK'
else
  sh -c 'trap "" TERM; sleep 300 >/dev/null 2>&1 & echo \$! >$work/left.\$RANK'
fi
EOF
  run --nproc-per-node=2 --grace=0.3 sh "$work/leaves_sleep.sh"
  expect_rc 0
  expect_within 2
  expect_line "$err" "tuttirun: stopping what is left in the process groups of ranks 0, 1"
  expect_line "$err" "tuttirun: grace period over: killing what is left in the process group of rank 1"
  expect_no_match "$err" 'failed'
  expect_left_dead
}

case_success_spares_own_session() {
  # A process meant to outlive the job leaves its rank's process group before the rank exits:
  # setsid(1) puts it in a session of its own, which tuttirun does not stop. The rank waits for
  # the pid it writes once in that session.
  command -v setsid >/dev/null || { echo "    (no setsid: skipped)"; return; }
  run --nproc-per-node=1 sh -c "setsid sh -c 'echo \$\$ >$work/own && exec sleep 300' </dev/null >/dev/null 2>&1 &
    i=0; while [ ! -s $work/own ] && [ \$i -lt 200 ]; do sleep 0.01; i=\$((i + 1)); done"
  expect_rc 0
  expect_no_match "$err" 'stopping|killing'
  local p=$(cat "$work/own" 2>/dev/null)
  [[ -n $p ]] || { bad "the rank did not start its sleep"; return; }
  [[ $(alive "$p") ]] || bad "the sleep $p in a session of its own was stopped"
  kill -KILL "$p" 2>/dev/null
}

case_launcher_killed() {
  "$T" --nproc-per-node=2 sh -c "echo \$\$ >$work/pid.\$RANK; exec sleep 30" >"$out" 2>"$err" &
  local launcher=$!
  wait_files "$work/pid.*" 2
  kill -KILL "$launcher"
  wait "$launcher" 2>/dev/null
  local p i
  for p in $(cat "$work"/pid.*); do
    for ((i = 0; i < 100; i++)); do [[ $(alive "$p") ]] || break; sleep 0.05; done
    [[ $(alive "$p") ]] && bad "rank process $p outlived the SIGKILLed launcher" && kill -KILL "$p"
  done
}

case_closed_stdout() {
  # Like `prog | head`: once head exits, the ranks get SIGPIPE and tuttirun stops.
  timeout 20 "$T" --nproc-per-node=2 yes 2>"$err" | head -n 3 >"$out"
  rc=${PIPESTATUS[0]}
  expect_rc 141
  [[ $(wc -l <"$out") == 3 ]] || bad "head got $(wc -l <"$out") lines"
  expect_match "$err" 'was killed by signal 13 \(SIGPIPE\)$'
}

case_help_and_version() {
  run --help
  expect_rc 0
  local flag
  for flag in --nproc-per-node --nnodes --node-rank --master-addr --master-port --failure-grace --grace \
    --no-prefix --keep-going --help --version RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK NODE_RANK MASTER_ADDR \
    MASTER_PORT TUTTI_JOB_ID TUTTI_JOB_TOKEN TUTTI_LAUNCHER TUTTI_TRACE 'Exit status'; do
    grep -qF -- "$flag" "$out" || bad "--help does not mention $flag"
  done
  run --version
  expect_rc 0
  expect_match "$out" '^tuttirun \(tutti\) [0-9]'
}

case_bad_command_lines() {
  local -a cmdline
  while IFS= read -r line; do
    read -ra cmdline <<<"$line"
    run "${cmdline[@]}"
    [[ $rc == 2 ]] || bad "'tuttirun $line' exited with $rc, expected 2"
    [[ -s $err ]] || bad "'tuttirun $line' printed no message"
  done <<'EOF'
--bogus true
-x true
--nproc-per-node=abc true
--nproc-per-node=0 true
--nproc-per-node=3x true
--nproc-per-node=99999999999999999999999 true
--nnodes=2 --node-rank=2 --master-port=29500 true
--nnodes=2 true
--master-port=0 true
--master-port=65536 true
--grace=-1 true
--grace=soon true
--failure-grace=-1 true
--failure-grace=1e3 true
--no-prefix=yes true
--master-addr= true
--nproc-per-node
--nproc-per-node=2

--
EOF
}

case_missing_program() {
  # Found before any rank starts: no rank runs, and the status is a shell's (127).
  run --nproc-per-node=2 /nonexistent/tutti-program
  expect_rc 127
  expect_within 2
  expect_line "$err" "tuttirun: cannot run '/nonexistent/tutti-program': No such file or directory"
  expect_no_match "$err" 'rank [01]'
  # Looked for in PATH, as the ranks' exec does.
  PATH=/nonexistent-dir:$PATH run --nproc-per-node=2 tutti-no-such-program-$$
  expect_rc 127
  expect_within 2
  expect_line "$err" "tuttirun: cannot run 'tutti-no-such-program-$$': No such file or directory"
}

case_missing_program_not_restarted() {
  # Issue 26: --max-restarts=N started a missing program N + 1 times; it is not started at all.
  run --nproc-per-node=2 --max-restarts=3 /nonexistent/tutti-program
  expect_rc 127
  expect_within 2
  expect_line "$err" "tuttirun: cannot run '/nonexistent/tutti-program': No such file or directory"
  expect_line "$err" "tuttirun: no restart: every attempt would fail the same way"
  expect_no_match "$err" 'restart [0-9]'
  expect_line "$err" "tuttirun:   rank:       none (cannot run '/nonexistent/tutti-program': No such file or directory)"
  expect_line "$err" "tuttirun:   exit code:  127"
}

case_program_not_executable() {
  # Found, but not a file it can run: 126, as a shell says. A directory too.
  printf 'echo never\n' >"$work/not-executable"
  chmod 644 "$work/not-executable"
  run --nproc-per-node=2 --max-restarts=1 "$work/not-executable"
  expect_rc 126
  expect_within 2
  expect_line "$err" "tuttirun: cannot run '$work/not-executable': Permission denied"
  expect_no_match "$err" 'never|restart [0-9]'
  run "$work"
  expect_rc 126
  expect_line "$err" "tuttirun: cannot run '$work': Permission denied"
}

case_free_port() {
  run --nproc-per-node=2 --no-prefix sh -c 'echo $MASTER_PORT'
  expect_rc 0
  local ports=$(sort -u "$out")
  [[ $ports =~ ^[0-9]+$ ]] && (( ports > 0 && ports < 65536 )) || bad "MASTER_PORT '$ports'"
  run --master-port 4242 --no-prefix sh -c 'echo $MASTER_PORT'
  [[ $(cat "$out") == 4242 ]] || bad "--master-port 4242 gave '$(cat "$out")'"
}

case_job_id() {
  local script='echo $TUTTI_JOB_ID $TUTTI_JOB_TOKEN'
  run --nproc-per-node=3 --no-prefix sh -c "$script"
  expect_rc 0
  local first=$(sort -u "$out")
  [[ $first =~ ^[0-9a-f]{16}\ [0-9a-f]{32}$ ]] || bad "id and token across ranks: $(tr '\n' '|' <"$out")"
  run --nproc-per-node=3 --no-prefix sh -c "$script"
  local second=$(sort -u "$out")
  [[ ${first%% *} != "${second%% *}" ]] || bad "two launches share TUTTI_JOB_ID $first"
  [[ ${first##* } != "${second##* }" ]] || bad "two launches share TUTTI_JOB_TOKEN"
  TUTTI_JOB_ID=given TUTTI_JOB_TOKEN=secret run --nproc-per-node=2 --no-prefix sh -c "$script"
  [[ $(sort -u "$out") == "given secret" ]] || bad "preset id/token not kept: $(cat "$out")"
}

# --- trace (TUTTI_TRACE) -------------------------------------------------------------------------

# Checks the merged trace $1 as tools/trace-plot.sh and Perfetto read it: one event a line after
# the first, a comma after every one but the last, the metadata first, then every other event in
# order of "ts"; and, within each (pid, tid), no operation that begins before the one before it
# ended (ts[i] + dur[i] <= ts[i+1] + 0.001). The times are compared exactly, whole microseconds
# and fraction apart, as epoch microseconds have more digits than awk's doubles (or jq's) keep.
# Prints one line per problem (none if it is right).
trace_order_problems() {
  awk '
    # t = "W.F" microseconds: out["w"] the whole part, out["f"] the fraction in 1e-9 us (exact).
    function split_time(t, out,    i, fr) {
      i = index(t, ".")
      out["w"] = i ? substr(t, 1, i - 1) + 0 : t + 0
      fr = i ? substr(t, i + 1) : ""
      fr = substr(fr "000000000", 1, 9)
      out["f"] = fr + 0
    }
    function field(key,    re) {
      re = "\"" key "\":-?[0-9.eE+-]+"
      if (!match($0, re)) return ""
      return substr($0, RSTART + length(key) + 3, RLENGTH - length(key) - 3)
    }
    NR == 1 { if ($0 != "{\"traceEvents\":[") print "line 1 is not {\"traceEvents\":["; next }
    /^\],"displayTimeUnit":"ms"\}$/ { if (prev ~ /,$/) print "line " NR - 1 ", the last event, ends with a comma"; end = NR; next }
    end { print "line " NR " follows the last line"; next }
    { if (NR > 2 && prev !~ /,$/) print "line " NR - 1 " has no comma after it"; prev = $0 }
    /"ph":"M"/ { if (seen_x) print "line " NR ": metadata after an operation"; next }
    /"ph":"X"/ {
      seen_x = 1; n++
      ts = field("ts"); dur = field("dur"); pid = field("pid"); tid = field("tid")
      if (ts ~ /[eE]/ || dur ~ /[eE]/ || ts == "" || dur == "") { print "line " NR ": ts or dur not in fixed notation"; next }
      split_time(ts, t); split_time(dur, d)
      if (n > 1 && (t["w"] < lw || (t["w"] == lw && t["f"] < lf))) print "line " NR ": ts " ts " before the line before"
      lw = t["w"]; lf = t["f"]
      key = pid "/" tid
      if (key in ew) {
        # its start plus 0.001 us against the end of the one before on its track
        w = t["w"]; f = t["f"] + 1000000
        if (f >= 1000000000) { f -= 1000000000; w++ }
        if (ew[key] > w || (ew[key] == w && ef[key] > f))
          print "line " NR ": pid " pid " tid " tid " starts at " ts ", before the end of its operation on line " eline[key]
      }
      w = t["w"] + d["w"]; f = t["f"] + d["f"]
      if (f >= 1000000000) { f -= 1000000000; w++ }
      ew[key] = w; ef[key] = f; eline[key] = NR
      next
    }
    { print "line " NR " is neither metadata nor an operation: " substr($0, 1, 80) }
    END {
      if (!end) print "no last line ],\"displayTimeUnit\":\"ms\"}"
      if (!n) print "no operation (\"ph\":\"X\")"
    }' "$1"
}

case_trace_merge() {
  # Ranks that write their files as tutti does: ranks 0 and 1 whole (rank 1 then fails), rank 2
  # cut short, as if killed while writing. Left from an earlier run: this host's file and the
  # merged trace (removed at the start); kept: a file of host <this host>-x (merged too) and a
  # file that is no trace.
  local dir=$work/trace host=$(uname -n)
  mkdir -p "$dir"
  echo stale >"$dir/tutti-trace-$host-999999.json"
  echo stale >"$dir/trace.json"
  echo notes >"$dir/notes.txt"
  printf '%s\n' '{"traceEvents":[' \
    '{"name":"process_name","ph":"M","pid":7,"tid":0,"args":{"name":"rank 7"}},' \
    '{"name":"barrier","cat":"collective","ph":"X","pid":7,"tid":1,"ts":1733280000000005.5,"dur":1,"args":{}}' \
    ']}' >"$dir/tutti-trace-$host-x-1.json"
  cat >"$work/rank.sh" <<'RANK'
f=$TUTTI_TRACE/tutti-trace-$(uname -n)-$$.json
t=$((1733280000000000 + RANK))
{
  echo '{"traceEvents":['
  echo "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":$RANK,\"tid\":0,\"args\":{\"name\":\"rank $RANK\"}},"
  echo "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":$RANK,\"tid\":1,\"args\":{\"name\":\"communicator 0\"}},"
  if [ "$RANK" = 2 ]; then
    printf '{"name":"all_reduce","cat":"coll'
  else
    echo "{\"name\":\"all_reduce\",\"cat\":\"collective\",\"ph\":\"X\",\"pid\":$RANK,\"tid\":1,\"ts\":$t.250,\"dur\":10.5,\"args\":{\"seq\":0,\"error\":\"a \\\"ts\\\":1 in a string\"}},"
    echo "{\"name\":\"barrier\",\"cat\":\"collective\",\"ph\":\"X\",\"pid\":$RANK,\"tid\":1,\"ts\":$((t + 10)).750,\"dur\":2,\"args\":{\"seq\":1}}"
    echo ']}'
  fi
} >"$f.tmp"
mv "$f.tmp" "$f"
# Rank 1 fails once every rank's file is there (tuttirun then stops the others at once).
if [ "$RANK" = 1 ]; then
  i=0
  while [ "$(ls "$TUTTI_TRACE" | grep -c "^tutti-trace-$(uname -n)-[0-9]*\.json$")" -lt 3 ] && [ $i -lt 200 ]; do
    sleep 0.05; i=$((i + 1))
  done
  exit 3
fi
RANK
  TUTTI_TRACE=$dir run --nproc-per-node=3 --failure-grace=0 sh "$work/rank.sh"
  expect_rc 3
  cp "$err" "$work/err.first"
  [[ -e $dir/tutti-trace-$host-999999.json ]] && bad "this host's file of an earlier run was not removed"
  [[ -e $dir/tutti-trace-$host-x-1.json ]] || bad "host $host-x's file was removed"
  [[ -e $dir/notes.txt ]] || bad "a file that is no trace was removed"
  expect_match "$work/err.first" "^tuttirun: warning: skipping trace file $dir/tutti-trace-$host-[0-9]+\\.json: it does not end with the line \\]\\} \\(cut short"
  expect_line "$work/err.first" "tuttirun: trace of 3 ranks (5 events) in $dir/trace.json"
  [[ -s $dir/trace.json ]] || { bad "no $dir/trace.json"; return; }
  command -v jq >/dev/null || { bad "jq is needed (tools/install-deps.sh)"; return; }
  jq empty "$dir/trace.json" 2>"$work/jq.err" || { bad "trace.json is not JSON: $(cat "$work/jq.err")"; return; }
  [[ $(jq -c '[.traceEvents[] | select(.ph == "X") | .pid]' "$dir/trace.json") == "[0,1,7,0,1]" ]] ||
    bad "operations by time: $(jq -c '[.traceEvents[] | select(.ph == "X") | [.pid, .name]]' "$dir/trace.json")"
  [[ $(jq -r '.displayTimeUnit' "$dir/trace.json") == ms ]] || bad "no displayTimeUnit ms"
  local problems=$(trace_order_problems "$dir/trace.json")
  [[ -z $problems ]] || bad "trace.json: $(head -n 5 <<<"$problems" | paste -sd ";" - | sed "s/;/; /g")"
  plot_trace "$dir/trace.json"
  # Ranks that write nothing: a line that says so, and no trace.json (the one before is removed).
  rm -f "$dir"/tutti-trace-*
  TUTTI_TRACE=$dir run --nproc-per-node=2 true
  expect_rc 0
  [[ -e $dir/trace.json ]] && bad "trace.json of the run before left in place"
  expect_line "$err" "tuttirun: no trace: no rank wrote a tutti-trace-*.json file in $dir"
}

case_trace_dir_error() {
  # A TUTTI_TRACE that cannot be a directory: said before any rank starts, status 1.
  echo x >"$work/file"
  TUTTI_TRACE=$work/file/sub run --nproc-per-node=2 sh -c 'echo ran'
  expect_rc 1
  expect_line "$err" "tuttirun: TUTTI_TRACE=$work/file/sub: cannot create the directory $work/file/sub: Not a directory"
  [[ -s $out ]] && bad "a rank ran: $(cat "$out")"
  # Made, with its parents, where missing.
  TUTTI_TRACE=$work/a/b/c run --nproc-per-node=1 true
  expect_rc 0
  [[ -d $work/a/b/c ]] || bad "TUTTI_TRACE=$work/a/b/c was not made"
}

# The demo (examples/demo.cpp) over shm with TUTTI_TRACE: $TUTTI_TEST_DEMO (as ctest passes it),
# else the build tree's, examples/ next to tuttirun's tools/.
case_trace_demo() {
  local demo=${TUTTI_TEST_DEMO:-$(dirname "$T")/../examples/tutti_demo}
  [[ -x $demo ]] || { echo "    (no tutti_demo at $demo: build it, or set TUTTI_TEST_DEMO; skipped)"; return; }
  command -v jq >/dev/null || { bad "jq is needed (tools/install-deps.sh)"; return; }
  local dir=$work/trace t=$work/trace/trace.json
  TUTTI_TIMEOUT=15 TUTTI_TRACE=$dir run --nproc-per-node=4 "$demo"
  expect_rc 0
  if [[ ! -e $t ]]; then
    # Before tutti writes traces (issue 31's library side) no rank writes a file: nothing to test.
    # Files written and no merge is a failure.
    if compgen -G "$dir/tutti-trace-*.json" >/dev/null; then
      bad "the ranks wrote $(cd "$dir" && echo tutti-trace-*.json) but tuttirun wrote no trace.json"
    else
      echo "    (tutti_demo wrote no trace file: this tutti does not trace yet; skipped)"
    fi
    return
  fi
  jq empty "$t" 2>"$work/jq.err" || { bad "trace.json is not JSON: $(cat "$work/jq.err")"; return; }
  local pids=$(jq -c '[.traceEvents[].pid] | unique' "$t")
  [[ $pids == "[0,1,2,3]" ]] || bad "pids $pids, expected [0,1,2,3]"
  local names=$(jq -c '[.traceEvents[] | select(.ph == "M" and .name == "process_name") | [.pid, .args.name]] | unique' "$t")
  [[ $names == '[[0,"rank 0"],[1,"rank 1"],[2,"rank 2"],[3,"rank 3"]]' ]] || bad "process names $names"
  local reducing=$(jq -c '[.traceEvents[] | select(.ph == "X" and .name == "all_reduce") | .pid] | unique' "$t")
  [[ $reducing == "[0,1,2,3]" ]] || bad "ranks with an all_reduce: $reducing, expected [0,1,2,3]"
  local events=$(jq '[.traceEvents[] | select(.ph != "M")] | length' "$t")
  expect_line "$err" "tuttirun: trace of 4 ranks ($events events) in $t"
  local problems=$(trace_order_problems "$t")
  [[ -z $problems ]] || bad "trace.json: $(head -n 5 <<<"$problems" | paste -sd ";" - | sed "s/;/; /g")"
  expect_no_match "$err" '^tuttirun: warning'
  plot_trace "$t"
}

# tools/trace-plot.sh, next to this script, draws trace $1 into $work/trace.png (not tried without
# gnuplot, saying so).
plot=$(cd "$(dirname "$0")" && pwd)/trace-plot.sh
plot_trace() {
  rm -f "$work/trace.png"
  if ! command -v gnuplot >/dev/null; then
    echo "    (no gnuplot: tools/trace-plot.sh not tried)"
  elif ! bash "$plot" "$1" "$work/trace.png" >"$work/plot.out" 2>&1; then
    bad "trace-plot.sh failed: $(cat "$work/plot.out")"
  else
    [[ -s $work/trace.png ]] || bad "trace-plot.sh wrote no $work/trace.png"
  fi
}

case_trace_plot_refuses() {
  # A missing file, an empty one, one without operations, a wrong command line: status 1 (2 for
  # the command line) and a message, no picture.
  : >"$work/empty.json"
  printf '%s\n' '{"traceEvents":[' '{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}}' \
    '],"displayTimeUnit":"ms"}' >"$work/meta.json"
  local f want
  for f in "missing.json:no such file: $work/missing.json" "empty.json:$work/empty.json is empty" \
    "meta.json:no operations (\"ph\":\"X\" events) in $work/meta.json: nothing to draw"; do
    want=${f#*:}
    f=${f%%:*}
    bash "$plot" "$work/$f" "$work/out.png" >"$out" 2>"$err"
    rc=$?
    expect_rc 1
    expect_line "$err" "trace-plot.sh: $want"
    [[ -e $work/out.png ]] && bad "a picture of $f"
  done
  bash "$plot" "$work/meta.json" >"$out" 2>"$err"
  rc=$?
  expect_rc 2
  expect_line "$err" "usage: trace-plot.sh trace.json out.png"
}

# --- driver -------------------------------------------------------------------------------------

all_cases=$(declare -F | awk '{print $3}' | grep '^case_' | sed 's/^case_//')
cases=${*:-$all_cases}
passed=0 failed=0
for c in $cases; do
  if ! declare -F "case_$c" >/dev/null; then
    echo "unknown case '$c'; cases: $(echo $all_cases)"
    failed=$((failed + 1))
    continue
  fi
  ok=1
  rm -rf "$work"/*
  "case_$c"
  if (( ok )); then
    echo "PASS $c"
    passed=$((passed + 1))
  else
    echo "FAIL $c"
    echo "    --- stdout (last 10 lines)"; tail -n 10 "$out" 2>/dev/null | sed 's/^/    /'
    echo "    --- stderr (last 10 lines)"; tail -n 10 "$err" 2>/dev/null | sed 's/^/    /'
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
(( failed == 0 ))
