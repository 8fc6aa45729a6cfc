// Must NOT compile: the mesh has axes "dp" and "tp", and the program asks for "pt". ctest checks
// that the compiler's message says so and names "pt".
#include <tutti/group/mesh.hpp>
#include <tutti/tutti.hpp>

int main() {
  tutti::inproc::run(4, [](tutti::communicator<tutti::inproc>& comm) {
    auto m = tutti::mesh<tutti::axis<"dp">, tutti::axis<"tp">>(comm, {2, 2});
    m.axis<"pt">().barrier();
  });
}
