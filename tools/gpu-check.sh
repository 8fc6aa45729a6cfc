#!/usr/bin/env bash
# Everything tutti does on a GPU, in one run on a machine with one (the GPU machine of issue 14:
# one H200, a CUDA 13 driver, PyTorch with its own NCCL, perhaps no CUDA toolkit, no cmake):
#   1. what is there: the GPU and driver (nvidia-smi), the CUDA toolkit (nvcc, if any), the NCCL
#      library tutti will load (TUTTI_NCCL_LIBRARY, else PyTorch's, else the system's), MPS;
#   2. the programs: taken from --prebuilt DIR (a build made elsewhere with nvcc for sm_90: the
#      CUDA runtime is linked statically, so they run on any driver that new) or built here with
#      nvcc and g++ directly (no cmake needed);
#   3. the GPU tests (tests/device/gpu_tests.cu: every collective x dtype x op against a host
#      reference over cuda_ipc as 2, 3 and 4 threads and 2 processes, over nccl, a mismatch, a
#      late kernel, a killed rank), the GPU demo, compute-sanitizer on a small case where it is;
#   4. the benchmark: all_reduce float sum 8 B to 1 GiB, cuda_ipc as 2 threads and as 2 processes
#      (against the floor of the device's copy rate), nccl with 1 rank beside raw NCCL.
# Every step has a timeout; the whole run takes under 8 minutes. Results go to the folder $OUT
# when it is set (summary.txt, tests.log, bench.txt, env.txt), else to ./gpu-check-out.
#
#   tools/gpu-check.sh [--prebuilt DIR]      (DIR holding tutti_gpu_tests, tutti_demo_cuda,
#                                             tuttirun and tutti-bench)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
prebuilt=""
while (($#)); do
  case $1 in
    --prebuilt) prebuilt=$2; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
out=${OUT:-$root/gpu-check-out}
mkdir -p "$out"
summary=$out/summary.txt tests=$out/tests.log bench=$out/bench.txt envf=$out/env.txt
: >"$summary"
: >"$tests"
: >"$bench"
start=$(date +%s)
say() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(($(date +%s) - start)); }

# ---- 1. what is there ------------------------------------------------------------------------
{
  echo "# gpu-check $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "## nvidia-smi"
  timeout 20 nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  echo "## nvcc"
  if command -v nvcc >/dev/null; then nvcc --version | tail -2; else echo "no nvcc (no CUDA toolkit): prebuilt programs needed"; fi
  echo "## MPS"
  if pgrep -f nvidia-cuda-mps >/dev/null 2>&1 || [[ -n ${CUDA_MPS_PIPE_DIRECTORY:-} ]]; then
    echo "MPS: running (a control daemon or CUDA_MPS_PIPE_DIRECTORY)"
  else
    echo "MPS: not running (processes synchronise by events; threads by in-kernel barriers)"
  fi
} >"$envf" 2>&1
nccl_lib=${TUTTI_NCCL_LIBRARY:-}
if [[ -z $nccl_lib ]] && command -v python3 >/dev/null; then
  nccl_lib=$(timeout 60 python3 -c "import nvidia.nccl, os; p = os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'); print(p if os.path.exists(p) else '')" 2>/dev/null || true)
fi
if [[ -z $nccl_lib ]]; then
  nccl_lib=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
fi
torch_nccl=$(timeout 60 python3 -c "import torch; print('.'.join(map(str, torch.cuda.nccl.version())))" 2>/dev/null || echo "?")
{
  echo "## NCCL"
  echo "library tutti loads: ${nccl_lib:-none found (set TUTTI_NCCL_LIBRARY)}"
  echo "torch.cuda.nccl.version(): $torch_nccl"
} >>"$envf"
[[ -n $nccl_lib ]] && export TUTTI_NCCL_LIBRARY=$nccl_lib
cat "$envf" | tee -a "$summary" >/dev/null
grep -E '^(NVIDIA-SMI|\|.*(H200|H100|A100|NVIDIA))|CUDA Version|release|MPS:|library tutti loads|torch.cuda' "$envf" | head -8

# ---- 2. the programs ----------------------------------------------------------------------------
bin=${prebuilt:-$root/build-gpu-check}
mkdir -p "$bin"
if [[ -z $prebuilt ]]; then
  if ! command -v nvcc >/dev/null; then
    say "FAIL build: no nvcc here and no --prebuilt DIR"
    exit 1
  fi
  flags=(-std=c++20 -O2 -arch=sm_90 -I"$root/include")
  say "building with $(nvcc --version | tail -1) ..."
  (
    timeout 400 nvcc "${flags[@]}" --threads 3 tests/device/gpu_tests.cu tests/device/gpu_checks_ipc.cu \
      tests/device/gpu_checks_nccl.cu -o "$bin/tutti_gpu_tests" -ldl &
    timeout 400 nvcc "${flags[@]}" examples/demo_cuda.cu -o "$bin/tutti_demo_cuda" -ldl &
    timeout 400 nvcc "${flags[@]}" -O3 -DTUTTI_BENCH_HAVE_CUDA tools/tutti_bench/main.cpp tools/tutti_bench/over_inproc.cpp \
      tools/tutti_bench/over_shm.cpp tools/tutti_bench/over_cuda.cu -o "$bin/tutti-bench" -ldl &
    timeout 120 g++ -std=c++20 -O2 tools/tuttirun/main.cpp -o "$bin/tuttirun" &
    wait
  ) >"$out/build.log" 2>&1
  say "build: $(elapsed) s"
fi
for p in tutti_gpu_tests tutti_demo_cuda tuttirun tutti-bench; do
  [[ -x $bin/$p ]] || { say "FAIL build: $bin/$p missing (see build.log)"; exit 1; }
done
export PATH=$bin:$PATH TUTTI_TIMEOUT=${TUTTI_TIMEOUT:-60}
"$bin/tutti_gpu_tests" probe | tee -a "$summary" || { say "FAIL: no CUDA device found"; exit 1; }

# ---- 3. tests --------------------------------------------------------------------------------
pass=0 fail=0
# run NAME SECONDS CMD...: the command's output to tests.log; PASS when it exits 0 (77: skipped)
run() {
  local name=$1 secs=$2
  shift 2
  echo "==== $name ($*)" >>"$tests"
  local t0=$(date +%s)
  timeout "$secs" "$@" >>"$tests" 2>&1
  local s=$?
  local took=$(($(date +%s) - t0))
  if ((s == 0)); then pass=$((pass + 1)); say "PASS $name (${took} s)"
  elif ((s == 77)); then say "SKIP $name"
  else fail=$((fail + 1)); say "FAIL $name (exit $s after ${took} s; see tests.log)"; fi
}
T=$bin/tutti_gpu_tests
run ipc-threads-2 150 "$T" ipc-threads 2
run ipc-threads-3 150 "$T" ipc-threads 3
run ipc-threads-4 150 "$T" ipc-threads 4
run ipc-process-2 150 tuttirun --nproc-per-node=2 "$T" ipc-process
run nccl-threads-1 150 "$T" nccl-threads
run nccl-process-2 90 tuttirun --nproc-per-node=2 "$T" nccl-process
run mismatch-threads-3 60 "$T" mismatch-threads 3
run late-kernel-threads 60 "$T" late-kernel-threads
# A killed rank: tuttirun reports it (non-zero); rank 0 must have raised within the deadline.
echo "==== kill-process (tuttirun --keep-going --nproc-per-node=2 $T kill-process)" >>"$tests"
timeout 60 tuttirun --keep-going --nproc-per-node=2 "$T" kill-process >"$out/kill.log" 2>&1
cat "$out/kill.log" >>"$tests"
if grep -q 'kill-process: [0-9]* passed, 0 failed' "$out/kill.log"; then pass=$((pass + 1)); say "PASS kill-process"
else fail=$((fail + 1)); say "FAIL kill-process (see tests.log)"; fi
run demo-cuda-ipc-2 60 tuttirun --nproc-per-node=2 "$bin/tutti_demo_cuda" cuda_ipc
run demo-nccl-1 60 tuttirun --nproc-per-node=1 "$bin/tutti_demo_cuda" nccl
if command -v compute-sanitizer >/dev/null; then
  TUTTI_GPU_TESTS_QUICK=1 run compute-sanitizer-ipc-threads-2 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$T" ipc-threads 2
else
  say "SKIP compute-sanitizer (not on this machine)"
fi
say "tests: $pass passed, $fail failed ($(elapsed) s so far)"

# ---- 4. the benchmark ------------------------------------------------------------------------------
B=$bin/tutti-bench
bench_run() {
  local name=$1 secs=$2
  shift 2
  echo "==== $name: tutti-bench $*" | tee -a "$bench"
  timeout "$secs" "$B" "$@" >>"$bench" 2>&1 || echo "(exit $?)" >>"$bench"
}
bench_run "cuda_ipc, 2 threads" 120 --transport cuda_ipc_threads --np 2 -b 8 -e 1G -f 4 -n 20 -w 5
bench_run "cuda_ipc, 2 processes" 120 --transport cuda_ipc --np 2 -b 8 -e 1G -f 4 -n 20 -w 5
bench_run "nccl, 1 rank, beside raw NCCL" 120 --transport nccl --np 1 -b 8 -e 1G -f 4 -n 20 -w 5
cat "$bench"
say "done in $(elapsed) s; results in $out"
((fail == 0))
