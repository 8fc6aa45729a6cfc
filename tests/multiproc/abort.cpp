// communicator::abort() across processes: rank `aborter` blocks in an all_reduce (its next peer
// comes 2 s late) while a thread of its own aborts the communicator; it must get errc::aborted,
// and every other rank peer_lost naming it, long before the (100 s) deadline. Before that,
// every rank raises SIGUSR1 at itself: the flight recorder prints its last operations and the
// program carries on. Each rank prints one verdict line and exits 0 when all is as expected.
// Run by ctest through tuttirun over shm (tutti_abort_test) and tcp (tutti_abort_test_tcp).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <tutti/tutti.hpp>
#include <vector>

#ifdef TUTTI_ABORT_TCP
#include <tutti/transport/tcp.hpp>
using transport = tutti::tcp;
#else
using transport = tutti::shm;
#endif

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  auto comm = tutti::communicator<transport>::from_env();
  comm.set_timeout(100s);
  const int aborter = argc > 1 ? std::atoi(argv[1]) : 0;
  std::vector<float> v(1000, 1.0f);
  for (int i = 0; i < 5; ++i) comm.all_reduce(tutti::view(v));
  ::raise(SIGUSR1);  // prints "flight recorder (SIGUSR1)" with the 5 all_reduces; must not kill us
  comm.barrier();

  std::thread killer;
  if (comm.rank() == aborter)
    killer = std::thread([&comm] {
      std::this_thread::sleep_for(300ms);
      comm.abort();
    });
  const auto t0 = std::chrono::steady_clock::now();
  std::string what = "nothing";
  bool expected = false;
  try {
    // The aborter waits in an all_reduce for a rank that comes 2 s late; the others wait for it.
    if (comm.rank() == (aborter + 1) % comm.size()) std::this_thread::sleep_for(2s);
    comm.all_reduce(tutti::view(v));
    // A peer may finish the call the aborter left (its part was already posted): the next call
    // must then fail.
    comm.barrier();
  } catch (const tutti::error& e) {
    what = e.what();
    const bool names = what.find("rank " + std::to_string(aborter)) != std::string::npos;
    expected = comm.rank() == aborter ? e.code() == tutti::errc::aborted
                                      : dynamic_cast<const tutti::peer_lost*>(&e) != nullptr && names;
  }
  if (killer.joinable()) killer.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("abort verdict rank %d after %.2f s: %s: %s\n", comm.rank(), s,
              expected && s < 50 ? "as expected" : "UNEXPECTED", what.c_str());
  return expected && s < 50 ? 0 : 1;
}
