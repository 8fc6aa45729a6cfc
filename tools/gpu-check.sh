#!/usr/bin/env bash
# Everything tutti does on a GPU, in one run that fits a device's time: at most 7 minutes in
# every outcome (the whole run under one `timeout`, each step under its own budget of at most
# 60 s, their sum within the whole run's), for a machine with one GPU (an H200, a CUDA 13
# driver, perhaps PyTorch with its own NCCL, perhaps no CUDA toolkit):
#   env       the GPU and driver (nvidia-smi), nvcc, MPS, and the NCCL library tutti will load
#             (TUTTI_NCCL_LIBRARY, LD_LIBRARY_PATH, PyTorch's nvidia-nccl wheel in an active or
#             inactive venv or conda, conda's lib/, python3's import, ldconfig);
#   build     the programs, with nvcc and g++ directly (no cmake), or taken from --prebuilt DIR
#             (a build made elsewhere for sm_90: tutti_gpu_tests, tuttirun, tutti-bench);
#   the GPU tests (tests/device/gpu_tests.cu): every collective x dtype x op against a host
#             reference over cuda_ipc as 2 and 4 threads, 2 processes, 2 processes of 2 threads,
#             and over nccl; lazy loading; a mismatch, a late kernel, a failed rank, a killed
#             rank; compute-sanitizer on a case without in-kernel barriers;
#   the benchmark: all_reduce 8 B to 1 GiB over cuda_ipc (2 threads, 2 processes; against the
#             floor of the device's copy rate) and nccl (beside raw NCCL), and the targets read
#             from it: 8 B with threads <= 10 us, 1 GiB >= 0.8 x the floor, nccl within 5% of NCCL.
# Each step prints one line, PASS / FAIL / SKIP with why, and $OUT/summary.txt is written first
# thing and after every step (a run cut short still says what it did). The run sets
# CUDA_MODULE_LOADING=EAGER (a kernel's lazy first launch may wait for the whole context, where
# another rank's kernel waits at a barrier), CUDA_DEVICE_MAX_CONNECTIONS=32 (ranks' streams on
# hardware queues of their own) and a short TUTTI_TIMEOUT (20 s). Results in $OUT (else
# ./gpu-check-out): summary.txt, tests.log, bench.txt, env.txt, build.log.
#
#   tools/gpu-check.sh [--prebuilt DIR] [--dry-run]
#   tools/gpu-check.sh --budget       the steps and their budgets, one a line, and the total
#   tools/gpu-check.sh --find-nccl    the NCCL library tutti would load and where it was found
#
# --dry-run runs the whole script without a device: every step that needs one (or a build) says
# SKIP; ctest runs it (device.gpu_check.dry_run).
set -uo pipefail

# ---- the steps, in order, and their budgets in seconds ------------------------------------------
whole_run=410  # the whole run's timeout (then KILL 5 s later): within 7 minutes
steps=(env build probe ipc-threads-2 ipc-threads-4 ipc-process-2 ipc-mixed-2x2 lazy-threads-2 nccl-threads-1
       nccl-process-2 mismatch-threads-3 late-kernel-threads fail-threads kill-process compute-sanitizer
       bench-ipc-threads bench-ipc-process bench-nccl target-8b-latency target-1g-floor target-nccl-parity)
declare -A budget=(
  [env]=15 [build]=60 [probe]=10
  [ipc-threads-2]=30 [ipc-threads-4]=30 [ipc-process-2]=30 [ipc-mixed-2x2]=30 [lazy-threads-2]=15
  [nccl-threads-1]=25 [nccl-process-2]=15
  [mismatch-threads-3]=10 [late-kernel-threads]=15 [fail-threads]=12 [kill-process]=18 [compute-sanitizer]=20
  [bench-ipc-threads]=20 [bench-ipc-process]=20 [bench-nccl]=20
  [target-8b-latency]=0 [target-1g-floor]=0 [target-nccl-parity]=0   # read from the benchmark's output
)
budget_total() {
  local s=0 n
  for n in "${steps[@]}"; do s=$((s + budget[$n])); done
  echo "$s"
}

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
root=$(cd "$(dirname "$0")/.." && pwd)

# ---- the NCCL library tutti will load -----------------------------------------------------------
# Prints "PATH<TAB>where it was found" for the first found, in tutti's order of preference; exit 1
# when none. TUTTI_GPU_CHECK_PYTHON (default python3) and TUTTI_GPU_CHECK_LDCONFIG (default
# "ldconfig -p") may be set to `false` to leave those sources out (tests).
find_nccl() {
  local f d py
  if [[ -n ${TUTTI_NCCL_LIBRARY:-} ]]; then
    printf '%s\t%s\n' "$TUTTI_NCCL_LIBRARY" "TUTTI_NCCL_LIBRARY"
    return 0
  fi
  local IFS_save=$IFS
  IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do
    [[ -n $d && -e $d/libnccl.so.2 ]] && { IFS=$IFS_save; printf '%s\t%s\n' "$d/libnccl.so.2" "LD_LIBRARY_PATH"; return 0; }
  done
  IFS=$IFS_save
  # PyTorch's wheel (nvidia-nccl-cu*) in a venv or conda, active or not, and conda's own lib/.
  local prefixes=()
  [[ -n ${VIRTUAL_ENV:-} ]] && prefixes+=("$VIRTUAL_ENV")
  [[ -n ${CONDA_PREFIX:-} ]] && prefixes+=("$CONDA_PREFIX")
  prefixes+=("$root/.venv" "$root/venv" "$PWD/.venv" "$PWD/venv" "${HOME:-/nonexistent}/.venv" "${HOME:-/nonexistent}/venv"
             "${HOME:-/nonexistent}/.local" "${HOME:-/nonexistent}/miniconda3" "${HOME:-/nonexistent}/anaconda3"
             /opt/conda /opt/venv /workspace/.venv /usr/local /usr)
  for d in "${prefixes[@]}"; do
    for f in "$d"/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 "$d"/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2 \
             "$d"/lib64/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2; do
      [[ -e $f ]] && { printf '%s\t%s\n' "$f" "PyTorch's wheel under $d"; return 0; }
    done
  done
  for d in ${CONDA_PREFIX:+"$CONDA_PREFIX"} /opt/conda "${HOME:-/nonexistent}/miniconda3" "${HOME:-/nonexistent}/anaconda3"; do
    [[ -e $d/lib/libnccl.so.2 ]] && { printf '%s\t%s\n' "$d/lib/libnccl.so.2" "conda's lib/ ($d)"; return 0; }
  done
  py=${TUTTI_GPU_CHECK_PYTHON:-python3}
  if command -v "$py" >/dev/null 2>&1; then
    f=$(timeout 5 "$py" -c "import nvidia.nccl, os; p = os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'); print(p if os.path.exists(p) else '')" 2>/dev/null || true)
    [[ -n $f ]] && { printf '%s\t%s\n' "$f" "$py: import nvidia.nccl"; return 0; }
  fi
  f=$(${TUTTI_GPU_CHECK_LDCONFIG:-ldconfig -p} 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
  [[ -n $f ]] && { printf '%s\t%s\n' "$f" "ldconfig"; return 0; }
  for f in /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/targets/x86_64-linux/lib/libnccl.so.2; do
    [[ ${TUTTI_GPU_CHECK_LDCONFIG:-} != false && -e $f ]] && { printf '%s\t%s\n' "$f" "the CUDA toolkit"; return 0; }
  done
  return 1
}

# ---- sub-commands the steps run (each under its step's timeout) -----------------------------------
env_into() {  # env_into FILE: what is there
  {
    echo "# gpu-check $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "## nvidia-smi"
    if command -v nvidia-smi >/dev/null; then timeout 5 nvidia-smi 2>&1 || echo "nvidia-smi: failed or timed out"
    else echo "nvidia-smi: not available"; fi
    echo "## nvcc"
    if command -v nvcc >/dev/null; then timeout 3 nvcc --version | tail -2; else echo "nvcc: none (no CUDA toolkit): --prebuilt DIR needed"; fi
    echo "## MPS"
    if pgrep -f nvidia-cuda-mps >/dev/null 2>&1 || [[ -n ${CUDA_MPS_PIPE_DIRECTORY:-} ]]; then
      echo "MPS: running (processes may use in-kernel barriers: TUTTI_CUDA_IPC_SYNC=flags)"
    else
      echo "MPS: not running (processes synchronise by events; threads by in-kernel barriers)"
    fi
    echo "## NCCL"
    local found
    if found=$(find_nccl); then
      echo "nccl: ${found%%$'\t'*} (${found#*$'\t'})"
    else
      echo "nccl: none found (searched TUTTI_NCCL_LIBRARY, LD_LIBRARY_PATH, venvs and conda, python3, ldconfig)"
    fi
    echo "## settings"
    echo "CUDA_MODULE_LOADING=$CUDA_MODULE_LOADING CUDA_DEVICE_MAX_CONNECTIONS=$CUDA_DEVICE_MAX_CONNECTIONS TUTTI_TIMEOUT=$TUTTI_TIMEOUT"
  } >"$1" 2>&1
}

build_into() {  # build_into DIR: the programs, built in parallel
  local bin=$1 flags=(-std=c++20 -O2 -arch=sm_90 -I"$root/include")
  cd "$root" || return 1
  timeout 45 nvcc "${flags[@]}" tests/device/gpu_tests.cu -c -o "$bin/gpu_tests.o" &
  timeout 45 nvcc "${flags[@]}" tests/device/gpu_checks_ipc.cu -c -o "$bin/gpu_checks_ipc.o" &
  timeout 45 nvcc "${flags[@]}" tests/device/gpu_checks_nccl.cu -c -o "$bin/gpu_checks_nccl.o" &
  # tutti-bench: one object per file, side by side (its transports register themselves at link)
  timeout 45 nvcc "${flags[@]}" tools/tutti_bench/over_cuda.cu -c -o "$bin/over_cuda.o" &
  for f in main over_inproc over_shm; do
    timeout 45 g++ -std=c++20 -O2 -I"$root/include" "tools/tutti_bench/$f.cpp" -c -o "$bin/bench_$f.o" &
  done
  timeout 45 g++ -std=c++20 -O2 tools/tuttirun/main.cpp -o "$bin/tuttirun" &
  wait
  timeout 12 nvcc -arch=sm_90 "$bin/gpu_tests.o" "$bin/gpu_checks_ipc.o" "$bin/gpu_checks_nccl.o" -o "$bin/tutti_gpu_tests" -ldl
  timeout 12 nvcc -arch=sm_90 "$bin/bench_main.o" "$bin/bench_over_inproc.o" "$bin/bench_over_shm.o" "$bin/over_cuda.o" \
    -o "$bin/tutti-bench" -ldl
}

kill_check() {  # kill_check TESTS: rank 1 dies; rank 0 must raise within the deadline
  local log
  log=$(tuttirun --keep-going --nproc-per-node=2 "$1" kill-process 2>&1)
  echo "$log"
  grep -q 'kill-process: [0-9]* passed, 0 failed' <<<"$log"
}

# target NAME BENCH-FILE: reads a benchmark's table (size, tutti us, busbw, NCCL us, busbw,
# NCCL/tutti, floor us, floor/tutti, #wrong); prints the verdict's reason; exit 0 met, 1 not, 77
# no table.
target() {
  local name=$1 file=$2
  [[ -s $file ]] && grep -q '^ *[0-9]' "$file" || { echo "no benchmark table (its step did not run or failed)"; return 77; }
  case $name in
    target-8b-latency)
      awk '$1 == 8 { found = 1; ok = $2 <= 10; printf "8 B all_reduce with 2 threads: %.2f us (target <= 10 us)\n", $2 }
           END { if (!found) { print "no 8 B row"; exit 77 } exit ok ? 0 : 1 }' "$file" ;;
    target-1g-floor)
      awk '$1 == 1073741824 { found = 1; f = $8 + 0; ok = $8 != "n/a" && f >= 0.8
             printf "1 GiB all_reduce with 2 ranks: %s of the copy-rate floor (target >= 0.8)\n", $8 }
           END { if (!found) { print "no 1 GiB row"; exit 77 } exit ok ? 0 : 1 }' "$file" ;;
    target-nccl-parity)
      awk '/^ *[0-9]/ { n++; if ($6 == "n/a") { na++; next } r = $6 + 0; if (min == "" || r < min) { min = r; at = $1 } }
           END { if (!n || na == n) { print "no NCCL column"; exit 77 }
                 printf "tutti::nccl against raw NCCL: worst NCCL/tutti %.3f at %d B (target >= 0.952: within 5%%)\n", min, at
                 exit min >= 1 / 1.05 ? 0 : 1 }' "$file" ;;
  esac
}

# ---- arguments ---------------------------------------------------------------------------------
prebuilt="" dry=0
while (($#)); do
  case $1 in
    --prebuilt) prebuilt=${2:?--prebuilt needs a folder}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --budget)
      for n in "${steps[@]}"; do echo "$n ${budget[$n]}"; done
      echo "total $(budget_total) of $whole_run"
      exit 0 ;;
    --find-nccl) find_nccl; exit ;;
    --env-into) shift; export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER} CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32} TUTTI_TIMEOUT=${TUTTI_TIMEOUT:-20}; env_into "$1"; exit ;;
    --build-into) shift; build_into "$1"; exit ;;
    --kill-check) shift; kill_check "$1"; exit ;;
    --target) shift; target "$1" "$2"; exit ;;
    -h | --help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done

# The whole run under one timeout (TERM, then KILL 5 s later); the steps' budgets fit in it.
if [[ -z ${TUTTI_GPU_CHECK_TIMED:-} ]]; then
  export TUTTI_GPU_CHECK_TIMED=1
  args=()
  [[ -n $prebuilt ]] && args+=(--prebuilt "$prebuilt")
  ((dry)) && args+=(--dry-run)
  exec timeout --kill-after=5 "$whole_run" "$self" "${args[@]}"
fi

out=${OUT:-$root/gpu-check-out}
mkdir -p "$out"
summary=$out/summary.txt tests=$out/tests.log bench=$out/bench.txt envf=$out/env.txt
: >"$tests"
: >"$bench"
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER} CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
export TUTTI_TIMEOUT=${TUTTI_TIMEOUT:-20}
started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
lines=() done_steps=() current="" npass=0 nfail=0 nskip=0 on_timeout=FAIL

write_summary() {  # $1: the closing line
  {
    echo "# tutti gpu-check, $started, commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$( ((dry)) && echo ', dry run')"
    echo "# budget: $(budget_total) s in ${#steps[@]} steps (each <= 60 s); the whole run under timeout $whole_run s"
    echo "# CUDA_MODULE_LOADING=$CUDA_MODULE_LOADING CUDA_DEVICE_MAX_CONNECTIONS=$CUDA_DEVICE_MAX_CONNECTIONS TUTTI_TIMEOUT=$TUTTI_TIMEOUT"
    for l in "${lines[@]}"; do echo "$l"; done
    echo "$1"
  } >"$summary.tmp" && mv -f "$summary.tmp" "$summary"
}
verdict() {  # verdict PASS|FAIL|SKIP NAME WHY
  local l="$1 $2 [${budget[$2]} s]: $3"
  lines+=("$l")
  done_steps+=("$2")
  case $1 in PASS) npass=$((npass + 1)) ;; FAIL) nfail=$((nfail + 1)) ;; SKIP) nskip=$((nskip + 1)) ;; esac
  echo "$l"
  write_summary "running: $((${#done_steps[@]})) of ${#steps[@]} steps done after ${SECONDS} s"
}
on_cut() {
  [[ -n $current ]] && kill -TERM "$current" 2>/dev/null
  local rest=() n
  for n in "${steps[@]}"; do [[ " ${done_steps[*]} " == *" $n "* ]] || rest+=("$n"); done
  write_summary "CUT after ${SECONDS} s by the whole run's timeout ($whole_run s); not run: ${rest[*]}"
  echo "CUT after ${SECONDS} s; not run: ${rest[*]}"
  exit 124
}
trap on_cut TERM INT
write_summary "running: nothing done yet"

# run NAME LOG CMD...: CMD under NAME's budget, its output appended to LOG. PASS on exit 0; 77
# (the program says it does not apply here) is a SKIP; a timeout is a FAIL ($on_timeout).
run() {
  local name=$1 log=$2
  shift 2
  local secs=${budget[$name]} t0=$SECONDS s
  echo "==== $name (budget $secs s): $*" >>"$log"
  timeout --kill-after=3 "$secs" "$@" >>"$log" 2>&1 &
  current=$!
  wait "$current"
  s=$?
  current=""
  local took=$((SECONDS - t0))
  if ((s == 0)); then verdict PASS "$name" "in $took s"
  elif ((s == 77)); then verdict SKIP "$name" "not applicable here (the program exited 77; see $(basename "$log"))"
  elif ((s == 124 || s == 137)); then
    if [[ $on_timeout == SKIP ]]; then verdict SKIP "$name" "not applicable: it did not finish within its $secs s"
    else verdict FAIL "$name" "timed out after its $secs s (see $(basename "$log"))"; fi
  else verdict FAIL "$name" "exit $s after $took s (see $(basename "$log"))"; fi
}

# ---- env -----------------------------------------------------------------------------------------
run env "$tests" "$self" --env-into "$envf"
nccl_line=$(grep -m1 '^nccl: ' "$envf" 2>/dev/null || echo "nccl: none found")
nccl_lib=""
if [[ $nccl_line != "nccl: none found"* ]]; then
  nccl_lib=${nccl_line#nccl: }
  nccl_lib=${nccl_lib%% (*}
  export TUTTI_NCCL_LIBRARY=$nccl_lib
fi
grep -E 'NVIDIA-SMI|CUDA Version|release|MPS:|^nccl:' "$envf" 2>/dev/null | head -6

# Why the steps that follow do not run, if they do not: set as the run learns it.
no_programs="" no_device="" no_nccl=""
((dry)) && no_programs="dry run: nothing built, no device used"
[[ -z $nccl_lib ]] && no_nccl="no NCCL library found (TUTTI_NCCL_LIBRARY, LD_LIBRARY_PATH, venvs, conda, python3, ldconfig: see env.txt)"

# ---- build ---------------------------------------------------------------------------------------
bin=${prebuilt:-$out/bin}
if ((dry)); then
  verdict SKIP build "$no_programs"
elif [[ -n $prebuilt ]]; then
  verdict SKIP build "prebuilt programs from $prebuilt"
elif ! command -v nvcc >/dev/null; then
  verdict FAIL build "no nvcc here and no --prebuilt DIR"
else
  mkdir -p "$bin"
  run build "$out/build.log" "$self" --build-into "$bin"
fi
if [[ -z $no_programs ]]; then
  for p in tutti_gpu_tests tuttirun tutti-bench; do
    [[ -x $bin/$p ]] || no_programs="no $p in $bin (see build.log)"
  done
fi
export PATH=$bin:$PATH
T=$bin/tutti_gpu_tests B=$bin/tutti-bench

# ---- the device ----------------------------------------------------------------------------------
if [[ -n $no_programs ]]; then
  verdict SKIP probe "$no_programs"
else
  run probe "$tests" "$T" probe
  [[ ${lines[-1]} == PASS* ]] || no_device="no CUDA device (the probe: see tests.log)"
fi
# device NAME CMD...: a device step, or its SKIP
device() {
  local name=$1
  shift
  if [[ -n $no_programs ]]; then verdict SKIP "$name" "$no_programs"
  elif [[ -n $no_device ]]; then verdict SKIP "$name" "$no_device"
  else run "$name" "$tests" "$@"; fi
}
# nccl_device NAME CMD...: as device, and SKIP without an NCCL library
nccl_device() {
  if [[ -n $no_nccl ]]; then verdict SKIP "$1" "$no_nccl"
  else device "$@"; fi
}

# ---- the GPU tests --------------------------------------------------------------------------------
device ipc-threads-2 "$T" ipc-threads 2
device ipc-threads-4 "$T" ipc-threads 4
device ipc-process-2 tuttirun --nproc-per-node=2 "$T" ipc-process
device ipc-mixed-2x2 tuttirun --nproc-per-node=2 "$T" ipc-mixed
device lazy-threads-2 "$T" lazy-threads 2
nccl_device nccl-threads-1 "$T" nccl-threads
# Two processes on the one GPU: NCCL refuses it (tutti says so, a PASS) unless it is 2.30 or later
# and the caller set NCCL_MULTI_RANK_GPU_ENABLE=1.
nccl_device nccl-process-2 tuttirun --nproc-per-node=2 "$T" nccl-process
device mismatch-threads-3 "$T" mismatch-threads 3
device late-kernel-threads "$T" late-kernel-threads
device fail-threads "$T" fail-threads
device kill-process "$self" --kill-check "$T"
# compute-sanitizer serialises launches, so in-kernel barriers would wait forever under it: the
# threads synchronise by events here (TUTTI_CUDA_IPC_SYNC=events), small sizes only; a timeout
# is "not applicable", not a failure.
if [[ -z $no_programs && -z $no_device ]] && ! command -v compute-sanitizer >/dev/null; then
  verdict SKIP compute-sanitizer "compute-sanitizer is not on this machine"
else
  on_timeout=SKIP
  device compute-sanitizer env TUTTI_CUDA_IPC_SYNC=events TUTTI_GPU_TESTS_QUICK=1 \
    compute-sanitizer --tool memcheck --error-exitcode 1 "$T" ipc-threads 2
  on_timeout=FAIL
fi

# ---- the benchmark --------------------------------------------------------------------------------
bench_args=(-b 8 -e 1G -f 4 -n 20 -w 5)
device bench-ipc-threads "$B" --transport cuda_ipc_threads --np 2 "${bench_args[@]}"
sed -n '/^==== bench-ipc-threads/,$p' "$tests" >"$out/bench-ipc-threads.txt"
device bench-ipc-process "$B" --transport cuda_ipc --np 2 "${bench_args[@]}"
sed -n '/^==== bench-ipc-process/,$p' "$tests" >"$out/bench-ipc-process.txt"
nccl_device bench-nccl "$B" --transport nccl --np 1 "${bench_args[@]}"
sed -n '/^==== bench-nccl/,$p' "$tests" >"$out/bench-nccl.txt"
cat "$out"/bench-ipc-threads.txt "$out"/bench-ipc-process.txt "$out"/bench-nccl.txt >"$bench"

# The targets, read from the tables (no device time).
check_target() {  # check_target NAME FILE...: met on every table
  local name=$1 why s=0 r f
  shift
  why=""
  for f in "$@"; do
    r=$("$self" --target "$name" "$f")
    case $? in 0) ;; 1) s=1 ;; *) ((s == 0)) && s=77 ;; esac
    why+="${why:+; }$r"
  done
  if ((dry)); then verdict SKIP "$name" "dry run: no benchmark"
  elif ((s == 0)); then verdict PASS "$name" "$why"
  elif ((s == 1)); then verdict FAIL "$name" "$why"
  else verdict SKIP "$name" "$why"; fi
}
check_target target-8b-latency "$out/bench-ipc-threads.txt"
check_target target-1g-floor "$out/bench-ipc-threads.txt" "$out/bench-ipc-process.txt"
check_target target-nccl-parity "$out/bench-nccl.txt"

write_summary "result: $npass passed, $nfail failed, $nskip skipped in ${SECONDS} s"
echo "result: $npass passed, $nfail failed, $nskip skipped in ${SECONDS} s; results in $out"
((nfail == 0))
