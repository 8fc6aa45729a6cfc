// The MPI twin of bench/call_cost.cpp: the same 8-byte calls (one double per rank's block, the
// reductions in place), counted by bench/call_cost.sh --mpi under callgrind.
// Usage, under mpirun: mpi_call_cost <collective> <calls>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string what = argc > 1 ? argv[1] : "all_reduce";
  const int calls = argc > 2 ? std::atoi(argv[2]) : 1000;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const auto p = static_cast<std::size_t>(size);
  std::vector<double> v(1, 1.0), all(p, 1.0), other(p, 0.0);
  const auto w = MPI_COMM_WORLD;
  auto run = [&](auto&& call) {  // chosen once: callgrind counts inside the MPI call only, anyway
    for (int i = 0; i < calls; ++i) {
      v[0] = 1.0;
      call();
    }
  };
  if (what == "all_reduce") run([&] { MPI_Allreduce(MPI_IN_PLACE, v.data(), 1, MPI_DOUBLE, MPI_SUM, w); });
  else if (what == "broadcast") run([&] { MPI_Bcast(v.data(), 1, MPI_DOUBLE, 0, w); });
  else if (what == "reduce")
    run([&] { MPI_Reduce(rank == 0 ? MPI_IN_PLACE : v.data(), v.data(), 1, MPI_DOUBLE, MPI_SUM, 0, w); });
  else if (what == "all_gather") run([&] { MPI_Allgather(v.data(), 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, w); });
  else if (what == "gather") run([&] { MPI_Gather(v.data(), 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, w); });
  else if (what == "scatter") run([&] { MPI_Scatter(all.data(), 1, MPI_DOUBLE, v.data(), 1, MPI_DOUBLE, 0, w); });
  else if (what == "all_to_all") run([&] { MPI_Alltoall(all.data(), 1, MPI_DOUBLE, other.data(), 1, MPI_DOUBLE, w); });
  else if (what == "reduce_scatter")
    run([&] { MPI_Reduce_scatter_block(all.data(), v.data(), 1, MPI_DOUBLE, MPI_SUM, w); });
  else if (what == "barrier") run([&] { MPI_Barrier(w); });
  else {
    std::fprintf(stderr, "mpi_call_cost: unknown collective %s\n", what.c_str());
    MPI_Abort(w, 2);
  }
  MPI_Finalize();
  return 0;
}
