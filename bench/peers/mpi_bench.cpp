// The MPI peers of tutti-bench: every collective through MPI's C API, algorithm "native"
// (whatever the MPI library's own selection picks), with peer_bench.hpp's sizes, timing, check
// and CSV. One source, two programs: tutti_peer_mpi_bench built against the MPI that FindMPI
// finds (Open MPI on Debian), tutti_peer_mpich_bench against MPICH (Debian's mpicxx.mpich); the
// CSV's library column is "openmpi" or "mpich", from the mpi.h it was compiled with.
//   mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -np 3 tutti_peer_mpi_bench
//          --collective all -b 8 -e 1M -c 1 --csv mpi.csv
//   mpiexec.mpich -n 3 tutti_peer_mpich_bench --collective all -b 8 -e 1M -c 1 --csv mpich.csv
// Transport column: --transport, else a guess from the environment: Open MPI: tcp when the btl
// list mpirun passes down (OMPI_MCA_btl) names tcp and not vader, shm otherwise (vader, Open MPI's
// shared-memory btl, is its default between ranks of one node); MPICH (ch4:ucx on Debian): tcp
// when MPIR_CVAR_NOLOCAL=1 and UCX_TLS names tcp (bench/compare.sh's tcp settings), else shm.
// Placements: all native. Broadcast has one buffer in MPI: "out of place" is the root's memcpy
// into the output followed by MPI_Bcast on it, what an MPI user does. MPI_IN_PLACE leaves
// reduce_scatter's result at the front of the buffer (peer_bench.hpp follows it).
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "peer_bench.hpp"

namespace {

using tutti_peers::collective;

#if defined(MPICH_VERSION)
constexpr const char* library_name = "mpich";
constexpr const char* program = "tutti_peer_mpich_bench";
#else
constexpr const char* library_name = "openmpi";
constexpr const char* program = "tutti_peer_mpi_bench";
#endif

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else return MPI_INT64_T;
}

MPI_Op mpi_op(tutti_peers::reduce_op op) {
  switch (op) {
    case tutti_peers::reduce_op::sum: return MPI_SUM;
    case tutti_peers::reduce_op::prod: return MPI_PROD;
    case tutti_peers::reduce_op::min: return MPI_MIN;
    case tutti_peers::reduce_op::max: return MPI_MAX;
  }
  return MPI_SUM;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string(what) + ": " + std::string(msg, static_cast<std::size_t>(len)));
}

class mpi_backend {
 public:
  static constexpr bool reduce_scatter_in_place_at_front = true;

  mpi_backend(int rank, std::string transport) : rank_(rank), transport_(std::move(transport)) {}

  const char* library() const { return library_name; }
  const char* transport() const { return transport_.c_str(); }
  std::vector<std::string> algorithms(collective) const { return {"native"}; }
  bool in_place(collective, const std::string&) const { return true; }

  template <class T>
  void run(const std::string&, const tutti_peers::call<T>& k) {
    const MPI_Datatype t = mpi_type<T>();
    const int n = static_cast<int>(k.count);
    const void* in = k.in_place ? MPI_IN_PLACE : static_cast<const void*>(k.in);
    const bool root = rank_ == k.root;
    switch (k.coll) {
      case collective::broadcast:
        if (!k.in_place && root) std::memcpy(k.out, k.in, k.count * sizeof(T));
        check(MPI_Bcast(k.out, n, t, k.root, MPI_COMM_WORLD), "MPI_Bcast");
        break;
      case collective::reduce:  // MPI_IN_PLACE at the root only
        check(MPI_Reduce(k.in_place && !root ? static_cast<const void*>(k.in) : in, k.out, n, t, mpi_op(k.op), k.root,
                         MPI_COMM_WORLD), "MPI_Reduce");
        break;
      case collective::all_reduce:
        check(MPI_Allreduce(in, k.out, n, t, mpi_op(k.op), MPI_COMM_WORLD), "MPI_Allreduce");
        break;
      case collective::gather:
        check(MPI_Gather(k.in_place && !root ? static_cast<const void*>(k.in) : in, n, t, k.out, n, t, k.root,
                         MPI_COMM_WORLD), "MPI_Gather");
        break;
      case collective::all_gather:
        check(MPI_Allgather(in, n, t, k.out, n, t, MPI_COMM_WORLD), "MPI_Allgather");
        break;
      case collective::scatter:
        check(MPI_Scatter(k.in, n, t, k.in_place && root ? MPI_IN_PLACE : static_cast<void*>(k.out), n, t, k.root,
                          MPI_COMM_WORLD), "MPI_Scatter");
        break;
      case collective::all_to_all:
        check(MPI_Alltoall(in, n, t, k.out, n, t, MPI_COMM_WORLD), "MPI_Alltoall");
        break;
      case collective::reduce_scatter:
        check(MPI_Reduce_scatter_block(in, k.in_place ? const_cast<T*>(k.in) : k.out, n, t, mpi_op(k.op), MPI_COMM_WORLD),
              "MPI_Reduce_scatter_block");
        break;
      case collective::barrier:
        check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        break;
    }
  }

  double max_of(double x) {
    double m = 0;
    check(MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce(max)");
    return m;
  }
  double sum_of(double x) {
    double m = 0;
    check(MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce(sum)");
    return m;
  }
  void barrier() { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 private:
  int rank_;
  std::string transport_;
};

std::string guess_transport() {
#if defined(MPICH_VERSION)
  const std::string tls = env_or("UCX_TLS", "");
  return env_or("MPIR_CVAR_NOLOCAL", "0") == "1" && tls.find("tcp") != std::string::npos ? "tcp" : "shm";
#else
  const std::string b = env_or("OMPI_MCA_btl", "");
  return b.find("tcp") != std::string::npos && b.find("vader") == std::string::npos ? "tcp" : "shm";
#endif
}

/// What decides the path between ranks, for the header line.
std::string path_settings() {
#if defined(MPICH_VERSION)
  std::string s;
  for (const char* v : {"MPIR_CVAR_NOLOCAL", "UCX_TLS", "UCX_NET_DEVICES", "UCX_TCP_NODELAY", "MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE"})
    if (std::getenv(v)) s += std::string(s.empty() ? "" : " ") + v + "=" + std::getenv(v);
  return s.empty() ? "as shipped (no MPIR_CVAR_/UCX_ settings)" : s;
#else
  return "btl " + env_or("OMPI_MCA_btl", "(default)");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rc = 0;
  try {
    const auto o = tutti_peers::parse(argc, argv);
    if (o.algo != "all" && o.algo != "native")
      throw tutti_peers::usage_error(std::string("--algo: ") + library_name + " has only native, got '" + o.algo + "'");
    mpi_backend b(rank, o.transport.empty() ? guess_transport() : o.transport);
    if (rank == 0) {
      char version[MPI_MAX_LIBRARY_VERSION_STRING];
      int len = 0;
      MPI_Get_library_version(version, &len);
      std::string v(version, static_cast<std::size_t>(len));
      std::fprintf(o.csv == "-" ? stderr : stdout, "# %s", v.substr(0, v.find('\n')).c_str());
      std::fprintf(o.csv == "-" ? stderr : stdout, ", %s\n", path_settings().c_str());
    }
    tutti_peers::run_all(o, rank, size, b);
  } catch (const tutti_peers::usage_error& e) {
    if (rank == 0) std::fprintf(stderr, "%s: %s\n", program, e.what());
    rc = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: %s\n", program, rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
