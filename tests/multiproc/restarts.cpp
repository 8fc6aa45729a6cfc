// The ranks of tuttirun --max-restarts (run by restarts.sh): every attempt builds a tutti::tcp
// world from the launcher's environment and proves it with an all_reduce and a barrier, so a
// rendezvous that mixed attempts, or reused a port or job that is gone, fails here. Then, by argv:
//   ok                          every rank exits 0
//   fail-first <rank>           that rank exits 3 in attempt 0, after the world is up; the others
//                               learn it in their next barrier (peer_lost, 0.5 s later) and exit 1
//   always-fail <rank> <status> that rank exits <status> in every attempt
//   sleep <seconds>             every rank sleeps, then meets the others in a barrier, exits 0
//   cause-lingers <rank> <status>  that rank closes its communicator, so the others (in a barrier,
//                               not catching) die of peer_lost by SIGABRT at once, and exits
//                               <status> only 0.5 s later: its peers fail first in time, victims
//   return-early <rank>         that rank returns 0 at once; the others wait in an all_reduce,
//                               raise peer_lost and exit 1
// Every rank first checks that TORCHELASTIC_RESTART_COUNT and TUTTI_RESTART_COUNT are set and
// equal (exit 10 otherwise), and prints one line per attempt:
//   "restarts: attempt A rank R of W: world up, sum of ranks S, job JOB port P"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <tutti/transport/tcp.hpp>
#include <tutti/tutti.hpp>
#include <vector>

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const std::string mode = argc > 1 ? argv[1] : "ok";
  const std::string torch_count = env("TORCHELASTIC_RESTART_COUNT"), tutti_count = env("TUTTI_RESTART_COUNT");
  if (torch_count.empty() || torch_count != tutti_count) {
    std::fprintf(stderr, "restarts: TORCHELASTIC_RESTART_COUNT='%s' but TUTTI_RESTART_COUNT='%s'\n",
                 torch_count.c_str(), tutti_count.c_str());
    return 10;
  }
  const int attempt = std::atoi(tutti_count.c_str());

  std::optional<tutti::communicator<tutti::tcp>> held(tutti::communicator<tutti::tcp>::from_env());
  auto& comm = *held;
  comm.set_timeout(60s);
  std::vector<long long> sum{comm.rank()};
  comm.all_reduce(tutti::view(sum));
  comm.barrier();
  const long long want = static_cast<long long>(comm.size()) * (comm.size() - 1) / 2;
  if (sum[0] != want) {
    std::fprintf(stderr, "restarts: attempt %d rank %d: sum of ranks %lld, expected %lld\n", attempt, comm.rank(),
                 sum[0], want);
    return 11;
  }
  std::printf("restarts: attempt %d rank %d of %d: world up, sum of ranks %lld, job %s port %s\n", attempt,
              comm.rank(), comm.size(), sum[0], env("TUTTI_JOB_ID"), env("MASTER_PORT"));
  std::fflush(stdout);

  const int who = argc > 2 ? std::atoi(argv[2]) : -1;
  if (mode == "fail-first" && attempt == 0 && comm.rank() == who) {
    std::fprintf(stderr, "restarts: rank %d fails on purpose in attempt 0\n", who);
    return 3;
  }
  if (mode == "always-fail" && comm.rank() == who) {
    const int status = argc > 3 ? std::atoi(argv[3]) : 7;
    std::fprintf(stderr, "restarts: rank %d fails on purpose with status %d in attempt %d\n", who, status, attempt);
    return status;
  }
  if (mode == "cause-lingers") {
    if (comm.rank() == who) {
      std::fprintf(stderr, "restarts: rank %d leaves and exits with status %d in 0.5 s\n", who, argc > 3 ? std::atoi(argv[3]) : 7);
      held.reset();
      std::this_thread::sleep_for(500ms);
      return argc > 3 ? std::atoi(argv[3]) : 7;
    }
    comm.barrier();  // not caught: std::terminate, SIGABRT
    return 0;
  }
  if (mode == "return-early" && comm.rank() == who) return 0;
  if (mode == "return-early") {
    try {
      comm.all_reduce(tutti::view(sum));
    } catch (const tutti::error& e) {
      std::fprintf(stderr, "restarts: attempt %d rank %d: %s\n", attempt, comm.rank(), e.what());
      return 1;
    }
    return 0;
  }
  if (mode == "sleep") std::this_thread::sleep_for(std::chrono::duration<double>(argc > 2 ? std::atof(argv[2]) : 1));
  // The others meet the failing rank's absence only after it has surely exited, so that tuttirun
  // sees it fail first (and reports its status), not a peer's peer_lost.
  if ((mode == "fail-first" && attempt == 0) || mode == "always-fail") std::this_thread::sleep_for(500ms);
  try {
    comm.barrier();
  } catch (const tutti::error& e) {
    std::fprintf(stderr, "restarts: attempt %d rank %d: %s\n", attempt, comm.rank(), e.what());
    return 1;
  }
  return 0;
}
