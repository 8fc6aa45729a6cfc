// tutti-bench over tutti::inproc: --np N threads of this process.
#include "bench.hpp"

namespace tutti_bench {

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

bool supports_inproc(std::size_t algo, tutti::collective c) {
  return tutti::algo::automatic::support<tutti::inproc>[algo][static_cast<std::size_t>(c)];
}

}  // namespace tutti_bench
