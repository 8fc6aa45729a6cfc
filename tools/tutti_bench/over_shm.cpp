// tutti-bench over tutti::shm: one rank per process, started by tuttirun (or any launcher).
#include "bench.hpp"

namespace tutti_bench {

int run_shm(const options& o) {
  auto comm = tutti::communicator<tutti::shm>::from_env();
  std::optional<report> rep;
  if (comm.rank() == 0) rep.emplace(o, comm.size(), 1);
  const long long wrong = run_on(comm, o, rep ? &*rep : nullptr);
  if (rep) rep->finish();
  return wrong == 0 ? 0 : 1;
}

}  // namespace tutti_bench
