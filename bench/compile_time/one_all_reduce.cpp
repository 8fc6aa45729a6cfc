// The newcomer's TU: one all_reduce of float, sum, over shm, automatic algorithm.
#include <tutti/tutti.hpp>
#include <vector>
int main() {
  auto comm = tutti::communicator<tutti::shm>::from_env();
  std::vector<float> v(1024);
  comm.all_reduce(tutti::view(v));
}
