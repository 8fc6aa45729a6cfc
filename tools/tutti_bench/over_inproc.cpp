// tutti-bench over tutti::inproc: --np N threads of this process.
#include "bench.hpp"

namespace tutti_bench {
namespace {

int run_inproc(const options& o) {
  report rep(o, std::max(o.np, 1), std::max(o.np, 1));
  long long wrong = 0;
  tutti::inproc::run(std::max(o.np, 1), [&](auto& comm) {
    const long long w = run_on(comm, o, &rep);
    if (comm.rank() == 0) wrong = w;
  });
  rep.finish();
  return wrong == 0 ? 0 : 1;
}

const transport_entry entry{"inproc", "threads", "threads of one process", transport_entry::ranks_are::threads, false,
                            "inproc", &run_inproc, &supports_of<tutti::inproc>};
const registrar reg{entry};

}  // namespace
}  // namespace tutti_bench
