// A job that hangs or fails on purpose, for tuttirun's hang report (tests/multiproc/hang.sh):
//   late  : rank 2 sleeps 60 s before the third all_reduce; the others time out waiting for it
//   stop  : rank 2 stops itself (SIGSTOP) before it
//   count : rank 2 passes another count to it
// Every rank first runs two all_reduces and a barrier. Built over shm (tutti_hang_shm), tcp
// (tutti_hang_tcp, TUTTI_HANG_TCP) and mpi (tutti_hang_mpi, TUTTI_HANG_MPI; run by mpirun).
#include <signal.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <tutti/tutti.hpp>
#include <vector>

#if defined(TUTTI_HANG_TCP)
#include <tutti/transport/tcp.hpp>
using transport = tutti::tcp;
#elif defined(TUTTI_HANG_MPI)
#include <tutti/transport/mpi.hpp>
using transport = tutti::mpi;
#else
using transport = tutti::shm;
#endif

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "late";
  auto comm = tutti::communicator<transport>::from_env();
  std::vector<float> v(1000, 1.0f);
  comm.all_reduce(tutti::view(v));
  comm.all_reduce(tutti::view(v));
  comm.barrier();
  if (comm.rank() == 2) {
    if (std::strcmp(mode, "late") == 0) std::this_thread::sleep_for(std::chrono::seconds(60));
    if (std::strcmp(mode, "stop") == 0) ::raise(SIGSTOP);
    if (std::strcmp(mode, "count") == 0) v.resize(999);
  }
#if defined(TUTTI_HANG_MPI)
  // mpirun ends every rank as soon as one exits, maybe before the others have found the
  // difference: a rank that failed (its records saved already) gives them a second first.
  try {
    comm.all_reduce(tutti::view(v));
  } catch (const tutti::error&) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    throw;
  }
#else
  comm.all_reduce(tutti::view(v));
#endif
  return 0;
}
