// Must NOT compile: a device view has no element access (host code cannot load or store through
// it). ctest checks the compiler's message.
#include <tutti/core/view.hpp>

int main() {
  float* d = nullptr;
  auto v = tutti::device_view(d, 16);
  return static_cast<int>(v[0]);
}
