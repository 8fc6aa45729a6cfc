// All nine uniform collectives, float (sum where there is an op), over shm, automatic algorithm.
#include <tutti/tutti.hpp>
#include <vector>
int main() {
  auto comm = tutti::communicator<tutti::shm>::from_env();
  const std::size_t p = static_cast<std::size_t>(comm.size());
  std::vector<float> v(1024), out(1024), big(1024 * p), big2(1024 * p);
  comm.broadcast(tutti::view(v), 0);
  comm.reduce(tutti::view(v), 0);
  comm.all_reduce(tutti::view(v));
  comm.gather(tutti::view(v), tutti::view(big), 0);
  comm.all_gather(tutti::view(v), tutti::view(big));
  comm.scatter(tutti::view(big), tutti::view(out), 0);
  comm.all_to_all(tutti::view(big), tutti::view(big2));
  comm.reduce_scatter(tutti::view(big), tutti::view(out));
  comm.barrier();
}
