// The consumer project's program: an all_reduce on 3 in-process ranks. Exit status 0 iff every
// rank got the right sum.
#include <tutti/tutti.hpp>

#include <atomic>
#include <cstdio>
#include <vector>

int main() {
  constexpr int ranks = 3;
  std::atomic<int> correct{0};
  try {
    tutti::inproc::run(ranks, [&](auto& comm) {
      std::vector<int> v(100, comm.rank() + 1);
      comm.all_reduce(tutti::view(v), tutti::op::sum{});
      bool ok = true;
      for (int x : v) ok = ok && x == 1 + 2 + 3;
      if (ok) ++correct;
    });
  } catch (const tutti::error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  std::printf("consumer: %d of %d ranks correct\n", correct.load(), ranks);
  return correct == ranks ? 0 : 1;
}
