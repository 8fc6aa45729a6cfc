// tutti-bench over tutti::mpi: one rank per MPI process (mpirun, srun); tutti's algorithms over MPI point to point, or MPI's own with --algo native.
#include <tutti/transport/mpi.hpp>

#include "bench.hpp"

namespace tutti_bench {

int run_mpi(const options& o) {
  auto comm = tutti::communicator<tutti::mpi>::from_env();
  std::optional<report> rep;
  if (comm.rank() == 0) rep.emplace(o, comm.size(), 1);
  const long long wrong = run_on(comm, o, rep ? &*rep : nullptr);
  if (rep) rep->finish();
  return wrong == 0 ? 0 : 1;
}

}  // namespace tutti_bench
