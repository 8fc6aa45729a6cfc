/// \file
/// Start-up of the tcp transport (`tcp::from_env`): rank 0 serves the rendezvous store
/// (`store_server`) on `MASTER_ADDR:MASTER_PORT`; every rank listens on an ephemeral port of the
/// address it advertises, publishes "address port" in the store, connects to every higher rank
/// and accepts every lower one: a full mesh, `TUTTI_TCP_STREAMS` connections per pair, each
/// opened with a hello (tcp/wire.hpp) that the acceptor checks and answers. A connection whose
/// hello is not a rank of this job's is refused, closed and logged (never the token), and the
/// start-up goes on; a rank of this job that disagrees (world size, streams, a duplicate rank)
/// fails it.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/transport/tcp/options.hpp"
#include "tutti/transport/tcp/sockets.hpp"
#include "tutti/transport/tcp/wire.hpp"
#include "tutti/transport/toolkit/host.hpp"

namespace tutti::detail::tcp_impl {

/// Accepts the S connections of every lower rank, reading the hellos of every connection
/// waiting side by side (`hello_queue`); strangers are ignored, bad hellos refused. A group's
/// connection from a lower rank that has finished its start-up already is kept for its group.
void accept_all(connections& m, asio::ip::tcp::acceptor& acceptor, const job_env& job,
                const std::string& token, std::chrono::steady_clock::time_point deadline);

/// How a start-up uses the store. The first job of a world: rank 0 serves it on MASTER_PORT and
/// every rank signs in with its rank. A successor (the job a shrink or a grow starts): the store
/// its rank 0 already serves (`server`: the shrink's coordinator made it, a grow keeps the old
/// one), its ranks anonymous clients, its keys under its job id.
struct store_use {
  std::shared_ptr<store_server> server;
  bool successor = false;
};

/// Builds this rank's connections to every other rank of the job (see the file comment).
std::shared_ptr<connections> connect_all(const job_env& job, const config& cfg, const tcp_options& opt,
                                         const std::string& token, store_use how = {});

/// Files a group hello that arrived whole on world `w`'s acceptor (a group's connection, or a
/// shrink's): the connection joins `w.arrived` for whoever makes that group; one that is not of
/// this job (the version, the token, the job id, a rank or stream that does not exist) is
/// refused, logged and closed.
void keep_group_hello(connections& w, hello_queue::waiting& c, const group_hello& h);

/// What world `w`'s acceptor does with a hello once its start-up is over (`connect_group`, a
/// shrink): a group's is kept (`keep_group_hello`); a mesh hello, a start-up's, is refused.
void after_startup(connections& w, hello_queue::waiting& c, const mesh_hello* mesh, const group_hello* group);

/// The connections of a group of the world `w` (its members, world ranks in group order, this
/// rank among them): every member connects to the members after it in the group, with a group
/// hello, and accepts the ones before it on the world's acceptor, where it serves every waiting
/// connection side by side (`hello_queue`), also when it accepts none itself. Connections of
/// other groups being made at the same time by other threads are kept for them.
std::shared_ptr<connections> connect_group(const std::shared_ptr<connections>& w,
                                           const std::vector<int>& members, std::uint64_t context);

}  // namespace tutti::detail::tcp_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/tcp/startup.ipp"
#endif
