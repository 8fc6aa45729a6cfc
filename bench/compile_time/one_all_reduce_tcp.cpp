// One all_reduce of float, sum, over tcp (Asio), automatic algorithm.
#include <tutti/tutti.hpp>
#include <tutti/transport/tcp.hpp>
#include <vector>
int main() {
  auto comm = tutti::communicator<tutti::tcp>::from_env();
  std::vector<float> v(1024);
  comm.all_reduce(tutti::view(v));
}
