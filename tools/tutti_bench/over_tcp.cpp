// tutti-bench over tutti::tcp: one rank per process, started by tuttirun (or any launcher), on loopback or across hosts.
#include <tutti/transport/tcp.hpp>

#include "bench.hpp"

namespace tutti_bench {

int run_tcp(const options& o) {
  auto comm = tutti::communicator<tutti::tcp>::from_env();
  std::optional<report> rep;
  if (comm.rank() == 0) rep.emplace(o, comm.size(), 1);
  const long long wrong = run_on(comm, o, rep ? &*rep : nullptr);
  if (rep) rep->finish();
  return wrong == 0 ? 0 : 1;
}

}  // namespace tutti_bench
