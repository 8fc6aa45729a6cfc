// MPI's point-to-point, OSU-style (see ../p2p.hpp), built against Open MPI (tutti_peer_mpi_p2p)
// and MPICH (tutti_peer_mpich_p2p): MPI_Send/MPI_Recv ping-pong, MPI_Isend/MPI_Irecv windows.
//   mpirun -np 2 [--mca btl self,vader|self,tcp] tutti_peer_mpi_p2p [--sizes ...] [--rounds 3]
#include <mpi.h>

#include "../p2p.hpp"

namespace {

struct mpi_ops {
  int me = 0;
  int rank() const { return me; }
  void send(char* p, std::size_t n, int peer, int tag) { MPI_Send(p, static_cast<int>(n), MPI_CHAR, peer, tag, MPI_COMM_WORLD); }
  void recv(char* p, std::size_t n, int peer, int tag) {
    MPI_Recv(p, static_cast<int>(n), MPI_CHAR, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  void window(std::vector<std::vector<char>>& bufs, std::size_t n, int peer, int tag, bool send) {
    std::vector<MPI_Request> reqs(bufs.size());
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      if (send) MPI_Isend(bufs[i].data(), static_cast<int>(n), MPI_CHAR, peer, tag, MPI_COMM_WORLD, &reqs[i]);
      else MPI_Irecv(bufs[i].data(), static_cast<int>(n), MPI_CHAR, peer, tag, MPI_COMM_WORLD, &reqs[i]);
    }
    MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  }
  void barrier() { MPI_Barrier(MPI_COMM_WORLD); }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  mpi_ops ops;
  MPI_Comm_rank(MPI_COMM_WORLD, &ops.me);
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string name(version, static_cast<std::size_t>(len));
  name = name.substr(0, name.find_first_of(",\n"));
  p2p_bench::run(ops, p2p_bench::parse(argc, argv), name.c_str());
  MPI_Finalize();
  return 0;
}
