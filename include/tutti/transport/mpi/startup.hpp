/// \file
/// How a `tutti::mpi` transport gets its communicator. `from_env` initialises MPI unless the
/// program did (and then finalises it at exit: `finalizer`) and checks the launcher's variables
/// against MPI's rank and size (`check_environment`); `create` duplicates a communicator under
/// the deadline; `sub` makes a sub-group's with `MPI_Comm_create_group`; `adopt` reads the new
/// communicator's rank, size and tag bound and whether this host has more ranks than cores
/// (`oversubscribed`), and makes MPI errors return.
///
/// Members of `tutti::mpi`, defined here out of its class (mpi/transport.hpp, which includes
/// this file at its end).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/transport/mpi/transport.hpp"

namespace tutti {

namespace detail::mpi_impl {

/// Finalises MPI at exit when tutti initialised it (a function-local static, made right after
/// `MPI_Init_thread`, so communicators kept in statics made later are destroyed before it).
struct finalizer {
  ~finalizer() {
    int init = 0;
    MPI_Initialized(&init);
    if (init && !finalized()) MPI_Finalize();
  }
};

/// More ranks on this host than cores, by the launcher's local size. (Not by this process's CPU
/// affinity: mpirun binds each rank to a core or a socket, which says nothing of the others.)
inline bool oversubscribed() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE"}) {
    const char* v = detail::getenv_nonempty(var);
    if (!v) continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);  // Slurm may say "2(x3)": the leading number is ours
    if (end != v) return n > static_cast<long>(std::max(1u, std::thread::hardware_concurrency()));
  }
  return false;
}

}  // namespace detail::mpi_impl

inline mpi mpi::from_env() {
  const config cfg = config::from_env();
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    if (detail::mpi_impl::finalized())
      throw usage_error("tutti::mpi::from_env: MPI was already finalized; it cannot be initialised again");
    int provided = 0;
    detail::mpi_impl::check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread",
                            "tutti::mpi::from_env");
    static detail::mpi_impl::finalizer at_exit;
    (void)at_exit;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  check_environment(rank, size);
  return create(MPI_COMM_WORLD, cfg.timeout);
}

inline mpi mpi::create(MPI_Comm parent, std::chrono::milliseconds timeout) {
  using namespace detail::mpi_impl;
  // MPI writes the new handle when the duplication completes, which after a timeout may be
  // never or later: the handle and the request live on the heap and are leaked in that case
  // (a non-blocking collective cannot be cancelled).
  auto pending = std::make_unique<std::pair<MPI_Comm, MPI_Request>>(MPI_COMM_NULL, MPI_REQUEST_NULL);
  check(MPI_Comm_idup(parent, &pending->first, &pending->second), "MPI_Comm_idup", "tutti::mpi");
  mpi t(std::make_shared<comm_state>(), 0);
  header h;
  h.fp.coll = collective::group;
  try {
    t.drive(wait_context{timeout, "start-up"}, h, no_notices, -1, "to duplicate the communicator with", [&] {
      int done = 0;
      check(MPI_Test(&pending->second, &done, MPI_STATUS_IGNORE), "MPI_Comm_idup", "tutti::mpi start-up");
      return done != 0;
    });
  } catch (...) {
    (void)pending.release();
    throw;
  }
  t.st_->comm = pending->first;
  t.adopt();
  return t;
}

inline mpi mpi::sub(std::span<const int> members, std::uint64_t context) const {
  using namespace detail::mpi_impl;
  const std::string where = "tutti::mpi::sub";
  MPI_Group parent, picked;
  check(MPI_Comm_group(st_->comm, &parent), "MPI_Comm_group", where);
  std::vector<int> ranks(members.begin(), members.end());
  const int rc = MPI_Group_incl(parent, static_cast<int>(ranks.size()), ranks.data(), &picked);
  MPI_Group_free(&parent);
  check(rc, "MPI_Group_incl", where);
  auto st = std::make_shared<comm_state>();
  const int rc2 = MPI_Comm_create_group(st_->comm, picked, static_cast<int>(context & 0x7fff), &st->comm);
  MPI_Group_free(&picked);
  check(rc2, "MPI_Comm_create_group", where);
  mpi t(std::move(st), context);
  t.adopt();
  return t;
}

inline void mpi::adopt() {
  using namespace detail::mpi_impl;
  const std::string where = "tutti::mpi";
  check(MPI_Comm_set_errhandler(st_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", where);
  // Point-to-point's own communicator (mpi/matching.hpp): every member is here, having just
  // made `comm` together.
  check(MPI_Comm_dup(st_->comm, &st_->p2p), "MPI_Comm_dup", where);
  check(MPI_Comm_set_errhandler(st_->p2p, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", where);
  check(MPI_Comm_rank(st_->comm, &rank_), "MPI_Comm_rank", where);
  check(MPI_Comm_size(st_->comm, &size_), "MPI_Comm_size", where);
  st_->oversubscribed = detail::mpi_impl::oversubscribed();
  void* ub = nullptr;
  int flag = 0;
  check(MPI_Comm_get_attr(st_->comm, MPI_TAG_UB, &ub, &flag), "MPI_Comm_get_attr", where);
  if (flag && ub) st_->tag_ub = *static_cast<int*>(ub);
}

inline void mpi::check_environment(int rank, int size) {
  const bool other_launcher =
      detail::getenv_nonempty("OMPI_COMM_WORLD_RANK") != nullptr || detail::getenv_nonempty("PMI_RANK") != nullptr;
  for (const auto& c : detail::conventions) {
    if (std::string_view(c.name) == "Slurm" && other_launcher) continue;
    const auto r = detail::env_int(c.rank, 0, 1L << 30), s = detail::env_int(c.size, 1, 1L << 30);
    auto says = [&](const char* var, long v, const char* what, int mpi_value) {
      return std::string("tutti::mpi: ") + var + "=" + std::to_string(v) + " (" + c.name + " convention) but MPI says " +
             what + " is " + std::to_string(mpi_value) +
             (size == 1 ? " (was the program started without mpirun/srun, as a singleton?)" : "");
    };
    if (s && *s != size) throw config_error(says(c.size, *s, "the world size", size));
    if (r && *r != rank) throw config_error(says(c.rank, *r, "this process's rank", rank));
  }
}

}  // namespace tutti
