// tutti-bench over tutti::mpi: one rank per MPI process (mpirun, srun); tutti's algorithms over
// MPI point to point, or MPI's own collectives with --algo native.
#include <tutti/transport/mpi.hpp>

#include "bench.hpp"

int tutti_bench::run_mpi(const options& o) { return run_process<tutti::mpi>(o); }

bool tutti_bench::supports_mpi(std::size_t algo, tutti::collective c) {
  return tutti::algo::automatic::support<tutti::mpi>[algo][static_cast<std::size_t>(c)];
}
