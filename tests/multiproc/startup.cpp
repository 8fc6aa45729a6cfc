// A rank for tests/multiproc/startup.sh: starts a world from the environment (tutti::tcp, or
// tutti::shm where built with TUTTI_STARTUP_SHM), runs one all_reduce, and says how it went on
// stdout ("startup verdict: ...") or, when start-up fails, its error on stderr ("startup error: ").
//
//   tuttirun --nproc-per-node=3 tutti_startup_tcp
#include <cstdio>
#include <exception>
#include <tutti/tutti.hpp>
#if !defined(TUTTI_STARTUP_SHM)
#include <tutti/transport/tcp.hpp>
#endif
#include <vector>

int main() {
  try {
#if defined(TUTTI_STARTUP_SHM)
    auto comm = tutti::communicator<tutti::shm>::from_env();
#else
    auto comm = tutti::communicator<tutti::tcp>::from_env();
#endif
    std::vector<int> one{1};
    comm.all_reduce(tutti::view(one));
    std::printf("startup verdict: rank %d of %d started; all_reduce gives %d\n", comm.rank(), comm.size(), one[0]);
    return one[0] == comm.size() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "startup error: %s\n", e.what());
    return 1;
  }
}
