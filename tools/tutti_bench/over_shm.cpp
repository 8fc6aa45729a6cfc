// tutti-bench over tutti::shm: one rank per process, started by tuttirun (or any launcher).
#include "bench.hpp"

int tutti_bench::run_shm(const options& o) { return run_process<tutti::shm>(o); }
