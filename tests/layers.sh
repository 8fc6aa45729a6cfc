#!/usr/bin/env bash
# The include rules of docs/DESIGN.md ("Layers"), checked: each rule is a folder of
# include/tutti/ and the tutti headers its files may not include (an extended regex on the path
# after "tutti/"). Prints every include that breaks one; exits 1 if any does.
#   tests/layers.sh [include-dir (include/)]
set -u
inc=${1:-$(cd "$(dirname "$0")/.." && pwd)/include}
cd "$inc/tutti" || exit 2
bad=0
rule() {  # rule FOLDER FORBIDDEN-REGEX WHY
  local folder=$1 forbidden=$2 why=$3 hits
  hits=$(grep -rnE "#include \"tutti/($forbidden)" "$folder" --include='*.hpp' --include='*.ipp' --include='*.cuh' || true)
  if [[ -n $hits ]]; then
    printf '%s\n' "$hits" | sed "s|^|layers: $why: |"
    bad=1
  fi
}
rule core '(op|algorithm|group|transport|bootstrap|testing)/|detail/[^a]' "core names no op, algorithm, transport or group"
rule op '(algorithm|group|transport|bootstrap|testing)/' "ops name no algorithm, transport or group"
rule detail '(op|algorithm|group|transport|bootstrap|testing)/' "detail/ sits on core/ only"
rule bootstrap '(op|algorithm|group|transport|testing)/' "bootstrap/ names no transport, algorithm or group"
rule transport '(algorithm|group|testing)/' "transports name no algorithm and no communicator"
rule algorithm 'group/|testing/|transport/(inproc|shm|tcp|mpi|cuda_ipc|nccl|toolkit|device|shm/|tcp/|mpi/)' \
  "algorithms ask the transport's capabilities only"
echo "layers: $( ((bad)) && echo "rules broken (above)" || echo "every include follows the rules")"
exit $bad
