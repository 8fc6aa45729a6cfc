#!/usr/bin/env bash
# Installs what is missing, builds the demo and the launcher, and runs the demo on 4 processes
# over shared memory. Usage: tools/demo.sh [ranks]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target tuttirun tutti_demo
build/tools/tuttirun --nproc-per-node="${1:-4}" build/examples/tutti_demo
