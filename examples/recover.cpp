// Carrying on after a rank is lost: a training-style loop of all_reduces over shared memory in
// which one rank dies (SIGKILL, as a crash or the OOM killer would) part-way through. The others
// get `peer_lost` (or `timeout_error`) naming it, build a new communicator of the ranks still
// alive with `shrink()`, and finish the loop among themselves, checking every result.
//
//   tuttirun --keep-going --nproc-per-node=4 build/examples/tutti_recover [victim] [step]
//
// (--keep-going: tuttirun names the dead rank but lets the others run on; without it, it stops
// the whole job at the first failure, as torchrun does.) The defaults kill the last rank at step 5.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <tutti/tutti.hpp>
#include <vector>

int main(int argc, char** argv) {
  using comm_t = tutti::communicator<tutti::shm>;
  auto comm = comm_t::from_env();
  const int victim = argc > 1 ? std::atoi(argv[1]) : comm.size() - 1;
  const int fatal_step = argc > 2 ? std::atoi(argv[2]) : 5;
  const int steps = 10;
  std::vector<int> old_ranks;  // after shrink: the original rank of each member
  for (int r = 0; r < comm.size(); ++r) old_ranks.push_back(r);
  const int me = comm.rank();  // this process's rank in the original job

  std::vector<double> grad(1 << 16);
  for (int step = 0; step < steps; ++step) {
    if (step == fatal_step && me == victim) ::raise(SIGKILL);
    for (auto& g : grad) g = me + 1;
    try {
      comm.all_reduce(tutti::view(grad));
    } catch (const tutti::error& e) {
      std::printf("step %d: %s\n", step, e.what());
      std::vector<int> kept;
      comm = comm.shrink(&kept);  // every survivor calls it; the lost rank is left out
      std::vector<int> now;
      for (int k : kept) now.push_back(old_ranks[static_cast<std::size_t>(k)]);
      old_ranks = now;
      std::string list;
      for (int r : old_ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
      std::printf("step %d: rank %d carries on as rank %d of %d (original ranks %s)\n", step, me, comm.rank(),
                  comm.size(), list.c_str());
      --step;  // redo the step with the ranks that are left
      continue;
    }
    double want = 0;
    for (int r : old_ranks) want += r + 1;
    for (double g : grad)
      if (g != want) {
        std::printf("step %d: wrong result %g, want %g\n", step, g, want);
        return 1;
      }
  }
  std::printf("rank %d finished all %d steps with %d ranks\n", me, steps, comm.size());
  return 0;
}
