// The consumer project's MPI program: an all_reduce over tutti::mpi between the ranks of an MPI
// job (mpiexec -n 2 ./consumer_mpi). Exit status 0 iff this rank got the right sum.
#include <cstdio>
#include <tutti/transport/mpi.hpp>
#include <tutti/tutti.hpp>
#include <vector>

int main() {
  try {
    auto comm = tutti::communicator<tutti::mpi>::from_env();
    const int n = comm.size();
    std::vector<int> v(1000, comm.rank() + 1);
    comm.all_reduce(tutti::view(v));
    bool ok = true;
    for (int x : v) ok = ok && x == n * (n + 1) / 2;
    std::printf("consumer_mpi: rank %d of %d %s\n", comm.rank(), n, ok ? "correct" : "WRONG");
    return ok ? 0 : 1;
  } catch (const tutti::error& e) {
    std::fprintf(stderr, "consumer_mpi: %s\n", e.what());
    return 1;
  }
}
