// Overlap of Open MPI's MPI_Iallreduce with work (see ../overlap.hpp): MPI_Iallreduce, the work
// (no MPI call during it), MPI_Wait. Run: mpirun -np 2 [--mca btl self,vader|self,tcp] tutti_peer_mpi_overlap
#include <mpi.h>

#include "../overlap.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const auto o = overlap_bench::parse(argc, argv);
  overlap_bench::run(
      o, rank, "Open MPI",
      [](float* p, std::size_t n) {
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, p, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
        return r;
      },
      [](MPI_Request r) { MPI_Wait(&r, MPI_STATUS_IGNORE); },
      [](double x) {
        double y = 0;
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return y;
      },
      [] { MPI_Barrier(MPI_COMM_WORLD); });
  MPI_Finalize();
  return 0;
}
