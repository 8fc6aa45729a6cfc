// mismatch_error for every collective as real processes over tutti::tcp: the bodies of
// tests/support/mismatch_checks.hpp. Run under the launcher: `tuttirun --nproc-per-node=N
// tutti_mismatch_tcp_tests` (ctest: N = 2, 3).
//
// After a mismatch the failed ranks close every connection of their mesh, which sub-groups
// share: each case builds a mesh of its own, with a rendezvous store of its own on a free port
// that rank 0 picks and the job's world communicator (never part of a mismatch) hands out; the
// world communicator also gathers the outcomes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tutti/transport/tcp.hpp>

#include "../support/mismatch_checks.hpp"

using namespace tutti;
using namespace tutti::test::mismatch;

namespace {
communicator<tcp>& control() {
  static communicator<tcp> comm = [] {
    auto c = communicator<tcp>::from_env();
    c.set_timeout(std::chrono::seconds(120));
    return c;
  }();
  return comm;
}

/// A port on 127.0.0.1 that was free a moment ago (the kernel's pick for an unbound socket).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  REQUIRE(ok);
  return ntohs(a.sin_port);
}

auto runner() {
  auto fresh = [] {
    auto& ctl = control();
    std::vector<int> port{ctl.rank() == 0 ? free_port() : 0};
    ctl.broadcast(view(port), 0);
    job_env job = job_env::from_env();
    job.master_addr = "127.0.0.1";
    job.master_port = port[0];
    config cfg = config::from_env();
    cfg.timeout = std::chrono::seconds(30);  // start-up only; the calls get `deadline`
    const char* token = std::getenv("TUTTI_JOB_TOKEN");
    return communicator<tcp>(tcp::create(job, cfg, tcp_options::from_env(), token ? token : ""));
  };
  return make_process_runner<communicator<tcp>, algo::ring, algo::tree, algo::recursive_doubling, algo::direct,
                             algo::automatic>(control(), fresh);
}
}  // namespace

TEST_SUITE_BEGIN("multiproc");

TEST_CASE("mismatch over tcp: broadcast") { auto run = runner(); check_collective(run, collective::broadcast); }
TEST_CASE("mismatch over tcp: reduce") { auto run = runner(); check_collective(run, collective::reduce); }
TEST_CASE("mismatch over tcp: all_reduce") { auto run = runner(); check_collective(run, collective::all_reduce); }
TEST_CASE("mismatch over tcp: gather") { auto run = runner(); check_collective(run, collective::gather); }
TEST_CASE("mismatch over tcp: all_gather") { auto run = runner(); check_collective(run, collective::all_gather); }
TEST_CASE("mismatch over tcp: scatter") { auto run = runner(); check_collective(run, collective::scatter); }
TEST_CASE("mismatch over tcp: all_to_all") { auto run = runner(); check_collective(run, collective::all_to_all); }
TEST_CASE("mismatch over tcp: reduce_scatter") { auto run = runner(); check_collective(run, collective::reduce_scatter); }
TEST_CASE("mismatch over tcp: barrier") { auto run = runner(); check_collective(run, collective::barrier); }
TEST_CASE("mismatch over tcp: send/recv") { auto run = runner(); check_send_recv(run); }

TEST_SUITE_END();
