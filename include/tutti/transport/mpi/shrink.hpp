/// \file
/// `mpi::shrink`: after a failure, the transport of the ranks still alive. With ULFM
/// (`MPIX_Comm_revoke` and `MPIX_Comm_shrink`: MPICH, Open MPI 5 built with it, which declares
/// them in <mpi-ext.h>) the survivors keep their order; elsewhere `usage_error` naming the MPI
/// and the ways out. A member of `tutti::mpi`, defined here out of its class (mpi/transport.hpp,
/// which includes this file at its end).
#pragma once

#include <mpi.h>
#if defined(OPEN_MPI) && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: ULFM's MPIX_Comm_shrink where it was built with it
#endif

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/error.hpp"
#include "tutti/transport/mpi/transport.hpp"

namespace tutti {

TUTTI_COLD inline mpi mpi::shrink(std::chrono::milliseconds timeout, std::vector<int>* kept) const {
  if (context_ != 0) throw usage_error("mpi shrink: call it on the world communicator, not on a group");
#if defined(MPIX_ERR_PROC_FAILED)
  using namespace detail::mpi_impl;
  const std::string where = "tutti::mpi::shrink";
  MPIX_Comm_revoke(st_->comm);  // every survivor leaves what it was waiting in
  MPI_Comm survivors = MPI_COMM_NULL;
  check(MPIX_Comm_shrink(st_->comm, &survivors), "MPIX_Comm_shrink", where);
  if (kept) {
    MPI_Group old_group, new_group;
    MPI_Comm_group(st_->comm, &old_group);
    MPI_Comm_group(survivors, &new_group);
    int n = 0;
    MPI_Comm_size(survivors, &n);
    std::vector<int> ranks(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) ranks[static_cast<std::size_t>(i)] = i;
    kept->assign(static_cast<std::size_t>(n), 0);
    MPI_Group_translate_ranks(new_group, n, ranks.data(), old_group, kept->data());
    MPI_Group_free(&old_group);
    MPI_Group_free(&new_group);
  }
  mpi t = create(survivors, timeout);
  MPI_Comm_free(&survivors);
  return t;
#else
  (void)timeout;
  (void)kept;
  throw usage_error("mpi shrink: this MPI has no ULFM (no MPIX_Comm_shrink; "
#if defined(OPEN_MPI)
                    "Open MPI " + std::to_string(OMPI_MAJOR_VERSION) + "." + std::to_string(OMPI_MINOR_VERSION) +
                    " was built without it"
#else
                    "its mpi.h does not declare it"
#endif
                    "), so the survivors of a failure cannot form a new communicator in this job: start it "
                    "again (tuttirun --max-restarts, or mpiexec again), or use tutti::shm or tutti::tcp, which "
                    "shrink");
#endif
}

}  // namespace tutti
