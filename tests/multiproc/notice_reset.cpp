// The failure notice survives a reset: rank 0 fails while its socket from rank 1 still holds
// bytes it never read (a message of rank 1's) and its socket to rank 1 still holds bytes rank 1
// has not read yet (the tail of a message of rank 0's, then the notice). Closing such a socket sends a
// reset, which throws away what rank 0's kernel had not sent: the rest of the message and the
// notice. tcp::fail shuts the sockets for writing and reads them dry until rank 1 has everything,
// so rank 1 receives the message whole, then raises peer_lost quoting rank 0's reason.
//
//   tuttirun --nproc-per-node=2 tutti_notice_reset [rounds]      (prints "notice verdict: ...")
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>
#include <tutti/transport/tcp.hpp>
#include <tutti/tutti.hpp>
#include <vector>

int main(int argc, char** argv) {
  auto comm = tutti::communicator<tutti::tcp>::from_env();
  if (comm.size() != 2) {
    std::printf("notice verdict: needs 2 ranks, has %d\n", comm.size());
    return 2;
  }
  (void)argc;
  (void)argv;
  // 64 KiB rank 0 never reads; 16 MiB it sends, more than the kernels buffer: when its send
  // returns, megabytes of it still wait in rank 0's socket for rank 1 to read them.
  std::vector<int> unread(16 << 10), message(4 << 20);
  comm.barrier();
  if (comm.rank() == 0) {
    std::iota(message.begin(), message.end(), 7);
    comm.send(tutti::view(message), 1, 2);  // returns once the tail is in this rank's socket
    comm.abort();
    try {
      comm.barrier();  // fails: this rank is aborted, it tells rank 1 why and closes
      std::printf("notice verdict rank 0: the barrier after abort() returned\n");
      return 1;
    } catch (const tutti::error& e) {
      std::printf("notice verdict rank 0: failed as planned (%s)\n", e.what());
    }
    return 0;
  }
  comm.send(tutti::view(unread), 0, 1);  // into rank 0's buffers, never received
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 waits in its send meanwhile
  try {
    comm.recv(tutti::view(message), 0, 2);
  } catch (const tutti::error& e) {
    std::printf("notice verdict rank 1: WRONG: rank 0's message was cut off: %s\n", e.what());
    return 1;
  }
  for (std::size_t i = 0; i < message.size(); ++i)
    if (message[i] != static_cast<int>(i) + 7) {
      std::printf("notice verdict rank 1: WRONG: element %zu is %d\n", i, message[i]);
      return 1;
    }
  try {
    comm.barrier();
    std::printf("notice verdict rank 1: WRONG: the barrier returned\n");
    return 1;
  } catch (const tutti::peer_lost& e) {
    const bool quoted = std::string(e.what()).find("communicator::abort") != std::string::npos;
    std::printf("notice verdict rank 1: %s: %s\n", quoted ? "as expected" : "WRONG: the reason was lost", e.what());
    return quoted ? 0 : 1;
  } catch (const tutti::error& e) {
    std::printf("notice verdict rank 1: WRONG kind: %s\n", e.what());
    return 1;
  }
}
