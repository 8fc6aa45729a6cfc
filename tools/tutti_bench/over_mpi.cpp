// tutti-bench over tutti::mpi: one rank per MPI process (mpirun, srun); tutti's algorithms over
// MPI point to point, or MPI's own collectives with --algo native.
#include <tutti/transport/mpi.hpp>

#include "bench.hpp"

namespace tutti_bench {
namespace {

const transport_entry entry{"mpi", "", "processes of an MPI job (mpirun)", transport_entry::ranks_are::mpi_processes, false,
                            "", &run_process<tutti::mpi>, &supports_of<tutti::mpi>};
const registrar reg{entry};

}  // namespace
}  // namespace tutti_bench
