// Must NOT compile: a communicator whose algorithm is recursive_doubling has no gather.
#include <tutti/tutti.hpp>
#include <vector>

int main() {
  tutti::inproc::run<tutti::algo::recursive_doubling>(2, [](auto& comm) {
    std::vector<int> in(1), out(2);
    comm.gather(tutti::view(in), tutti::view(out), 0);
  });
}
