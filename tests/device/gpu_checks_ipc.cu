// The checks of gpu_checks.hpp over tutti::cuda_ipc (a translation unit of its own: nvcc builds the two
// transports' instantiations in parallel).
#include <tutti/transport/cuda_ipc.hpp>
#include <tutti/tutti.hpp>

#include "gpu_checks.hpp"

namespace tutti_gpu_tests {
void check_everything(tutti::communicator<tutti::cuda_ipc>& comm) { everything(comm); }
}  // namespace tutti_gpu_tests
