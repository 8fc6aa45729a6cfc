// Communicator start-up over tutti::shm: the time to make one (the rendezvous, mapping and
// pre-faulting the segment, the single-copy probe and its speed vote), run one all_reduce of one
// float and destroy it, as a job pays it each time it makes a communicator (split, elastic
// restarts, a test suite's fresh communicator per case). Run under a launcher:
//   tuttirun --nproc-per-node=2 tutti_bench_startup [-n 40]
// Rank 0 prints the first communicator's time (it also times the speed vote, once per peer
// process) and the best and mean of the others.
#include <tutti/tutti.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

int main(int argc, char** argv) try {
  int n = 40;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string_view(argv[i]) == "-n") n = std::max(2, std::atoi(argv[i + 1]));
  const tutti::job_env job = tutti::job_env::from_env();
  const auto opt = tutti::shm_options::from_env(job.world_size);
  double first = 0, best = 1e9, total = 0;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      tutti::communicator<tutti::shm> comm(tutti::shm::create(job.rank, job.world_size,
                                                              job.job_id + ".startup." + std::to_string(i), opt,
                                                              std::chrono::seconds(30)));
      float x = 1;
      comm.all_reduce(tutti::view(&x, 1));
      if (x != static_cast<float>(job.world_size)) throw std::runtime_error("all_reduce gave a wrong sum");
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0) first = s;
    else {
      best = std::min(best, s);
      total += s;
    }
  }
  if (job.rank == 0)
    std::printf("shm start-up at %d ranks (create, one all_reduce, destroy): first %.2f ms, then best %.2f ms, "
                "mean %.2f ms over %d\n",
                job.world_size, first * 1e3, best * 1e3, total / (n - 1) * 1e3, n - 1);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tutti_bench_startup: %s\n", e.what());
  return 1;
}
