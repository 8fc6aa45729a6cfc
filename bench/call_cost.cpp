// Instructions per call of one 8-byte collective over shm, outside the waiting: run by
// bench/call_cost.sh under callgrind, which leaves shm's wait (shm::wait_for) out of the count.
// Each rank's block is one double (8 bytes); the reductions are in place, as
// peers/mpi_call_cost.cpp calls Open MPI's. Usage, under tuttirun: call_cost <collective> <calls>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tutti/tutti.hpp>
#include <vector>

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all_reduce";
  const int calls = argc > 2 ? std::atoi(argv[2]) : 1000;
  auto comm = tutti::communicator<tutti::shm>::from_env();
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<double> v(1, 1.0), all(p, 1.0), other(p, 0.0);
  // The collective is chosen once, outside the counted loop (a chain of string compares per call
  // would count as the call's own work).
  auto run = [&](auto&& call) {
    for (int i = 0; i < calls; ++i) {
      v[0] = 1.0;
      call();
    }
  };
  using tutti::view;
  if (what == "all_reduce") run([&] { comm.all_reduce(view(v)); });
  else if (what == "broadcast") run([&] { comm.broadcast(view(v), 0); });
  else if (what == "reduce") run([&] { comm.reduce(view(v), 0); });
  else if (what == "all_gather") run([&] { comm.all_gather(view(v), view(all)); });
  else if (what == "gather") run([&] { comm.gather(view(v), view(all), 0); });
  else if (what == "scatter") run([&] { comm.scatter(view(all), view(v), 0); });
  else if (what == "all_to_all") run([&] { comm.all_to_all(view(all), view(other)); });
  else if (what == "reduce_scatter") run([&] { comm.reduce_scatter(view(all), view(v), tutti::op::sum{}); });
  else if (what == "barrier") run([&] { comm.barrier(); });
  else {
    std::fprintf(stderr, "call_cost: unknown collective %s\n", what.c_str());
    return 2;
  }
  return 0;
}
