/// \file
/// Growing an shm job (`communicator::grow`). While its ranks are in `grow(n)`, rank 0 listens
/// on a second abstract socket, "tutti.<uid>.<job id>.join" (the job id the world started with,
/// kept through grows and shrinks). A joiner (`TUTTI_JOIN=1`, the job's TUTTI_JOB_ID or
/// MASTER_PORT and TUTTI_JOB_TOKEN) connects to it, retrying until rank 0 listens, and sends its
/// token; rank 0 takes the first n whose token and user are the job's, in the order they come,
/// and answers each with its rank (after the old ones), the new world size, the new job id and
/// the segment's sizes. A wrong token is answered with a refusal. Then the old ranks and the
/// joiners start the new job's segment as at start-up (`map_segment`); the old one stays usable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "tutti/detail/attributes.hpp"
#include "tutti/transport/shm/options.hpp"

namespace tutti::detail::shm_impl {

inline constexpr std::uint64_t join_magic = 0x74757474692d6a6eull;  // "tutti-jn"

struct join_hello {
  std::uint64_t magic = join_magic;
  std::int32_t pid = 0;
  std::uint32_t token_bytes = 0;
  char token[256] = {};
};

struct join_answer {
  std::uint64_t magic = join_magic;
  std::int32_t status = 0;  // 0: in; 1: refused (message)
  std::int32_t rank = -1, world = 0;
  std::uint64_t ring_bytes = 0, window_bytes = 0, arena_bytes = 0;
  std::int32_t single_copy = 0;
  char job_id[320] = {};
  char message[200] = {};
};

TUTTI_DECL std::string join_name(const std::string& base_job_id);

/// Rank 0's side: takes `joiners` joiners by the deadline and answers each; returns their pids.
TUTTI_COLD TUTTI_DECL void take_joiners(const std::string& base, const std::string& token, int old_world, int joiners,
                                        const std::string& new_job, const shm_options& opt,
                                        std::chrono::milliseconds timeout);

/// A joiner's side: its rank, the new world size and job id, and the segment's options.
struct joined {
  int rank = -1, world = 0;
  std::string job_id;
  shm_options opt;
};

TUTTI_COLD TUTTI_DECL joined ask_to_join(const std::string& base, const std::string& token,
                                         std::chrono::milliseconds timeout);

}  // namespace tutti::detail::shm_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/grow.ipp"
#endif
