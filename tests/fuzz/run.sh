#!/usr/bin/env bash
# Fuzzes each wire parser for a while and prints libFuzzer's final stats:
#   tests/fuzz/run.sh [build-dir (build)] [seconds per target (25)]
# New inputs go to a temporary corpus, so the seeds in tests/fuzz/<target>/ stay as committed; a
# crash fails the run and leaves its input in <build-dir>/tests/fuzz/ (crash-<sha1>), to replay
# with `<build-dir>/tests/fuzz/tutti_fuzz_<target> crash-<sha1>`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
seconds=${2:-25}
dir=$(cd "$build/tests/fuzz" 2>/dev/null && pwd) || { echo "fuzz: no $build/tests/fuzz; skipped"; exit 0; }
ran=0
for t in store_message tcp_frame; do
  bin=$dir/tutti_fuzz_$t
  if [[ ! -x $bin ]]; then
    echo "fuzz: $t not built (see cmake's 'tutti: fuzz' message); skipped"
    continue
  fi
  work=$(mktemp -d)
  echo "fuzz: $t for $seconds s"
  if ! "$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$dir/" "$work" "$here/$t" \
      >"$work.log" 2>&1; then
    tail -n 60 "$work.log"
    echo "fuzz: $t FAILED; the input is under $dir/"
    exit 1
  fi
  grep -E '^#[0-9]+[[:space:]]+DONE|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' \
    "$work.log" | sed "s/^/  $t: /"
  rm -rf "$work" "$work.log"
  ran=$((ran + 1))
done
echo "fuzz: $ran target(s) ran without a crash"
