// One all_reduce of float, sum, over shm, with the ring algorithm only (no automatic).
#include <tutti/tutti.hpp>
#include <vector>
int main() {
  auto comm = tutti::communicator<tutti::shm, tutti::algo::ring>::from_env();
  std::vector<float> v(1024);
  comm.all_reduce(tutti::view(v));
}
