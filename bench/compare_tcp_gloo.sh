#!/usr/bin/env bash
# tutti tcp vs Gloo, all_reduce float sum on loopback, in one run: iperf3's single-stream loopback
# bandwidth first, then at 2 and 4 ranks tutti's tcp benchmark (when it is built) and the Gloo peer
# (ring_chunked and halving_doubling); then one table of in-place figures per world size, with
# the ratios tutti / Gloo's best, and tutti's (and Gloo's) largest-size busbw against iperf3.
# Usage: bench/compare_tcp_gloo.sh [build-dir] [extra sweep flags, e.g. -e 1048576 -t 0.1]
# The sweeps get -c 1 (iterations from the measured warm-up time: at tcp latencies the default
# rule's 20000 calls per small size would take many minutes); pass -c 0 to turn it off. Flags a
# program does not know are ignored by it: -s 1 reaches only the Gloo peer (SO_SNDBUF left to the
# kernel instead of Gloo's per-message sizing; see bench/peers/gloo_allreduce.cpp).
set -euo pipefail
build=${1:-build}; shift || true
tuttirun=$build/tools/tuttirun
tutti=$build/bench/tutti_bench_tcp_allreduce
peer=$build/bench/tutti_peer_gloo_allreduce
for f in "$tuttirun" "$peer"; do
  [[ -x $f ]] || { echo "missing $f: build with -DTUTTI_BUILD_BENCH=ON (the peer needs libgloo-dev)" >&2; exit 1; }
done
have_tutti=1
[[ -x $tutti ]] || have_tutti=0
sweep=(-c 1 "$@")
out=$(mktemp -d)
iperf_pid=""
cleanup() {
  if [[ -n $iperf_pid ]]; then kill "$iperf_pid" 2>/dev/null || true; fi
  rm -rf "$out"
}
trap cleanup EXIT

echo "# machine: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus"
echo "# Gloo: libgloo-dev $(dpkg-query -W -f='${Version}' libgloo-dev 2>/dev/null || echo '(version unknown)')"
((have_tutti)) || echo "# tutti: $tutti is missing (not built yet): Gloo and iperf3 only, no tutti column"

# --- iperf3, one stream over loopback, 3 s ------------------------------------------------------
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((20000 + RANDOM % 30000))
}
iperf_gbit=""
if command -v iperf3 >/dev/null; then
  for _attempt in 1 2 3; do  # a port picked free may be taken before iperf3 binds it
    port=$(free_port)
    iperf3 -s -1 -B 127.0.0.1 -p "$port" >"$out/iperf3.server" 2>&1 &
    iperf_pid=$!
    # wait for the listener (a probe connection would use up the server's one session)
    for _ in $(seq 50); do
      ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
      kill -0 "$iperf_pid" 2>/dev/null || break
      sleep 0.1
    done
    if iperf3 -c 127.0.0.1 -p "$port" -t 3 -f g >"$out/iperf3" 2>&1; then
      iperf_gbit=$(awk '/receiver/ { print $(NF - 2) }' "$out/iperf3")
      wait "$iperf_pid" 2>/dev/null || true
      iperf_pid=""
      break
    fi
    kill "$iperf_pid" 2>/dev/null || true
    wait "$iperf_pid" 2>/dev/null || true
    iperf_pid=""
  done
  if [[ -n $iperf_gbit ]]; then
    iperf_gbs=$(awk -v g="$iperf_gbit" 'BEGIN { printf "%.2f", g / 8 }')
    echo "# iperf3: one stream over 127.0.0.1, 3 s: $iperf_gbit Gbit/s = $iperf_gbs GB/s"
  else
    echo "# iperf3: failed:"; sed 's/^/#   /' "$out/iperf3" "$out/iperf3.server" 2>/dev/null || true
  fi
else
  echo "# iperf3: not installed (Debian: iperf3); no bandwidth reference"
fi

# --- the sweeps -----------------------------------------------------------------------------------
for np in 2 4; do
  if ((have_tutti)); then
    "$tuttirun" --nproc-per-node=$np --no-prefix "$tutti" "${sweep[@]}" | tee "$out/tutti.$np"
  fi
  "$tuttirun" --nproc-per-node=$np --no-prefix "$peer" "${sweep[@]}" | tee "$out/gloo.$np"
  # one file per Gloo algorithm, split at the table headers the peer prints
  awk -v ring="$out/ring.$np" -v hd="$out/hd.$np" '
    /^# Gloo ring_chunked all_reduce/     { f = ring }
    /^# Gloo halving_doubling all_reduce/ { f = hd }
    f != "" { print > f }' "$out/gloo.$np"
done

# size, in-place time (us), in-place busbw (GB/s)
rows() { grep -v '^#' "$1" | awk 'NF >= 13 { print $1, $10, $12 }' | sort -k1,1; }

echo
echo "# all_reduce float sum, in place, tcp over loopback, one run: tutti vs Gloo (ring_chunked, halving_doubling)"
for np in 2 4; do
  echo "# $np ranks"
  if ((have_tutti)); then
    # data: size, tutti us, busbw, ring us, busbw, h-d us, busbw
    join <(rows "$out/tutti.$np") <(rows "$out/ring.$np") | join - <(rows "$out/hd.$np") | sort -n -k1,1 >"$out/data.$np"
    printf '%10s | %10s %8s | %10s %8s | %10s %8s | %5s %7s\n' bytes "tutti us" busbw "ring us" busbw "h-d us" busbw best ratio
    awk '{ best = $4 <= $6 ? "ring" : "h-d"; bt = $4 <= $6 ? $4 : $6
           printf "%10d | %10.2f %8.2f | %10.2f %8.2f | %10.2f %8.2f | %5s %6.2fx\n", $1, $2, $3, $4, $5, $6, $7, best, bt / $2 }' \
      "$out/data.$np"
  else
    # data: size, ring us, busbw, h-d us, busbw
    join <(rows "$out/ring.$np") <(rows "$out/hd.$np") | sort -n -k1,1 >"$out/data.$np"
    printf '%10s | %10s | %10s %8s | %10s %8s | %5s\n' bytes "tutti" "ring us" busbw "h-d us" busbw best
    awk '{ printf "%10d | %10s | %10.2f %8.2f | %10.2f %8.2f | %5s\n", $1, "missing", $2, $3, $4, $5, $2 <= $4 ? "ring" : "h-d" }' \
      "$out/data.$np"
  fi
done
echo "# ratio: Gloo's best time / tutti time (= tutti busbw / Gloo's best busbw); best: the faster Gloo algorithm at that size"
((have_tutti)) || echo "# the tutti column is missing: $tutti is not built yet"

# --- against iperf3 (at the largest size of the sweep), and issue 4's targets at 2 ranks -------------
if [[ -n $iperf_gbit ]]; then
  for np in 2 4; do
    if ((have_tutti)); then
      awk -v np=$np -v ref="$iperf_gbs" 'END { if (NR) { g = $5 > $7 ? $5 : $7
        printf "# %d ranks, %d B: busbw tutti %.2f GB/s = %.2fx iperf3, Gloo best %.2f GB/s = %.2fx iperf3 (%.2f GB/s)\n",
               np, $1, $3, $3 / ref, g, g / ref, ref } }' "$out/data.$np"
    else
      awk -v np=$np -v ref="$iperf_gbs" 'END { if (NR) { g = $3 > $5 ? $3 : $5
        printf "# %d ranks, %d B: busbw Gloo best %.2f GB/s = %.2fx iperf3 (%.2f GB/s); tutti missing\n", np, $1, g, g / ref, ref } }' \
        "$out/data.$np"
    fi
  done
fi
if ((have_tutti)); then
  # busbw at 1 MiB and 64 MiB >= 1.5x Gloo's best; 8 B time <= 0.5x Gloo's best; busbw at 64 MiB >= 0.6x iperf3
  awk -v ref="${iperf_gbs:-0}" '
    function verdict(ok) { return ok ? "met" : "MISSED" }
    { bt = $4 <= $6 ? $4 : $6; r = bt / $2 }
    $1 == 8        { printf "# target, 2 ranks, 8 B: tutti %.2f us <= 0.5x the Gloo best (%.2f us): %s\n", $2, bt, verdict(r >= 2) }
    $1 == 1048576  { printf "# target, 2 ranks, 1 MiB: busbw %.2fx Gloo best >= 1.5x: %s\n", r, verdict(r >= 1.5) }
    $1 == 67108864 { printf "# target, 2 ranks, 64 MiB: busbw %.2fx Gloo best >= 1.5x: %s\n", r, verdict(r >= 1.5)
                     if (ref > 0) printf "# target, 2 ranks, 64 MiB: busbw %.2f GB/s >= 0.6x iperf3 = %.2f GB/s: %s\n", $3, 0.6 * ref, verdict($3 >= 0.6 * ref) }' \
    "$out/data.2"
fi
