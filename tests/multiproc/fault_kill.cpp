// One rank SIGKILLs itself in the middle of a loop of collectives (or, with a fourth argument
// "p2p", of point-to-point rounds: isend to the right, recv from the left, wait); every survivor
// must raise peer_lost or timeout_error (naming the lost rank) within its deadline, then report
// and exit 0.
// Driven by tests/multiproc/fault_kill.sh, which checks the launcher and the leftovers.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <tutti/tutti.hpp>
#include <vector>

#include "descriptors.hpp"

// The same program over tcp (target tutti_fault_kill_tcp): survivors see closed connections.
#ifdef TUTTI_FAULT_KILL_TCP
#include <tutti/transport/tcp.hpp>
using transport = tutti::tcp;
#else
using transport = tutti::shm;
#endif

int main(int argc, char** argv) {
  ::signal(SIGTERM, SIG_IGN);  // outlive tuttirun's SIGTERM long enough to report
  const int victim = argc > 1 ? std::atoi(argv[1]) : 1;
  const int when = argc > 2 ? std::atoi(argv[2]) : 50;
  auto comm = tutti::communicator<transport>::from_env();
  std::set<std::uint64_t> sockets;  // the tcp mesh's, which the failure must close
#ifdef TUTTI_FAULT_KILL_TCP
  sockets = tutti::test::mesh_sockets(comm.transport());
#endif
  std::vector<float> v(argc > 3 ? std::atoi(argv[3]) : 100000, 1.0f), w(v.size());
  const bool p2p = argc > 4 && std::string(argv[4]) == "p2p";
  const int right = (comm.rank() + 1) % comm.size(), left = (comm.rank() + comm.size() - 1) % comm.size();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (int i = 0;; ++i) {
      if (comm.rank() == victim && i == when) ::raise(SIGKILL);
      if (p2p) {
        auto s = comm.isend(tutti::view(v), right, i % 4);
        comm.recv(tutti::view(w), left, i % 4);
        s.wait();
      } else if (i % 3 == 2) {
        comm.broadcast(tutti::view(v), i % comm.size());
      } else {
        comm.all_reduce(tutti::view(v), tutti::op::max{});
      }
    }
  } catch (const tutti::error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool kind = dynamic_cast<const tutti::peer_lost*>(&e) || dynamic_cast<const tutti::timeout_error*>(&e);
    const bool names = std::string(e.what()).find("rank " + std::to_string(victim)) != std::string::npos;
    // No descriptor of the transport (the shm segment, the tcp mesh's sockets) may remain open in
    // a survivor whose communicator the failure broke; a failed request (the isend's wait) leaves
    // it usable, by design, so p2p rounds do not count them.
    const int transport_fds = p2p ? 0 : tutti::test::transport_descriptors(sockets);
    std::printf("survivor rank %d after %.2f s: %s (%s, names rank %d: %s, transport fds: %d of %zu sockets)\n",
                comm.rank(), s, e.what(), kind ? "expected kind" : "UNEXPECTED kind", victim, names ? "yes" : "no",
                transport_fds, sockets.size());
    std::fflush(stdout);
    return kind && names && transport_fds == 0 ? 0 : 3;
  }
}
