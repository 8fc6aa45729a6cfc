// A rank that reaches shrink() after the others decided is told it was left out, over tcp: in a
// job of 3 (TUTTI_TIMEOUT=2 s), rank 0 dies; rank 1 shrinks at once and, rank 2 being alive but
// silent past the deadline, carries on alone; rank 2 wakes up later, finds the job broken, calls
// shrink() and must raise errc::aborted saying it was left out (the "out" its coordinator left
// in its acceptor's queue), not form a job of its own. Prints "late verdict: ..." per survivor.
//   tuttirun --keep-going --nproc-per-node=3 tutti_late_shrink
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <tutti/transport/tcp.hpp>
#include <tutti/tutti.hpp>
#include <vector>

int main() {
  auto comm = tutti::communicator<tutti::tcp>::from_env();
  if (comm.size() != 3) return 2;
  comm.barrier();
  const int me = comm.rank();
  if (me == 0) ::raise(SIGKILL);
  if (me == 2) std::this_thread::sleep_for(2 * comm.timeout() + std::chrono::seconds(1));  // alive, silent
  std::vector<int> v(4, me);
  try {
    comm.all_reduce(tutti::view(v));
    std::printf("late verdict: rank %d: WRONG: the all_reduce returned\n", me);
    return 1;
  } catch (const tutti::error&) {
  }
  try {
    std::vector<int> kept;
    auto next = comm.shrink(&kept);
    const bool alone = me == 1 && next.size() == 1 && kept == std::vector<int>{1};
    std::printf("late verdict: rank %d: %s: now rank %d of %d\n", me, alone ? "as expected" : "WRONG", next.rank(), next.size());
    if (alone) next.barrier();  // a world of one works
    if (me == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return alone ? 0 : 1;
  } catch (const tutti::error& e) {
    const bool out = me == 2 && e.code() == tutti::make_error_code(tutti::errc::aborted) && std::string(e.what()).find("left out") != std::string::npos;
    std::printf("late verdict: rank %d: %s: %s\n", me, out ? "as expected" : "WRONG", e.what());
    return out ? 0 : 1;
  }
}
