# Sourced by the scripts that run a tutti benchmark beside its Open MPI peer (compare_shm_mpi.sh,
# compare_overlap.sh, compare_fusion.sh), after they set `build`, `tutti` and `peer`: checks the
# three programs are built, makes the output folder `out` (removed on exit), prints the machine
# and Open MPI lines, and sets `tuttirun` and `mpi` (mpirun's command line, 2 ranks unless `np`).
tuttirun=$build/tools/tuttirun
for f in "$tuttirun" "$tutti" "$peer"; do
  [[ -x $f ]] || { echo "missing $f: build with -DTUTTI_BUILD_BENCH=ON (needs libopenmpi-dev)" >&2; exit 1; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# machine: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus"
echo "# Open MPI: $(mpirun --version 2>/dev/null | head -1)"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "${np:-2}")
