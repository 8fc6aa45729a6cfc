// One rank SIGKILLs itself in the middle of a loop of collectives; every survivor must raise
// peer_lost or timeout_error (naming the lost rank) within its deadline, then report and exit 0.
// Driven by tests/multiproc/fault_kill.sh, which checks the launcher and the leftovers.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tutti/tutti.hpp>
#include <vector>

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
  std::vector<float> v(argc > 3 ? std::atoi(argv[3]) : 100000, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (int i = 0;; ++i) {
      if (comm.rank() == victim && i == when) ::raise(SIGKILL);
      if (i % 3 == 2) comm.broadcast(tutti::view(v), i % comm.size());
      else comm.all_reduce(tutti::view(v), tutti::op::max{});
    }
  } catch (const tutti::error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool kind = dynamic_cast<const tutti::peer_lost*>(&e) || dynamic_cast<const tutti::timeout_error*>(&e);
    const bool names = std::string(e.what()).find("rank " + std::to_string(victim)) != std::string::npos;
    // No descriptor of the segment may remain open in a survivor.
    int segment_fds = 0;
    for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      const auto target = std::filesystem::read_symlink(fd.path(), ec).string();
      if (target.find("tutti") != std::string::npos) ++segment_fds;
    }
    std::printf("survivor rank %d after %.2f s: %s (%s, names rank %d: %s, segment fds: %d)\n", comm.rank(), s,
                e.what(), kind ? "expected kind" : "UNEXPECTED kind", victim, names ? "yes" : "no", segment_fds);
    std::fflush(stdout);
    return kind && names && segment_fds == 0 ? 0 : 3;
  }
}
