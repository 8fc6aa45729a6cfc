/// \file
/// Growing a tcp job (`communicator::grow`): new processes join a running world through its
/// store, which rank 0 serves (MASTER_ADDR:MASTER_PORT for a world started by a launcher; after
/// a shrink, the coordinator's: `tcp::store_address()`).
///
/// - A joiner (`TUTTI_JOIN=1`, with the job's MASTER_ADDR, MASTER_PORT and TUTTI_JOB_TOKEN; a
///   wrong token is refused by the store) takes a ticket (`add` on "tutti/join/tickets"), signs
///   in under "tutti/join/<ticket>", and waits for its answer: its rank, the new world size and
///   job id.
/// - The world's ranks call `grow(n)` at a point of their choosing (the communicator first agrees
///   on n). Rank 0 waits for the next n tickets, answers each joiner (ranks P, P+1, ... in ticket
///   order) and publishes the new job under "tutti/grow/<job id>/<g>" for the others.
/// - Everyone then runs the start-up of the new job (`connect_all`, as a successor: keys under
///   the new job id, the same store, kept by rank 0), the old ranks keeping their numbers.
///
/// The old world stays usable. Tickets are handed out first come, first served: a joiner that
/// arrives between two grows joins the next one.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/transport/tcp/sockets.hpp"
#include "tutti/transport/tcp/startup.hpp"

namespace tutti::detail::tcp_impl {

inline std::string ticket_key(long long t) { return "tutti/join/" + std::to_string(t); }

/// "world job_id" (a joiner's answer is "rank world job_id").
struct grown_job {
  int rank = -1, world = 0;
  std::string job_id;
};

TUTTI_DECL grown_job parse_grown(const std::string& text, bool with_rank, const std::string& what);

inline std::string store_host(const job_env& job) { return job.master_addr.empty() ? "127.0.0.1" : job.master_addr; }

/// The old world's side of a grow by `joiners` (see the file comment).
std::shared_ptr<connections> grow_world(connections& w, int joiners, std::chrono::milliseconds timeout);

/// A joiner's side: a ticket, the answer, the start-up (see the file comment).
std::shared_ptr<connections> join_world(const config& cfg, const tcp_options& opt, const std::string& token);

}  // namespace tutti::detail::tcp_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/tcp/grow.ipp"
#endif
