/// \file
/// Definitions for tutti/transport/tcp/grow.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <algorithm>
#include <sstream>

#include "tutti/transport/tcp/grow.hpp"

namespace tutti::detail::tcp_impl {

TUTTI_DECL grown_job parse_grown(const std::string& text, bool with_rank, const std::string& what) {
  std::istringstream in(text);
  grown_job g;
  if (with_rank) in >> g.rank;
  in >> g.world >> g.job_id;
  if (!in || g.world < 1 || g.job_id.empty() || g.job_id.size() > max_job_id)
    throw config_error("tcp grow: malformed " + what + " '" + text + "' in the store");
  return g;
}

TUTTI_COLD TUTTI_DECL std::shared_ptr<connections> grow_world(connections& w, int joiners,
                                                              std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  auto left = [&] { return std::max(net::left(deadline), std::chrono::milliseconds(1)); };
  if (w.job.master_port == 0)
    throw usage_error("tcp grow: this world has no store (a world of one rank started without MASTER_PORT): "
                      "joiners have nowhere to find it");
  if (w.world_rank == 0 && !w.server)  // a world of one starts no store: serve it now
    w.server = std::make_shared<store_server>(store_host(w.job), w.job.master_port, 0, w.token, w.job_id);
  store kv(store_host(w.job), w.job.master_port, -1, 0, w.token, timeout);
  const std::uint32_t g = ++w.grows;
  const std::string epoch_key = "tutti/grow/" + w.job_id + "/" + std::to_string(g);
  std::shared_ptr<store_server> server;
  std::string text;
  if (w.world_rank == 0) {
    std::vector<std::string> tickets;
    for (int i = 1; i <= joiners; ++i) tickets.push_back(ticket_key(w.joiners_taken + i));
    try {
      kv.wait(tickets, left());
    } catch (const timeout_error&) {
      const long long came = kv.add("tutti/join/tickets", 0) - w.joiners_taken;
      throw timeout_error("tcp grow: rank 0 waited " + std::to_string(timeout.count()) + " ms for " + std::to_string(joiners) +
                          " joiner(s), " + std::to_string(came) + " came (start them with TUTTI_JOIN=1 and this job's "
                          "MASTER_ADDR, MASTER_PORT and TUTTI_JOB_TOKEN: " + kv.where() + ")");
    }
    const std::string job_id = w.job_id + ".grow" + std::to_string(g);
    text = std::to_string(w.world_size + joiners) + " " + job_id;
    for (int i = 0; i < joiners; ++i)
      kv.set(ticket_key(w.joiners_taken + i + 1) + "/answer", std::to_string(w.world_size + i) + " " + text);
    kv.set(epoch_key, text);
    server = w.server;
  } else {
    text = kv.get(epoch_key, left());
  }
  const grown_job got = parse_grown(text, false, "grow record");
  if (got.world != w.world_size + joiners)
    throw mismatch_error("tcp grow: rank 0 grows the world to " + std::to_string(got.world) + " ranks, rank " +
                         std::to_string(w.world_rank) + " expected " + std::to_string(w.world_size + joiners));
  job_env job = w.job;
  job.master_addr = store_host(w.job);
  job.world_size = got.world;
  job.job_id = got.job_id;
  config cfg = w.cfg;
  cfg.timeout = timeout;
  tutti::detail::log(log_level::info, cfg, w.world_rank,
                     "tcp grow: the world of " + std::to_string(w.world_size) + " grows to " + std::to_string(got.world));
  auto grown = connect_all(job, cfg, w.opt, w.token, {std::move(server), true});
  grown->joiners_taken = w.joiners_taken + (w.world_rank == 0 ? joiners : 0);
  return grown;
}

TUTTI_COLD TUTTI_DECL std::shared_ptr<connections> join_world(const config& cfg, const tcp_options& opt,
                                                              const std::string& token) {
  job_env job;
  job.source = "TUTTI_JOIN";
  if (const char* a = getenv_nonempty("MASTER_ADDR")) job.master_addr = a;
  if (const auto p = env_int("MASTER_PORT", 1, 65535)) job.master_port = static_cast<int>(*p);
  if (job.master_port == 0)
    throw config_error("TUTTI_JOIN=1: a joiner needs the running job's MASTER_PORT (and MASTER_ADDR, TUTTI_JOB_TOKEN) "
                       "to find its store");
  store kv(store_host(job), job.master_port, -1, 0, token, cfg.timeout);  // a wrong token: config_error
  const long long t = kv.add("tutti/join/tickets", 1);
  kv.set(ticket_key(t), "waiting");
  tutti::detail::log(log_level::info, cfg, -1, "tcp join: ticket " + std::to_string(t) + " at " + kv.where());
  std::string answer;
  try {
    answer = kv.get(ticket_key(t) + "/answer", cfg.timeout);
  } catch (const timeout_error&) {
    throw timeout_error("tcp join: no grow() of the job at " + kv.where() + " took this joiner (ticket " +
                        std::to_string(t) + ") within " + std::to_string(cfg.timeout.count()) + " ms");
  }
  const grown_job got = parse_grown(answer, true, "joiner's answer");
  if (got.rank < 0 || got.rank >= got.world) throw config_error("tcp join: the store gave this joiner rank " + std::to_string(got.rank));
  job.master_addr = store_host(job);
  job.rank = got.rank;
  job.world_size = got.world;
  job.job_id = got.job_id;
  job.local_rank = 0;
  job.local_world_size = 1;
  return connect_all(job, cfg, opt, token, {nullptr, true});
}

}  // namespace tutti::detail::tcp_impl
