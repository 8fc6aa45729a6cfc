#!/usr/bin/env bash
# tools/gpu-check.sh without a device (ctest: device.gpu_check.*, label unit):
#   gpu_check.sh SCRIPT dry_run     --dry-run runs every step (those needing a device or a build
#                                   say SKIP), the summary has its shape, the budgets fit 7 minutes
#   gpu_check.sh SCRIPT find_nccl   the NCCL search: TUTTI_NCCL_LIBRARY, LD_LIBRARY_PATH, a venv not
#                                   activated, conda's lib/, in that order; none found: exit 1
#   gpu_check.sh SCRIPT no_nccl     no NCCL anywhere: the nccl steps SKIP, saying why; not a FAIL
#   gpu_check.sh SCRIPT cut         a run stopped part-way (the whole run's timeout) leaves a
#                                   summary of what it did and what it did not run
set -uo pipefail
script=$(realpath "$1") mode=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check CONDITION-STATUS WHAT
  if [[ $1 == 0 ]]; then echo "PASS $2"; else echo "FAIL $2"; fails=$((fails + 1)); fi
}
# The search, kept from this machine's own libraries (python3, ldconfig, the CUDA toolkit's).
isolated() {
  env -u TUTTI_NCCL_LIBRARY -u VIRTUAL_ENV -u CONDA_PREFIX -u LD_LIBRARY_PATH HOME="$tmp/home" \
    TUTTI_GPU_CHECK_PYTHON=false TUTTI_GPU_CHECK_LDCONFIG=false "$@"
}
mkdir -p "$tmp/home" "$tmp/cwd"

case $mode in
  dry_run)
    t0=$SECONDS
    OUT=$tmp/out bash "$script" --dry-run >"$tmp/stdout" 2>&1
    s=$?
    took=$((SECONDS - t0))
    cat "$tmp/stdout"
    check $s "the dry run exits 0 (exit $s)"
    check $((took < 60 ? 0 : 1)) "the dry run takes under a minute ($took s)"
    sum=$tmp/out/summary.txt
    check $([[ -s $sum ]]; echo $?) "it writes \$OUT/summary.txt"
    # The budgets: each step <= 60 s, their sum within the whole run's timeout, within 7 minutes.
    bash "$script" --budget >"$tmp/budget"
    total=$(awk '$1 == "total" { print $2 }' "$tmp/budget")
    whole=$(awk '$1 == "total" { print $4 }' "$tmp/budget")
    check $(awk '$1 != "total" && ($2 > 60 || $2 < 0) { bad = 1 } END { exit bad }' "$tmp/budget"; echo $?) "every step's budget is at most 60 s"
    check $(awk -v t="$total" '$1 != "total" { s += $2 } END { exit s != t }' "$tmp/budget"; echo $?) "the total is the sum of the steps' budgets ($total s)"
    check $((total <= whole && whole + 5 <= 420 ? 0 : 1)) "the budgets ($total s) fit the whole run's timeout ($whole s, killed 5 s later), within 7 minutes"
    # The summary's shape: a header, one line per step in order, the result.
    head -1 "$sum" | grep -q '^# tutti gpu-check, .*dry run$'
    check $? "the summary's first line names the run"
    grep -q "^# budget: $total s in [0-9]* steps (each <= 60 s); the whole run under timeout $whole s$" "$sum"
    check $? "the summary states the budget"
    grep -Ev '^#|^result: ' "$sum" >"$tmp/verdicts"
    others=$(grep -Evc '^(PASS|FAIL|SKIP) [a-z0-9-]+ \[[0-9]+ s\]: .+$' "$tmp/verdicts")
    check $((others == 0 ? 0 : 1)) "every other line is a verdict: PASS/FAIL/SKIP, the step, its budget, why"
    awk '{ print $2 }' "$tmp/verdicts" >"$tmp/order"
    awk '$1 != "total" { print $1 }' "$tmp/budget" >"$tmp/steps"
    check $(cmp -s "$tmp/order" "$tmp/steps"; echo $?) "one verdict per step, in the steps' order"
    check $(grep -v '^PASS env ' "$tmp/verdicts" | grep -vq '^SKIP '; [[ $? == 1 ]]; echo $?) "every step but env says SKIP in a dry run"
    grep -q '^PASS env ' "$tmp/verdicts"
    check $? "env runs (it needs no device)"
    tail -1 "$sum" | grep -Eq '^result: 1 passed, 0 failed, [0-9]+ skipped in [0-9]+ s$'
    check $? "the last line is the result"
    grep -Eq '^nccl: ' "$tmp/out/env.txt"
    check $? "env.txt says which NCCL tutti would load, or that there is none"
    ;;
  find_nccl)
    cd "$tmp/cwd" || exit 1
    isolated bash "$script" --find-nccl >"$tmp/found"
    check $([[ $? == 1 && ! -s $tmp/found ]]; echo $?) "nothing to find: exit 1, nothing printed"
    venv=$tmp/home/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
    mkdir -p "$venv" && : >"$venv/libnccl.so.2"
    got=$(isolated bash "$script" --find-nccl)
    check $([[ $got == "$venv/libnccl.so.2"$'\t'"PyTorch's wheel under $tmp/home/.venv" ]]; echo $?) "PyTorch's NCCL in a venv that is not activated: $got"
    conda=$tmp/conda
    mkdir -p "$conda/lib" && : >"$conda/lib/libnccl.so.2"
    rm -rf "$tmp/home/.venv"
    got=$(isolated env CONDA_PREFIX="$conda" bash "$script" --find-nccl)
    check $([[ $got == "$conda/lib/libnccl.so.2"$'\t'"conda's lib/ ($conda)" ]]; echo $?) "conda's lib/: $got"
    cwheel=$conda/lib/python3.11/site-packages/nvidia/nccl/lib
    mkdir -p "$cwheel" && : >"$cwheel/libnccl.so.2"
    got=$(isolated env CONDA_PREFIX="$conda" bash "$script" --find-nccl)
    check $([[ $got == "$cwheel/libnccl.so.2"$'\t'* ]]; echo $?) "the wheel in conda before conda's lib/: $got"
    mkdir -p "$tmp/ld" && : >"$tmp/ld/libnccl.so.2"
    got=$(isolated env CONDA_PREFIX="$conda" LD_LIBRARY_PATH="/nonexistent:$tmp/ld" bash "$script" --find-nccl)
    check $([[ $got == "$tmp/ld/libnccl.so.2"$'\t'"LD_LIBRARY_PATH" ]]; echo $?) "LD_LIBRARY_PATH before the wheels: $got"
    got=$(isolated env LD_LIBRARY_PATH="$tmp/ld" TUTTI_NCCL_LIBRARY=/x/libnccl.so.2 bash "$script" --find-nccl)
    check $([[ $got == "/x/libnccl.so.2"$'\t'"TUTTI_NCCL_LIBRARY" ]]; echo $?) "TUTTI_NCCL_LIBRARY first: $got"
    ;;
  no_nccl)
    cd "$tmp/cwd" || exit 1
    isolated env OUT="$tmp/out" bash "$script" --dry-run >"$tmp/stdout" 2>&1
    s=$?
    cat "$tmp/stdout"
    check $s "no NCCL is no failure (exit $s)"
    for step in nccl-threads-1 nccl-process-2 bench-nccl; do
      grep -q "^SKIP $step \[[0-9]* s\]: no NCCL library found" "$tmp/out/summary.txt"
      check $? "$step says SKIP: no NCCL library found"
    done
    grep -q '^nccl: none found' "$tmp/out/env.txt"
    check $? "env.txt says none was found"
    ;;
  cut)
    # A step that hangs (nvidia-smi, here a stand-in that sleeps) and the whole run's timeout
    # (here a TERM after 2 s): the summary says what ran and what did not, and the run ends.
    mkdir -p "$tmp/bin"
    printf '#!/bin/sh\nsleep 4\n' >"$tmp/bin/nvidia-smi"
    chmod +x "$tmp/bin/nvidia-smi"
    t0=$SECONDS
    PATH="$tmp/bin:$PATH" TUTTI_GPU_CHECK_TIMED=1 OUT="$tmp/out" bash "$script" --dry-run >"$tmp/stdout" 2>&1 &
    pid=$!
    sleep 2
    kill -TERM "$pid"
    wait "$pid"
    s=$?
    took=$((SECONDS - t0))
    cat "$tmp/stdout"
    check $((s == 124 ? 0 : 1)) "a cut run exits 124, as timeout does (exit $s)"
    check $((took < 4 ? 0 : 1)) "it ends at once, not when the hung step would ($took s)"
    tail -1 "$tmp/out/summary.txt" | grep -Eq '^CUT after [0-9]+ s by the whole run.s timeout \([0-9]+ s\); not run: env build probe '
    check $? "the summary's last line says it was cut and which steps did not run"
    head -1 "$tmp/out/summary.txt" | grep -q '^# tutti gpu-check'
    check $? "the summary keeps its header"
    ;;
  *) echo "usage: $0 SCRIPT dry_run|find_nccl|no_nccl|cut" >&2; exit 2 ;;
esac
echo "$mode: $fails failed"
((fails == 0))
