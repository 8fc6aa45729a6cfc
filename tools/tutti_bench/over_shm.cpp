// tutti-bench over tutti::shm: one rank per process, started by tuttirun (or any launcher).
#include "bench.hpp"

int tutti_bench::run_shm(const options& o) { return run_process<tutti::shm>(o); }

bool tutti_bench::supports_shm(std::size_t algo, tutti::collective c) {
  return tutti::algo::automatic::support<tutti::shm>[algo][static_cast<std::size_t>(c)];
}
