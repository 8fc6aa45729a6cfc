// The Open MPI peer of shm_allreduce.cpp: the same sweep with MPI_Allreduce.
//   mpirun -np 2 tutti_peer_mpi_allreduce [-b 8] [-e 67108864] [-f 2] [-t 0.25]
#include <mpi.h>

#include "../allreduce_sweep.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const auto opt = tutti_bench::parse(argc, argv);
  tutti_bench::run(
      opt, rank, size, "Open MPI",
      [&](float* in, float* out, std::size_t n) {
        MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      },
      [&](double x) {
        double m = 0;
        MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return m;
      },
      [&] { MPI_Barrier(MPI_COMM_WORLD); });
  MPI_Finalize();
  return 0;
}
