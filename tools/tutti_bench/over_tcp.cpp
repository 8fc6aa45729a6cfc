// tutti-bench over tutti::tcp: one rank per process, started by tuttirun (or any launcher), on
// loopback or across hosts.
#include <tutti/transport/tcp.hpp>

#include "bench.hpp"

namespace tutti_bench {
namespace {

const transport_entry entry{"tcp", "", "processes on any hosts", transport_entry::ranks_are::processes, false, "tcp",
                            &run_process<tutti::tcp>, &supports_of<tutti::tcp>};
const registrar reg{entry};

}  // namespace
}  // namespace tutti_bench
