// Must NOT compile: two axes of one mesh named "tp". ctest checks the compiler's message.
#include <tutti/group/mesh.hpp>
#include <tutti/tutti.hpp>

int main() {
  tutti::inproc::run(4, [](tutti::communicator<tutti::inproc>& comm) {
    auto m = tutti::mesh<tutti::axis<"tp">, tutti::axis<"tp">>(comm, {2, 2});
    (void)m;
  });
}
