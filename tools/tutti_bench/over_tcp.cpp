// tutti-bench over tutti::tcp: one rank per process, started by tuttirun (or any launcher), on
// loopback or across hosts.
#include <tutti/transport/tcp.hpp>

#include "bench.hpp"

int tutti_bench::run_tcp(const options& o) { return run_process<tutti::tcp>(o); }

bool tutti_bench::supports_tcp(std::size_t algo, tutti::collective c) {
  return tutti::algo::automatic::support<tutti::tcp>[algo][static_cast<std::size_t>(c)];
}
