#!/usr/bin/env bash
# Installs the Debian packages tutti's build, tests, examples and benchmarks need, if missing.
# Usage: tools/install-deps.sh   (as root, or with sudo available)
set -euo pipefail

packages=(cmake ninja-build pkgconf g++ clang libclang-rt-14-dev lld doctest-dev libasio-dev libopenmpi-dev openmpi-bin gnuplot-nox jq iperf3 libgloo-dev iproute2 mpich libmpich-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "tutti: all build dependencies are installed"
  exit 0
fi

echo "tutti: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "tutti: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "tutti: dependencies installed"
