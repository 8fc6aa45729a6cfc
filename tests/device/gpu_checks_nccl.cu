// The checks of gpu_checks.hpp over tutti::nccl (a translation unit of its own: nvcc builds the two
// transports' instantiations in parallel).
#include <tutti/transport/nccl.hpp>
#include <tutti/tutti.hpp>

#include "gpu_checks.hpp"

namespace tutti_gpu_tests {
void check_everything(tutti::communicator<tutti::nccl>& comm) { everything(comm); }
}  // namespace tutti_gpu_tests
