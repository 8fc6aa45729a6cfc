// Carrying on after ranks are lost: a training-style loop of all_reduces in which one rank (or
// several at once) dies (SIGKILL, as a crash or the OOM killer would) part-way through. The
// others get `peer_lost` (or `timeout_error`) naming it, build a new communicator of the ranks
// still alive with `shrink()`, and finish the loop among themselves, checking every result.
// Over shared memory (tutti_recover) and over tcp (tutti_recover_tcp: the survivors agree over
// fresh connections; if rank 0, the store's host, dies, the lowest survivor serves the new one).
//
//   tuttirun --keep-going --nproc-per-node=4 build/examples/tutti_recover [victims] [step]
//
// `victims`: a rank, or several separated by commas ("0,2": both die at the same step).
// (--keep-going: tuttirun names the dead rank but lets the others run on; without it, it stops
// the whole job at the first failure, as torchrun does.) The defaults kill the last rank at step 5.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tutti/tutti.hpp>
#include <vector>
#ifdef TUTTI_RECOVER_TCP
#include <tutti/transport/tcp.hpp>
using transport = tutti::tcp;
#else
using transport = tutti::shm;
#endif

int main(int argc, char** argv) {
  using comm_t = tutti::communicator<transport>;
  auto comm = comm_t::from_env();
  std::vector<int> victims;
  for (std::string list = argc > 1 ? argv[1] : std::to_string(comm.size() - 1); !list.empty();) {
    const auto comma = list.find(',');
    victims.push_back(std::atoi(list.substr(0, comma).c_str()));
    list = comma == std::string::npos ? "" : list.substr(comma + 1);
  }
  const int fatal_step = argc > 2 ? std::atoi(argv[2]) : 5;
  const int steps = 10;
  std::vector<int> old_ranks;  // after shrink: the original rank of each member
  for (int r = 0; r < comm.size(); ++r) old_ranks.push_back(r);
  const int me = comm.rank();  // this process's rank in the original job

  std::vector<double> grad(1 << 16);
  for (int step = 0; step < steps; ++step) {
    if (step == fatal_step && std::count(victims.begin(), victims.end(), me)) ::raise(SIGKILL);
    for (auto& g : grad) g = me + 1;
    try {
      comm.all_reduce(tutti::view(grad));
    } catch (const tutti::error& e) {
      std::printf("step %d: %s\n", step, e.what());
      std::vector<int> kept;
      comm = comm.shrink(&kept);  // every survivor calls it; the lost ranks are left out
      std::vector<int> now;
      for (int k : kept) now.push_back(old_ranks[static_cast<std::size_t>(k)]);
      old_ranks = now;
      std::string list;
      for (int r : old_ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
      std::printf("step %d: rank %d carries on as rank %d of %d (original ranks %s)\n", step, me, comm.rank(),
                  comm.size(), list.c_str());
      std::fflush(stdout);
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
