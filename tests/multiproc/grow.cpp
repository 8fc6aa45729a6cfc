// Growing a running job (communicator::grow), over tcp (and shm: TUTTI_GROW_SHM): started by
// tuttirun with 3 ranks, the job grows by 1, then by 2; the joiners are this program too, started
// by grow.sh with TUTTI_JOIN=1 and the job's store address (shm: its TUTTI_JOB_ID) and token. Every member checks every collective against the reference at
// each size (3, 4, 6), the old ranks keep their numbers, the joiners come after them, and a
// mismatch (a rank that calls a different collective) is still caught in the grown world.
// Prints "grow verdict: rank R of 6: ok" (or what went wrong).
//
//   grow --wrong-token   a joiner whose token is not the job's: must be refused (exit 0 if so)
//   grow --free-port     prints a free port of 127.0.0.1
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <tutti/tutti.hpp>
#ifdef TUTTI_GROW_SHM
using job_transport = tutti::shm;
#else
#include <tutti/transport/tcp.hpp>
using job_transport = tutti::tcp;
#endif

#include <tutti/testing/collectives.hpp>

using namespace tutti;

namespace {

int failures = 0;

/// Every collective and v-collective at this size, checked against the reference.
template <class Comm>
bool checked(Comm& comm, const char* when) {
  testing::report rep;
  testing::check_every_type<algo::automatic>(comm, rep, false);
  if (!rep.ok()) {
    std::printf("grow verdict: rank %d of %d %s: WRONG: %s\n", comm.rank(), comm.size(), when, rep.text().c_str());
    ++failures;
  }
  return rep.ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--free-port") {  // for grow.sh
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    std::printf("%d\n", ntohs(a.sin_port));
    ::close(fd);
    return 0;
  }
  const bool joiner = std::getenv("TUTTI_JOIN") != nullptr;
  if (argc > 1 && std::string(argv[1]) == "--wrong-token") {
    try {
      auto c = communicator<job_transport>::from_env();
      std::printf("grow verdict: a joiner with a wrong token was let in as rank %d\n", c.rank());
      return 1;
    } catch (const config_error& e) {
      const bool said = std::string(e.what()).find("token") != std::string::npos;
      std::printf("grow verdict: wrong token refused%s: %s\n", said ? "" : " WITHOUT SAYING WHY", e.what());
      return said ? 0 : 1;
    }
  }
  auto comm = communicator<job_transport>::from_env();
  const int first = comm.rank();
  std::printf("%s rank %d of %d\n", joiner ? "joined as" : "started as", comm.rank(), comm.size());
  std::fflush(stdout);
  if (comm.size() == 3) {
    checked(comm, "before growing");
    comm = comm.grow(1);
    if (comm.rank() != first) std::printf("grow verdict: rank %d became rank %d\n", first, comm.rank()), ++failures;
  }
  if (comm.size() == 4) {
    checked(comm, "after growing by 1");
    const int before = comm.rank();
    comm = comm.grow(2);
    if (comm.rank() != before) std::printf("grow verdict: rank %d became rank %d\n", before, comm.rank()), ++failures;
  }
  if (comm.size() != 6) {
    std::printf("grow verdict: rank %d in a world of %d, expected 6\n", comm.rank(), comm.size());
    return 1;
  }
  checked(comm, "after growing by 2");
  if (joiner && comm.rank() < 3) std::printf("grow verdict: a joiner got rank %d, an old rank's\n", comm.rank()), ++failures;
  // Mismatch detection across the change: rank 5 (a joiner) calls another collective.
  {
    std::vector<int> v(8, comm.rank());
    std::string what;
    bool caught = false;
    try {
      if (comm.rank() == 5) comm.broadcast(view(v), 0);
      else comm.all_reduce(view(v));
    } catch (const tutti::error& e) {
      caught = dynamic_cast<const mismatch_error*>(&e) || dynamic_cast<const peer_lost*>(&e);
      what = e.what();
    }
    if (!caught) std::printf("grow verdict: rank %d: the mismatch went unnoticed (%s)\n", comm.rank(), what.c_str()), ++failures;
  }
  if (failures == 0) std::printf("grow verdict: rank %d of 6: ok\n", comm.rank());
  return failures == 0 ? 0 : 1;
}
