// tutti-bench over tutti::shm: one rank per process, started by tuttirun (or any launcher).
#include "bench.hpp"

namespace tutti_bench {
namespace {

const transport_entry entry{"shm", "", "processes of one host (the default)", transport_entry::ranks_are::processes, false,
                            "shm", &run_process<tutti::shm>, &supports_of<tutti::shm>};
const registrar reg{entry};

}  // namespace
}  // namespace tutti_bench
