// Must NOT compile: ring has no all_to_all schedule. ctest checks the compiler's message.
#include <tutti/tutti.hpp>
#include <vector>

int main() {
  tutti::inproc::run(2, [](auto& comm) {
    std::vector<int> in(4), out(4);
    comm.all_to_all(tutti::view(in), tutti::view(out), tutti::algo::ring{});
  });
}
