/// \file
/// The job's shape from the environment, in this order: `TUTTI_*`, then torchrun's (`RANK`,
/// `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), then Open MPI's
/// (`OMPI_COMM_WORLD_*`), Slurm's (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, ...) and PMI's
/// (`PMI_RANK`, `PMI_SIZE`). A missing, malformed or contradictory value raises `config_error`
/// naming the variable.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"

namespace tutti {

/// Who this process is in the job.
struct job_env {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  ///< empty when unknown
  int master_port = 0;      ///< 0 when unknown
  std::string job_id;       ///< distinguishes concurrent jobs of one user on one host
  std::string source;       ///< which convention the values came from, for messages

  /// Reads the environment (see the file comment).
  static job_env from_env();
};

namespace detail {

TUTTI_COLD TUTTI_DECL std::optional<long> env_int(const char* name, long lo, long hi);

/// The first convention that names a rank wins; later ones may not contradict it.
struct env_convention {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

inline constexpr env_convention conventions[] = {
    {"TUTTI_*", "TUTTI_RANK", "TUTTI_WORLD_SIZE", "TUTTI_LOCAL_RANK", "TUTTI_LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

}  // namespace detail

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/bootstrap/env.ipp"
#endif
