// Randomized faults: every rank runs the same endless stream of random, verified collectives
// (random_collectives.hpp), every fourth step four iall_reduces pending at once (from the first
// that fails, each must fail naming the victim); at collective `at` one random rank, the victim, starts a timer that
// after `delay_us` sends its own process SIGKILL or SIGSTOP, so the fault lands at a random point,
// often mid-collective. Every survivor must raise peer_lost or timeout_error naming the victim,
// within TUTTI_TIMEOUT + 2 s of entering the collective that failed; it reports and exits 1 (a
// program whose peer was lost fails), or 3 when a check failed. Driven by fault_random.sh, which
// also checks the launcher, the leftovers and the ports.
//
// With TUTTI_FAULT_SHRINK=1 (3..5 ranks; tuttirun --keep-going) each survivor then shrinks:
// the new communicator must hold the survivors in their old order, and run 20 more verified
// collectives; it reports "shrunk: ..." and exits 0.
//
//   fault_random --plan SEED       prints the trial of SEED: np, signal, victim, at, delay, a free port
//   fault_random --bind-port P     exits 0 if 127.0.0.1:P can be bound and listened on again
//   fault_random SEED              (under tuttirun) one rank of the trial
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "descriptors.hpp"
#include "random_collectives.hpp"

#ifdef TUTTI_FAULT_TCP
#include <tutti/transport/tcp.hpp>
using transport = tutti::tcp;
#else
using transport = tutti::shm;
#endif

namespace {

using namespace tutti::fault_test;

struct plan {
  int np, sig, victim, at, delay_us;
};

bool shrink_mode() {
  const char* v = std::getenv("TUTTI_FAULT_SHRINK");
  return v && std::string(v) == "1";
}

plan make_plan(std::uint64_t seed) {
  std::uint64_t x = mix(seed);
  auto next = [&](std::uint64_t n) { return static_cast<int>((x = mix(x)) % n); };
  plan p;
  p.np = shrink_mode() ? 3 + next(3) : 2 + next(4);
  p.sig = next(2) ? SIGSTOP : SIGKILL;
  p.victim = next(static_cast<std::uint64_t>(p.np));
  p.at = next(30);
  p.delay_us = next(5000);
  return p;
}

int bound_socket(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as the rendezvous store binds
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 1) != 0) {
    std::printf("cannot bind and listen on 127.0.0.1:%d: %s\n", port, std::strerror(errno));
    ::close(fd);
    return -1;
  }
  return fd;
}

int free_port() {
  const int fd = bound_socket(0);
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// Shrink mode, on a survivor: the new communicator of the others, checked, and 20 verified
/// collectives on it. 0 when all is well, else 3 (reported).
template <class Comm>
int carry_on(Comm& comm, const plan& p, std::uint64_t seed) {
  const int me = comm.rank();
  try {
    std::vector<int> kept;
    auto next = comm.shrink(&kept);
    std::vector<int> want;
    for (int r = 0; r < p.np; ++r)
      if (r != p.victim) want.push_back(r);
    const auto at = static_cast<int>(std::find(want.begin(), want.end(), me) - want.begin());
    if (kept != want || next.size() != p.np - 1 || next.rank() != at) {
      std::string got;
      for (int k : kept) got += " " + std::to_string(k);
      std::printf("SHRINK WRONG rank %d: now rank %d of %d, kept%s\n", me, next.rank(), next.size(), got.c_str());
      return 3;
    }
    for (std::uint64_t i = 0; i < 20; ++i) {
      const step s = make_step(seed ^ 0x5eedu, i, next.size());
      if (auto o = run_step(next, s, i); !o.wrong.empty()) {
        std::printf("WRONG RESULT after shrink: rank %d collective %llu (%s): %s\n", next.rank(),
                    static_cast<unsigned long long>(i), s.describe().c_str(), o.wrong.c_str());
        return 3;
      }
    }
    std::printf("shrunk: rank %d carries on as rank %d of %d; 20 collectives verified\n", me, next.rank(), next.size());
    return 0;
  } catch (const std::exception& e) {
    std::printf("SHRINK FAILED rank %d: %s\n", me, e.what());
    return 3;
  }
}

}  // namespace

/// Step i of every fourth: four iall_reduces of int32 posted at once, then each waited on. Those
/// that complete before the fault must be right; from the first that fails, every one must fail
/// naming the victim (the operations queued behind a failed one fail with its error, at once),
/// and the first error is rethrown for main's verdict.
template <class Comm>
void pending_step(Comm& comm, std::uint64_t i, int victim) {
  const int p = comm.size(), me = comm.rank();
  std::vector<std::vector<std::int32_t>> bufs(4);
  std::vector<tutti::request> rs;
  for (std::size_t k = 0; k < bufs.size(); ++k) {
    bufs[k].resize(1 + (i * 131 + k * 977) % 20000);
    for (std::size_t j = 0; j < bufs[k].size(); ++j) bufs[k][j] = static_cast<std::int32_t>(me * 7 + static_cast<int>(j));
    rs.push_back(comm.iall_reduce(tutti::view(bufs[k]), tutti::op::sum{}));
  }
  std::exception_ptr first;
  for (std::size_t k = 0; k < rs.size(); ++k) {
    try {
      rs[k].wait();
      if (first) {
        std::printf("rank %d: pending operation %zu of 4 completed after an earlier one failed\n", me, k);
        std::fflush(stdout);
        std::_Exit(3);
      }
      for (std::size_t j = 0; j < bufs[k].size(); ++j)
        if (bufs[k][j] != static_cast<std::int32_t>(7 * p * (p - 1) / 2 + p * static_cast<int>(j))) {
          std::printf("WRONG RESULT rank %d pending step %llu operation %zu element %zu\n", me,
                      static_cast<unsigned long long>(i), k, j);
          std::fflush(stdout);
          std::_Exit(3);
        }
    } catch (const tutti::error& e) {
      if (!first) first = std::current_exception();
      if (std::string(e.what()).find("rank " + std::to_string(victim)) == std::string::npos) {
        std::printf("rank %d: pending operation %zu of 4 failed without naming rank %d: %s\n", me, k, victim, e.what());
        std::fflush(stdout);
        std::_Exit(3);
      }
    }
  }
  if (first) std::rethrow_exception(first);
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--plan") {
    const plan p = make_plan(std::strtoull(argv[2], nullptr, 0));
    std::printf("np=%d signal=%s victim=%d at=%d delay_us=%d port=%d\n", p.np, p.sig == SIGKILL ? "KILL" : "STOP",
                p.victim, p.at, p.delay_us, free_port());
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "--bind-port") {
    const int fd = bound_socket(std::atoi(argv[2]));
    if (fd >= 0) ::close(fd);
    return fd >= 0 ? 0 : 1;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s --plan SEED | --bind-port PORT | SEED (under tuttirun)\n", argv[0]);
    return 2;
  }
  ::signal(SIGTERM, SIG_IGN);  // outlive tuttirun's SIGTERM (sent when the victim dies) long enough to report
  const std::uint64_t seed = std::strtoull(argv[1], nullptr, 0);
  const plan p = make_plan(seed);
  auto comm = tutti::communicator<transport>::from_env();
  std::set<std::uint64_t> sockets;  // the tcp mesh's, which the failure must close
#ifdef TUTTI_FAULT_TCP
  sockets = tutti::test::mesh_sockets(comm.transport());
#endif
  if (comm.size() != p.np) {
    std::printf("seed %llu plans %d ranks, the job has %d\n", static_cast<unsigned long long>(seed), p.np, comm.size());
    return 2;
  }
  const double timeout_s = std::strtod(std::getenv("TUTTI_TIMEOUT") ? std::getenv("TUTTI_TIMEOUT") : "300", nullptr);
  using clock = std::chrono::steady_clock;
  std::uint64_t i = 0;
  step s{};
  auto entered = clock::now();
  try {
    for (;; ++i) {
      if (comm.rank() == p.victim && i == static_cast<std::uint64_t>(p.at))
        std::thread([&] {
          std::this_thread::sleep_for(std::chrono::microseconds(p.delay_us));
          ::kill(::getpid(), p.sig);  // SIGKILL and SIGSTOP act on the whole process
        }).detach();
      if (i > static_cast<std::uint64_t>(p.at) + 100000) {
        std::printf("rank %d: no failure seen in 100000 collectives after the victim's signal\n", comm.rank());
        return 3;
      }
      entered = clock::now();
      if (i % 4 == 3) {  // four operations pending at once: every one must fail naming the victim
        pending_step(comm, i, p.victim);
        continue;
      }
      s = make_step(seed, i, comm.size());
      if (auto o = run_step(comm, s, i); !o.wrong.empty()) {
        std::printf("WRONG RESULT rank %d collective %llu (%s): %s\n", comm.rank(),
                    static_cast<unsigned long long>(i), s.describe().c_str(), o.wrong.c_str());
        return 3;
      }
    }
  } catch (const tutti::error& e) {
    const double took = std::chrono::duration<double>(clock::now() - entered).count();
    const bool kind_ok = dynamic_cast<const tutti::peer_lost*>(&e) || dynamic_cast<const tutti::timeout_error*>(&e);
    const bool names = std::string(e.what()).find("rank " + std::to_string(p.victim)) != std::string::npos;
    const bool in_time = took <= timeout_s + 2.0;
    const int fds = tutti::test::transport_descriptors(sockets);  // the shm segment, the mesh's sockets
    // A victim that runs on (continued instead of killed) must not pass for a survivor.
    std::printf("%s rank %d in collective %llu (%s) after %.3f s (bound %.1f s): %s [%s, names rank %d: %s, "
                "in time: %s, transport fds: %d]\n",
                comm.rank() == p.victim ? "VICTIM ran on:" : "survivor", comm.rank(), static_cast<unsigned long long>(i),
                s.describe().c_str(), took, timeout_s + 2.0, e.what(),
                kind_ok ? "expected kind" : "UNEXPECTED kind", p.victim, names ? "yes" : "NO", in_time ? "yes" : "NO",
                fds);
    std::fflush(stdout);
    const bool ok = kind_ok && names && in_time && fds == 0 && comm.rank() != p.victim;
    if (ok && shrink_mode()) {
      const int rc = carry_on(comm, p, seed);
      std::fflush(stdout);
      return rc;
    }
    return ok ? 1 : 3;
  }
}
