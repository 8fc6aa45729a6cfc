// Must NOT compile: a device view given to a communicator whose transport's memory is the host's
// (its schedules would dereference device memory on the CPU). ctest checks the compiler's message.
#include <tutti/tutti.hpp>

int main() {
  tutti::inproc::run(2, [](auto& comm) {
    float* d = nullptr;  // device memory, say from cudaMalloc
    comm.all_reduce(tutti::device_view(d, 16));
  });
}
