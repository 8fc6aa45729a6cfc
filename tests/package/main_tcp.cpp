// The consumer project's tcp program: an all_reduce over tutti::tcp between 2 ranks, run as two
// threads of this process over loopback. Exit status 0 iff both ranks got the right sum.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <tutti/transport/tcp.hpp>
#include <tutti/tutti.hpp>
#include <vector>

int main() {
  // A free port for the store: bind port 0 and let it go.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  std::atomic<int> correct{0};
  auto rank = [&](int r) {
    try {
      tutti::job_env job;
      job.rank = job.local_rank = r;
      job.world_size = job.local_world_size = 2;
      job.master_addr = "127.0.0.1";
      job.master_port = ntohs(a.sin_port);
      job.job_id = "consumer";
      tutti::config cfg;
      cfg.timeout = std::chrono::seconds(20);
      tutti::communicator<tutti::tcp> comm(tutti::tcp::create(job, cfg, {}, "token"), {}, cfg);
      std::vector<int> v(1000, r + 1);
      comm.all_reduce(tutti::view(v));
      bool ok = true;
      for (int x : v) ok = ok && x == 3;
      if (ok) ++correct;
    } catch (const tutti::error& e) {
      std::fprintf(stderr, "consumer_tcp rank %d: %s\n", r, e.what());
    }
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  std::printf("consumer_tcp: %d of 2 ranks correct\n", correct.load());
  return correct == 2 ? 0 : 1;
}
