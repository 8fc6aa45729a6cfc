/// \file
/// Definitions for tutti/transport/tcp/startup.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <string_view>

#include "tutti/transport/tcp/startup.hpp"

namespace tutti::detail::tcp_impl {

TUTTI_COLD TUTTI_DECL void accept_all(connections& m, asio::ip::tcp::acceptor& acceptor, const job_env& job,
                                      const std::string& token, std::chrono::steady_clock::time_point deadline) {
  const int S = m.opt.streams, L = links_per_peer(m.opt), R = job.rank;
  for (int r = 0; r < R; ++r) m.peers[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(L));
  int missing = R * L;
  auto on_hello = [&](hello_queue::waiting& p, const mesh_hello* h, const group_hello* g) {
    if (g) {  // a lower rank done with its start-up makes a group already: kept for it
      keep_group_hello(m, p, *g);
      return;
    }
    const auto version = h->version;
    const int from = h->from, world = h->world, stream = h->stream, streams = h->streams;
    const std::string_view job_id = h->job_id, their_token = h->token;  // into p.in
    // A stranger (another version, token or job) is refused and the start-up goes on; a rank
    // of this job that disagrees (world size, streams, a duplicate) fails it.
    std::string refusal;
    bool fatal = true;
    if (version != hello_version) {
      refusal = "protocol version " + std::to_string(version) + " differs from " + std::to_string(hello_version);
      fatal = false;
    } else if (!net::same_token(their_token, token) || job_id != job.job_id) {
      refusal = "wrong job token or job id: not a rank of this job";
      fatal = false;
    } else if (world != job.world_size)
      refusal = "rank " + std::to_string(from) + " says the world has " + std::to_string(world) + " ranks, rank " +
                std::to_string(R) + " says " + std::to_string(job.world_size);
    else if (streams != S)
      refusal = "rank " + std::to_string(from) + " uses TUTTI_TCP_STREAMS=" + std::to_string(streams) + ", rank " +
                std::to_string(R) + " uses " + std::to_string(S);
    else if (from < 0 || from >= R || stream < 0 || stream >= L)
      refusal = "rank " + std::to_string(from) + " (stream " + std::to_string(stream) + ") should not connect to rank " + std::to_string(R);
    else if (m.peers[static_cast<std::size_t>(from)][static_cast<std::size_t>(stream)])
      refusal = "two processes connect as rank " + std::to_string(from) + " (stream " + std::to_string(stream) + ")";
    net::writer a;
    a.num(hello_magic).num(static_cast<std::uint8_t>(refusal.empty() ? 0 : 1)).str(refusal);
    try {
      io_by(*p.l, a.out.data(), a.out.size(), true, deadline, "answering a connection");
    } catch (const error&) {
      if (refusal.empty()) throw;
    }
    if (!refusal.empty()) {
      if (fatal) throw config_error("tcp start-up: rank " + std::to_string(R) + " refused a connection: " + refusal);
      log_refusal(R, p.from, refusal, m.refusals_logged);
      return;
    }
    m.peers[static_cast<std::size_t>(from)][static_cast<std::size_t>(stream)] = std::move(p.l);
    --missing;
  };
  const auto within = hello_time(m.timeout);
  while (true) {
    m.waiting.serve(acceptor, m.io, within, R, m.refusals_logged, on_hello);
    if (missing == 0) return;
    const auto left = net::left(deadline).count();
    if (left <= 0) {
      std::string who;
      for (int r = 0; r < R; ++r)
        for (int s = 0; s < L; ++s)
          if (!m.peers[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)]) {
            who += (who.empty() ? "" : ", ") + std::to_string(r);
            break;
          }
      throw timeout_error("tcp start-up: rank " + std::to_string(R) + " timed out waiting for rank(s) " + who +
                          " to connect to " + sockaddr_text(acceptor.local_endpoint()));
    }
    std::vector<pollfd> fds;
    m.waiting.add_fds(acceptor, fds);
    ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 1000)));
  }
}

TUTTI_COLD TUTTI_DECL std::shared_ptr<connections> connect_all(const job_env& job, const config& cfg,
                                                               const tcp_options& opt, const std::string& token,
                                                               store_use how) {
  using clock = std::chrono::steady_clock;
  auto m = std::make_shared<connections>();
  m->world_rank = job.rank;
  m->world_size = job.world_size;
  m->opt = opt;
  m->linger = std::min(cfg.timeout, m->linger);
  m->timeout = cfg.timeout;
  m->job_id = job.job_id;
  m->token = token;
  m->job = job;
  m->cfg = cfg;
  m->peers.resize(static_cast<std::size_t>(job.world_size));
  m->oversubscribed = toolkit::oversubscribed(job.local_world_size);
  if (m->oversubscribed) m->opt.spin = std::chrono::microseconds(0);  // spinning starves the peer
  if (job.world_size == 1) return m;

  if (job.master_port == 0)
    throw config_error("tutti::tcp needs MASTER_PORT (and MASTER_ADDR) to find the rendezvous store on rank 0; "
                       "tuttirun sets both (environment: " + job.source + ")");
  std::string master = job.master_addr;
  if (master.empty()) {
    if (job.local_world_size != job.world_size)
      throw config_error("tutti::tcp: MASTER_ADDR is not set, and not every rank runs on this host (" +
                         std::to_string(job.local_world_size) + " of " + std::to_string(job.world_size) + ")");
    master = "127.0.0.1";
  }
  if (token.empty())
    tutti::detail::log(log_level::info, cfg, job.rank,
                "tcp: no TUTTI_JOB_TOKEN: the store and the connections accept any process that finds them "
                "(tuttirun sets a token)");
  const auto deadline = clock::now() + cfg.timeout;
  if (job.rank == 0)
    m->server = how.server ? std::move(how.server)
                           : std::make_shared<store_server>(master, job.master_port, job.world_size, token, job.job_id,
                                                            cfg.timeout);  // says who it waits for, if start-up lasts
  // A successor's ranks sign in anonymously, to a store of the job it succeeds (a grow's: the
  // world's, under its first job id): no rank and no job id to check.
  store kv(master, job.master_port, how.successor ? -1 : job.rank, how.successor ? 0 : job.world_size, token, cfg.timeout,
           how.successor ? std::string() : job.job_id);
  const std::string keys = how.successor ? "tutti/" + job.job_id + "/" : "tutti/";

  // The address peers reach this rank by.
  const sockaddr_storage local = kv.local_address();
  asio::ip::address addr;
  if (!opt.ifname.empty()) addr = interface_address(opt.ifname, local.ss_family);
  else addr = asio::ip::make_address(net::addr_host(local));
  asio::ip::tcp::acceptor acceptor(m->io);
  const asio::ip::tcp::endpoint want(addr, 0);
  try {
    acceptor.open(want.protocol());
    set_buffers(acceptor, m->opt);
    acceptor.bind(want);
    acceptor.listen(4096);
    acceptor.non_blocking(true);
  } catch (const std::system_error& e) {
    throw config_error("tcp start-up: rank " + std::to_string(job.rank) + " cannot listen on " +
                       sockaddr_text(want) + ": " + e.what() +
                       (opt.ifname.empty() ? "" : " (TUTTI_SOCKET_IFNAME=" + opt.ifname + ")"));
  }
  const auto me = acceptor.local_endpoint();
  tutti::detail::log(log_level::info, cfg, job.rank,
              "tcp: listening on " + sockaddr_text(me) + ", " + std::to_string(opt.streams) +
                  " stream(s) per peer, store at " + kv.where());
  kv.set(keys + "addr/" + std::to_string(job.rank), me.address().to_string() + " " + std::to_string(me.port()));

  const int S = opt.streams, L = links_per_peer(opt), R = job.rank, P = job.world_size;
  auto left = [&] { return std::max(net::left(deadline), std::chrono::milliseconds(1)); };
  auto address_of = [&](int j) {
    const std::string where = kv.get(keys + "addr/" + std::to_string(j), left());
    const auto space = where.find(' ');
    try {
      return asio::ip::tcp::endpoint(asio::ip::make_address(where.substr(0, space)),
                                     static_cast<unsigned short>(std::stoi(where.substr(space + 1))));
    } catch (const std::exception&) {
      throw config_error("tcp start-up: rank " + std::to_string(j) + " published a malformed address '" + where + "'");
    }
  };
  // Every rank's address, for the groups' own connections: the higher ones now; the lower ones
  // come over the mesh in step 4, since the store (rank 0's) may be gone by the time a rank
  // has accepted them.
  m->addresses.resize(static_cast<std::size_t>(P));
  m->addresses[static_cast<std::size_t>(R)] = me;
  for (int j = R + 1; j < P; ++j) m->addresses[static_cast<std::size_t>(j)] = address_of(j);
  // 1. Connect to every higher rank; the hello goes out at once, the answer is read in step 3.
  for (int j = R + 1; j < P; ++j) {
    const auto ep = m->addresses[static_cast<std::size_t>(j)];
    for (int s = 0; s < L; ++s) {
      auto l = std::make_unique<link>(m->io);
      connect(*l, ep, m->opt, deadline, R, j);
      std::string hello = hello_text(R, P, s, S, job.job_id, token);
      io_by(*l, hello.data(), hello.size(), true, deadline,
            "sending the hello to rank " + std::to_string(j) + " at " + sockaddr_text(ep));
      m->peers[static_cast<std::size_t>(j)].push_back(std::move(l));
    }
  }
  // 2. Accept every lower rank's connections. The acceptor stays open for the groups' own.
  accept_all(*m, acceptor, job, token, deadline);
  m->acceptor = std::make_unique<asio::ip::tcp::acceptor>(std::move(acceptor));
  // 3. Every higher rank's answer.
  for (int j = R + 1; j < P; ++j)
    for (auto& l : m->peers[static_cast<std::size_t>(j)]) {
      char head[net::answer_head_bytes];
      const std::string what = "waiting for rank " + std::to_string(j) + " to accept rank " + std::to_string(R);
      io_by(*l, head, sizeof head, false, deadline, what);
      net::answer_head a;
      try {
        a = net::parse_answer_head(std::string_view(head, sizeof head), hello_magic);
      } catch (const net::malformed& e) {
        throw config_error("tcp start-up: rank " + std::to_string(j) + " answered rank " + std::to_string(R) +
                           " with something that is not tutti's (" + e.reason + ")");
      }
      std::string msg(a.text_bytes, '\0');
      io_by(*l, msg.data(), msg.size(), false, deadline, what);
      if (a.status != 0)
        throw config_error("tcp start-up: rank " + std::to_string(j) + " refused rank " + std::to_string(R) + ": " + msg);
    }
  // 4. Each rank tells every higher one the address it listens on, on stream 0, before any
  // message: u16 port, then the address as text (u32 length + bytes). All are written first,
  // then read.
  const std::string here = me.address().to_string();
  for (int j = R + 1; j < P; ++j) {
    net::writer w;
    w.num(static_cast<std::uint16_t>(me.port())).str(here);
    io_by(*m->peers[static_cast<std::size_t>(j)][0], w.out.data(), w.out.size(), true, deadline,
          "telling rank " + std::to_string(j) + " where this rank listens");
  }
  for (int j = 0; j < R; ++j) {
    link& l = *m->peers[static_cast<std::size_t>(j)][0];
    const std::string what = "reading where rank " + std::to_string(j) + " listens";
    char head[6];
    io_by(l, head, sizeof head, false, deadline, what);
    net::reader r{std::string_view(head, sizeof head)};
    const auto port = r.num<std::uint16_t>();
    const auto n = r.num<std::uint32_t>();
    if (n > 256) throw config_error("tcp start-up: rank " + std::to_string(j) + " sent an address of " + std::to_string(n) + " bytes");
    std::string text(n, '\0');
    io_by(l, text.data(), n, false, deadline, what);
    try {
      m->addresses[static_cast<std::size_t>(j)] = asio::ip::tcp::endpoint(asio::ip::make_address(text), port);
    } catch (const std::exception&) {
      throw config_error("tcp start-up: rank " + std::to_string(j) + " sent a malformed address '" + text + "'");
    }
  }
  return m;
}

TUTTI_COLD TUTTI_DECL void keep_group_hello(connections& w, hello_queue::waiting& c, const group_hello& h) {
  std::string why;
  if (h.version != hello_version) why = "protocol version " + std::to_string(h.version) + " differs from " + std::to_string(hello_version);
  else if (!net::same_token(h.token, w.token) || h.job_id != w.job_id) why = "wrong job token or job id: not a rank of this job";
  else if (h.from < 0 || h.from >= w.world_size || h.stream < 0 || h.stream >= links_per_peer(w.opt)) why = "no such rank or stream";
  if (!why.empty()) {
    log_refusal(w.world_rank, c.from, why, w.refusals_logged);
    return;
  }
  w.arrived.push_back({h.context, h.from, h.stream, std::move(c.l)});
}

TUTTI_COLD TUTTI_DECL void after_startup(connections& w, hello_queue::waiting& c, const mesh_hello* mesh,
                                         const group_hello* group) {
  if (group) {
    keep_group_hello(w, c, *group);
    return;
  }
  (void)mesh;
  const std::string why = "a start-up's hello, but this rank's start-up is over (a duplicate rank, or a rank of another job?)";
  net::writer a;  // answered as start-up answers, if the socket takes it at once
  a.num(hello_magic).num(std::uint8_t{1}).str(why);
  (void)::send(c.l->fd(), a.out.data(), a.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  log_refusal(w.world_rank, c.from, why, w.refusals_logged);
}

TUTTI_COLD TUTTI_DECL std::shared_ptr<connections> connect_group(const std::shared_ptr<connections>& w,
                                                                 const std::vector<int>& members,
                                                                 std::uint64_t context) {
  using clock = std::chrono::steady_clock;
  auto g = std::make_shared<connections>();
  g->world = w;
  g->world_rank = w->world_rank;
  g->world_size = w->world_size;
  g->opt = w->opt;
  g->oversubscribed = w->oversubscribed;
  g->linger = w->linger;
  g->timeout = w->timeout;
  g->peers.resize(static_cast<std::size_t>(w->world_size));
  const int R = w->world_rank, L = links_per_peer(w->opt);
  const auto deadline = clock::now() + w->timeout;
  std::size_t mine = 0;
  while (members[mine] != R) ++mine;
  // 1. Connect to the members after this rank; nothing is answered.
  for (std::size_t k = mine + 1; k < members.size(); ++k) {
    const int j = members[k];
    for (int s = 0; s < L; ++s) {
      auto l = std::make_unique<link>(w->io);
      connect(*l, w->addresses[static_cast<std::size_t>(j)], g->opt, deadline, R, j);
      std::string hello = group_hello_text(R, s, context, w->job_id, w->token);
      io_by(*l, hello.data(), hello.size(), true, deadline,
            "sending a group hello to rank " + std::to_string(j) + " at " + sockaddr_text(w->addresses[static_cast<std::size_t>(j)]));
      g->peers[static_cast<std::size_t>(j)].push_back(std::move(l));
    }
  }
  // 2. Accept the members before it.
  for (std::size_t k = 0; k < mine; ++k) g->peers[static_cast<std::size_t>(members[k])].resize(static_cast<std::size_t>(L));
  std::size_t missing = mine * static_cast<std::size_t>(L);
  // The world's acceptor is served also when this rank accepts nothing itself (the group's
  // first member): connections to it never pile up unread.
  const auto within = hello_time(w->timeout);
  const auto on_hello = [&](hello_queue::waiting& c, const mesh_hello* mesh, const group_hello* group) {
    after_startup(*w, c, mesh, group);
  };
  while (true) {
    std::vector<pollfd> fds;
    {
      std::lock_guard lk(w->joining);
      if (w->acceptor)  // none in a world of one rank
        w->waiting.serve(*w->acceptor, w->io, within, R, w->refusals_logged, on_hello);
      // Take this group's.
      for (auto it = w->arrived.begin(); it != w->arrived.end();) {
        if (it->context == context) {
          auto& slot = g->peers[static_cast<std::size_t>(it->from)];
          if (slot.size() == static_cast<std::size_t>(L) && !slot[static_cast<std::size_t>(it->stream)]) {
            slot[static_cast<std::size_t>(it->stream)] = std::move(it->l);
            --missing;
            it = w->arrived.erase(it);
            continue;
          }
        }
        ++it;
      }
      if (missing > 0 && w->acceptor) w->waiting.add_fds(*w->acceptor, fds);
    }
    if (missing == 0) break;
    if (clock::now() >= deadline) {
      std::string who;
      for (std::size_t k = 0; k < mine; ++k)
        for (const auto& l : g->peers[static_cast<std::size_t>(members[k])])
          if (!l) {
            who += (who.empty() ? "" : ", ") + std::to_string(members[k]);
            break;
          }
      throw timeout_error("tcp: making a group's connections: rank " + std::to_string(R) + " timed out waiting for world rank(s) " +
                          who + " to connect");
    }
    // Other threads may serve the same descriptors meanwhile: a short wait, then a look.
    ::poll(fds.data(), fds.size(), 5);
  }
  return g;
}

}  // namespace tutti::detail::tcp_impl
