// Instructions per call of one 8-byte collective over shm, outside the waiting: run by
// bench/call_cost.sh under callgrind, which leaves toolkit::wait_until (every transport's wait
// loop) out of the count. Usage, under tuttirun: call_cost <collective> <calls>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tutti/tutti.hpp>
#include <vector>

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all_reduce";
  const int calls = argc > 2 ? std::atoi(argv[2]) : 1000;
  auto comm = tutti::communicator<tutti::shm>::from_env();
  std::vector<double> v(1, 1.0), all(static_cast<std::size_t>(comm.size()));
  for (int i = 0; i < calls; ++i) {
    v[0] = 1.0;
    if (what == "all_reduce") comm.all_reduce(tutti::view(v));
    else if (what == "broadcast") comm.broadcast(tutti::view(v), 0);
    else if (what == "reduce") comm.reduce(tutti::view(v), 0);
    else if (what == "all_gather") comm.all_gather(tutti::view(v), tutti::view(all));
    else if (what == "barrier") comm.barrier();
    else {
      std::fprintf(stderr, "call_cost: unknown collective %s\n", what.c_str());
      return 2;
    }
  }
  return 0;
}
