/// \file
/// Definitions for tutti/bootstrap/env.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "tutti/bootstrap/env.hpp"

namespace tutti {
namespace detail {

TUTTI_COLD TUTTI_DECL std::optional<long> env_int(const char* name, long lo, long hi) {
  const char* v = getenv_nonempty(name);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (errno || end == v || *end != '\0')
    throw config_error(std::string(name) + "='" + v + "' is not an integer");
  if (x < lo || x > hi)
    throw config_error(std::string(name) + "=" + v + " is outside " + std::to_string(lo) + ".." +
                       std::to_string(hi));
  return x;
}

}  // namespace detail

TUTTI_COLD TUTTI_DECL job_env job_env::from_env() {
  using detail::env_int;
  constexpr long max_ranks = 1 << 20;
  job_env j;
  const detail::env_convention* found = nullptr;
  for (const auto& c : detail::conventions) {
    const auto r = env_int(c.rank, 0, max_ranks), s = env_int(c.size, 1, max_ranks);
    if (!r && !s) continue;
    if (!r) throw config_error(std::string(c.size) + " is set but " + c.rank + " is not (" + c.name + " convention)");
    if (!s) throw config_error(std::string(c.rank) + " is set but " + c.size + " is not (" + c.name + " convention)");
    if (!found) {
      found = &c;
      j.rank = static_cast<int>(*r);
      j.world_size = static_cast<int>(*s);
      j.source = c.name;
      if (j.rank >= j.world_size)
        throw config_error(std::string(c.rank) + "=" + std::to_string(j.rank) + " is not below " + c.size + "=" +
                           std::to_string(j.world_size));
      const auto lr = env_int(c.local_rank, 0, max_ranks);
      // Slurm's per-node task count may read "2(x3)"; only a plain number is used.
      std::optional<long> ls;
      try {
        ls = env_int(c.local_size, 1, max_ranks);
      } catch (const config_error&) {
        if (std::string_view(c.name) != "Slurm") throw;
      }
      j.local_rank = lr ? static_cast<int>(*lr) : j.rank;
      j.local_world_size = ls ? static_cast<int>(*ls) : (lr ? 0 : j.world_size);
      if (j.local_world_size == 0)
        throw config_error(std::string(c.local_rank) + " is set but " + c.local_size + " is not");
      if (j.local_rank >= j.local_world_size)
        throw config_error(std::string(c.local_rank) + "=" + std::to_string(j.local_rank) + " is not below " +
                           c.local_size + "=" + std::to_string(j.local_world_size));
      if (j.local_world_size > j.world_size)
        throw config_error(std::string(c.local_size) + "=" + std::to_string(j.local_world_size) + " exceeds " +
                           c.size + "=" + std::to_string(j.world_size));
    } else if (*r != j.rank || *s != j.world_size) {
      throw config_error(std::string("contradictory environment: ") + found->rank + "=" + std::to_string(j.rank) +
                         " " + found->size + "=" + std::to_string(j.world_size) + " but " + c.rank + "=" +
                         std::to_string(*r) + " " + c.size + "=" + std::to_string(*s));
    }
  }
  if (!found)
    throw config_error("no rank in the environment: set RANK and WORLD_SIZE (torchrun convention, as tuttirun does), "
                       "TUTTI_RANK and TUTTI_WORLD_SIZE, or run under mpirun/srun");
  if (const char* a = detail::getenv_nonempty("MASTER_ADDR")) j.master_addr = a;
  if (const auto p = env_int("MASTER_PORT", 1, 65535)) j.master_port = static_cast<int>(*p);
  if (const char* id = detail::getenv_nonempty("TUTTI_JOB_ID")) j.job_id = id;
  else if (j.master_port) j.job_id = "port" + std::to_string(j.master_port);
  else if (const char* o = detail::getenv_nonempty("OMPI_MCA_orte_ess_jobid")) j.job_id = std::string("ompi") + o;
  else if (const char* o2 = detail::getenv_nonempty("OMPI_MCA_ess_base_jobid")) j.job_id = std::string("ompi") + o2;
  else if (const char* s = detail::getenv_nonempty("SLURM_JOB_ID")) {
    j.job_id = std::string("slurm") + s;
    if (const char* st = detail::getenv_nonempty("SLURM_STEP_ID")) j.job_id += std::string(".") + st;
  } else if (const char* k = detail::getenv_nonempty("PMI_JOBID")) j.job_id = std::string("pmi") + k;
  if (j.job_id.empty() && j.world_size > 1)
    throw config_error("no job id: set TUTTI_JOB_ID or MASTER_PORT (tuttirun sets both) so that concurrent jobs "
                       "on this host cannot collide");
  if (j.job_id.size() > 64 || j.job_id.find_first_of("/\\ \t\n") != std::string::npos)
    throw config_error("TUTTI_JOB_ID='" + j.job_id + "': use at most 64 characters, no slashes or spaces");
  return j;
}

}  // namespace tutti
