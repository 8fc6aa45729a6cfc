// Open MPI beside bench/fusion.cpp: one MPI_Allreduce of the whole, the small ones as
// MPI_Iallreduce + MPI_Waitall, and as blocking MPI_Allreduce.
//   mpirun -np 2 [--mca btl self,vader|self,tcp] tutti_peer_mpi_fusion [-k 256] [-s 4096] [-n 20]
#include <mpi.h>

#include <functional>
#include <utility>

#include "../fusion.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const auto o = fusion_bench::parse(argc, argv);
  using bufs = std::vector<std::vector<float>>;
  using step = std::function<void(bufs&, std::vector<float>&)>;
  auto all = [](std::vector<float>& x) {
    MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(x.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };
  std::vector<std::pair<std::string, step>> cases{
      {"one all_reduce of the whole", [&](bufs&, std::vector<float>& w) { all(w); }},
      {"MPI_Iallreduce + MPI_Waitall",
       [&](bufs& b, std::vector<float>&) {
         std::vector<MPI_Request> r(b.size());
         for (std::size_t i = 0; i < b.size(); ++i)
           MPI_Iallreduce(MPI_IN_PLACE, b[i].data(), static_cast<int>(b[i].size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r[i]);
         MPI_Waitall(static_cast<int>(r.size()), r.data(), MPI_STATUSES_IGNORE);
       }},
      {"blocking all_reduces",
       [&](bufs& b, std::vector<float>&) {
         for (auto& x : b) all(x);
       }},
  };
  fusion_bench::run(
      o, rank, "Open MPI", cases,
      [](double x) {
        double y = 0;
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return y;
      },
      [] { MPI_Barrier(MPI_COMM_WORLD); });
  MPI_Finalize();
  return 0;
}
