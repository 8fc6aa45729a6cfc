// What the peers of a failing process learn, across processes (run by last_words.sh under
// tuttirun, over shm and, with TUTTI_LAST_WORDS_TCP, tcp):
//   usage  rank 1 makes a call that can never work (a root that is not a rank) and gets its
//          usage_error before any traffic; the others, in their all_reduce, get that
//          usage_error too, naming rank 1 first and quoting its reason, at once.
//   cycle  ranks 0 and 1 each send 400 KB to the other before receiving (more than the links
//          hold): a wait cycle nothing can break, reported as mismatch_error as soon as it is
//          seen, long before the (100 s) deadline; the other ranks get it too.
// Each rank prints "last words verdict rank R after S s: as expected|UNEXPECTED: <what>" and
// exits 0 when all is as expected.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <tutti/tutti.hpp>
#include <vector>

#ifdef TUTTI_LAST_WORDS_TCP
#include <tutti/transport/tcp.hpp>
using transport = tutti::tcp;
#else
using transport = tutti::shm;
#endif

namespace {
bool contains(const std::string& s, const std::string& n) { return s.find(n) != std::string::npos; }
}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const std::string scenario = argc > 1 ? argv[1] : "usage";
  auto comm = tutti::communicator<transport>::from_env();
  comm.set_timeout(100s);
  std::vector<float> v(1000, 1.0f);
  comm.all_reduce(tutti::view(v));
  const auto t0 = std::chrono::steady_clock::now();
  std::string what = "nothing raised";
  bool expected = false;
  try {
    if (scenario == "usage") {
      if (comm.rank() == 1) {
        try {
          comm.broadcast(tutti::view(v), comm.size() + 98);
        } catch (const tutti::usage_error& e) {
          what = e.what();
          expected = true;
        }
      } else {
        comm.all_reduce(tutti::view(v));
        comm.barrier();
      }
    } else if (scenario == "cycle") {
      std::vector<char> out(400000, 'x'), in(400000);
      if (comm.rank() < 2) {
        const int other = 1 - comm.rank();
        comm.send(tutti::view(out), other, 9);
        comm.recv(tutti::view(in), other, 9);
      }
      comm.barrier();
    }
  } catch (const tutti::mismatch_error& e) {
    what = e.what();
    // Ranks 0 and 1 find the cycle; the others get their mismatch_error, naming one of them first.
    expected = scenario == "cycle" && contains(what, "cycle") && (comm.rank() < 2 || e.origin() >= 0);
  } catch (const tutti::usage_error& e) {
    what = e.what();
    expected = scenario == "usage" && comm.rank() != 1 && e.origin() == 1 &&
               what.rfind("rank 1 failed with usage_error, so all_reduce", 0) == 0 && contains(what, "broadcast") &&
               contains(what, std::to_string(comm.size() + 98));
  } catch (const tutti::peer_lost& e) {
    what = e.what();
    expected = scenario == "cycle" && (comm.rank() >= 2 || contains(what, "cycle"));
  } catch (const tutti::error& e) {
    what = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool ok = expected && s < 50;
  std::printf("last words verdict rank %d after %.2f s: %s: %s\n", comm.rank(), s, ok ? "as expected" : "UNEXPECTED",
              what.c_str());
  std::fflush(stdout);
  return ok ? 0 : 1;
}
