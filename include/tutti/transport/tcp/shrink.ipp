/// \file
/// Definitions for tutti/transport/tcp/shrink.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "tutti/transport/tcp/shrink.hpp"

namespace tutti::detail::tcp_impl {

TUTTI_DECL std::string decision_text(const decision& d) {
  net::writer w;
  w.num(decision_magic).num(static_cast<std::uint8_t>(d.v)).num(static_cast<std::int32_t>(d.ask));
  w.num(static_cast<std::uint32_t>(d.members.size()));
  for (int m : d.members) w.num(static_cast<std::int32_t>(m));
  w.str(d.store_host).num(d.store_port).str(d.job_id);
  return w.out;
}

TUTTI_DECL std::optional<decision> parse_decision(std::string_view in, int world) {
  using net::malformed;
  net::reader r{in};
  constexpr std::size_t fixed = 4 + 1 + 4 + 4;
  if (in.size() < fixed) return std::nullopt;
  if (r.num<std::uint32_t>() != decision_magic) throw malformed("not a shrink decision (wrong magic)");
  decision d;
  const auto v = r.num<std::uint8_t>();
  if (v > 3) throw malformed("unknown verdict " + std::to_string(v));
  d.v = static_cast<decision::verdict>(v);
  d.ask = r.num<std::int32_t>();
  const auto n = r.num<std::uint32_t>();
  if (n > static_cast<std::uint32_t>(world)) throw malformed(std::to_string(n) + " members of a world of " + std::to_string(world));
  if (in.size() < fixed + 4 * std::size_t{n}) return std::nullopt;
  for (std::uint32_t i = 0; i < n; ++i) {
    const int m = r.num<std::int32_t>();
    if (m < 0 || m >= world || (!d.members.empty() && m <= d.members.back())) throw malformed("bad member list");
    d.members.push_back(m);
  }
  std::string_view host, job;
  if (!hello_field(r, host, 256, "store address")) return std::nullopt;
  if (r.in.size() < 2) return std::nullopt;
  d.store_port = r.num<std::uint16_t>();
  if (!hello_field(r, job, max_job_id, "job id")) return std::nullopt;
  d.store_host = host;
  d.job_id = job;
  return d;
}

TUTTI_DECL std::shared_ptr<connections> shrink_agreement::run(std::vector<int>* kept) {
  serve();  // an "out" left for this rank before it got here
  std::optional<decision> d;
  std::shared_ptr<store_server> server;
  for (int c = 0, asked = 0; c < P_ && !d; ++c) {
    if (c == me_) {
      d = coordinate(server);
      break;
    }
    auto got = probe(c);
    if (!got) continue;  // gone
    if (got->v == decision::verdict::ask && got->ask >= 0 && got->ask < c && ++asked <= P_) {
      c = got->ask - 1;
      continue;
    }
    if (got->v == decision::verdict::ask)
      throw error(errc::aborted, where() + " rank " + std::to_string(c) + " follows rank " + std::to_string(got->ask) +
                                     ", which this rank could not reach: left out of the new job");
    d = std::move(got);
  }
  if (!d) throw timeout_error(where() + " found no rank to agree with within the deadline");
  if (d->v == decision::verdict::out) left_out("the others decided without it (it reached shrink after their deadline)");
  const auto at = std::find(d->members.begin(), d->members.end(), me_);
  if (at == d->members.end()) left_out("the decision does not list it");
  // Ranks that asked this one while it followed: ask the coordinator.
  const int coordinator = d->members.front();
  for (auto& p : probes_) answer(p, {decision::verdict::ask, coordinator, {}, {}, 0, {}});
  for (auto& p : probes_) p.l.reset();
  if (kept) *kept = d->members;
  job_env job = w_.job;
  job.rank = static_cast<int>(at - d->members.begin());
  job.world_size = static_cast<int>(d->members.size());
  job.local_world_size = std::min(job.local_world_size, job.world_size);
  job.local_rank = std::min(job.local_rank, job.local_world_size - 1);
  job.master_addr = d->store_host;
  job.master_port = d->store_port;
  job.job_id = d->job_id;
  config cfg = w_.cfg;
  cfg.timeout = timeout_;
  tutti::detail::log(log_level::info, cfg, me_,
                     "tcp shrink: old rank " + std::to_string(me_) + " carries on as rank " + std::to_string(job.rank) +
                         " of " + std::to_string(job.world_size) + " (store " + net::host_port(job.master_addr, job.master_port) + ")");
  return connect_all(job, cfg, w_.opt, w_.token, {std::move(server), true});
}

TUTTI_DECL std::unique_ptr<link> shrink_agreement::reach(int rank, std::uint64_t context, clock::time_point until) {
  auto l = std::make_unique<link>(w_.io);
  tcp_options plain = w_.opt;
  plain.buffer_bytes = 0;  // a probe carries a few bytes: the kernel's buffers
  int err = 0;
  try {
    err = connect_once(*l, w_.addresses[static_cast<std::size_t>(rank)], plain, until);
  } catch (const std::system_error&) {  // no socket to be had
    return nullptr;
  }
  if (err != 0) {
    tutti::detail::log(log_level::info, w_.cfg, me_,
                       "tcp shrink: rank " + std::to_string(rank) + " is gone (" + errno_text(err) + ")");
    return nullptr;
  }
  const std::string hello = group_hello_text(me_, 0, context, w_.job_id, w_.token);
  try {
    io_by(*l, const_cast<char*>(hello.data()), hello.size(), true, until, "sending a shrink hello");
  } catch (const error&) {
    return nullptr;
  }
  return l;
}

TUTTI_DECL bool shrink_agreement::pull(link& l, std::string& in) {
  char buf[512];
  for (;;) {
    const ssize_t k = ::recv(l.fd(), buf, sizeof buf, MSG_DONTWAIT);
    if (k > 0) {
      in.append(buf, static_cast<std::size_t>(k));
      if (in.size() > 64 * 1024) return false;  // nobody sends that much here
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

TUTTI_DECL void shrink_agreement::answer(held& p, const decision& d) {
  if (!p.l) return;
  const std::string text = decision_text(d);
  try {
    io_by(*p.l, const_cast<char*>(text.data()), text.size(), true, std::min(overall_, clock::now() + std::chrono::seconds(5)),
          "answering a shrink probe");
  } catch (const error&) {
    p.l.reset();  // that rank is gone: it will not be in the new job's start-up either
  }
}

TUTTI_DECL void shrink_agreement::serve() {
  {
    // Every connection waiting on this rank's acceptor is served side by side (`hello_queue`),
    // as start-up and a group's connections are: a silent one delays no probe.
    std::lock_guard lk(w_.joining);
    w_.waiting.serve(*w_.acceptor, w_.io, hello_time(std::min(timeout_, w_.timeout)), me_, w_.refusals_logged,
                     [&](hello_queue::waiting& c, const mesh_hello* mesh, const group_hello* group) {
                       after_startup(w_, c, mesh, group);
                     });
    for (auto it = w_.arrived.begin(); it != w_.arrived.end();) {
      const bool probe = it->context == probe_ctx(), watch = it->context == watch_ctx();
      if (probe || watch) {
        (probe ? probes_ : watches_).push_back({it->from, std::move(it->l), {}, false});
        it = w_.arrived.erase(it);
      } else {
        ++it;  // a group's, being made: left for its group
      }
    }
  }
  for (auto& wt : watches_) {
    if (!wt.l) continue;
    if (!pull(*wt.l, wt.in) && wt.in.empty()) {
      wt.l.reset();  // its coordinator finished or is gone; nothing was left for this rank
      continue;
    }
    std::optional<decision> d;
    try {
      d = parse_decision(wt.in, P_);
    } catch (const net::malformed&) {
      wt.l.reset();
      continue;
    }
    if (d && d->v == decision::verdict::out)
      left_out("rank " + std::to_string(wt.from) + " and the others carried on without it (it was silent until their deadline)");
  }
}

TUTTI_DECL void shrink_agreement::idle(std::vector<pollfd> fds, clock::time_point until) {
  {
    std::lock_guard lk(w_.joining);
    w_.waiting.add_fds(*w_.acceptor, fds);
  }
  for (auto& wt : watches_)
    if (wt.l) fds.push_back({wt.l->fd(), POLLIN, 0});
  const auto left = std::clamp<long long>(net::left(until).count(), 0, 50);
  ::poll(fds.data(), fds.size(), static_cast<int>(left));
}

TUTTI_DECL std::optional<decision> shrink_agreement::probe(int c) {
  // The first silent rank gets `timeout` (a stopped rank 0, say); the whole search 2x. A
  // coordinator that says "hold" decides within its `timeout`: wait that, and as long again.
  auto until = std::min(overall_, clock::now() + timeout_);
  auto l = reach(c, probe_ctx(), until);
  if (!l) return std::nullopt;
  std::string in;
  bool held = false;
  while (true) {
    serve();
    const bool open = pull(*l, in);
    try {
      auto d = parse_decision(in, P_);
      if (d && d->v == decision::verdict::hold && !held) {
        held = true;
        in.erase(0, decision_text(*d).size());
        until = clock::now() + 2 * timeout_;
        continue;
      }
      if (d) return d;
    } catch (const net::malformed& e) {
      throw error(errc::aborted, where() + ": rank " + std::to_string(c) + " answered with " + e.reason);
    }
    if (!open) {
      tutti::detail::log(log_level::info, w_.cfg, me_, "tcp shrink: rank " + std::to_string(c) + " closed the probe: gone");
      return std::nullopt;
    }
    if (clock::now() >= until) {
      tutti::detail::log(log_level::info, w_.cfg, me_,
                         "tcp shrink: rank " + std::to_string(c) + " did not answer within the deadline: left out");
      return std::nullopt;
    }
    idle({{l->fd(), POLLIN, 0}}, until);
  }
}

TUTTI_DECL decision shrink_agreement::coordinate(std::shared_ptr<store_server>& server) {
  const auto until = std::min(overall_, clock::now() + timeout_);
  enum class state { pending, in, gone };
  std::vector<state> st(static_cast<std::size_t>(P_), state::gone);  // lower ranks: found gone
  st[static_cast<std::size_t>(me_)] = state::in;
  std::vector<held> mine;  // this coordinator's watches of the higher ranks
  for (int j = me_ + 1; j < P_; ++j) {
    auto l = reach(j, watch_ctx(), until);
    st[static_cast<std::size_t>(j)] = l ? state::pending : state::gone;
    if (l) mine.push_back({j, std::move(l), {}, false});
  }
  auto settled = [&] { return std::none_of(st.begin(), st.end(), [](state s) { return s == state::pending; }); };
  while (true) {
    serve();
    for (auto& p : probes_) {
      if (!p.l || p.from < 0 || p.from >= P_) continue;
      if (!p.told) {
        answer(p, {decision::verdict::hold, me_, {}, {}, 0, {}});
        p.told = true;
        if (!p.l) continue;
      }
      const bool open = pull(*p.l, p.in);  // a rank that asked and then died is out again
      if (!open) p.l.reset();
      st[static_cast<std::size_t>(p.from)] = open ? state::in : state::gone;
    }
    for (auto& wt : mine) {
      auto& s = st[static_cast<std::size_t>(wt.from)];
      if (s == state::pending && wt.l && !pull(*wt.l, wt.in)) {
        s = state::gone;
        tutti::detail::log(log_level::info, w_.cfg, me_, "tcp shrink: rank " + std::to_string(wt.from) + " is gone (closed)");
      }
    }
    if (settled() || clock::now() >= until) break;
    std::vector<pollfd> fds;
    for (auto& wt : mine)
      if (wt.l) fds.push_back({wt.l->fd(), POLLIN, 0});
    idle(std::move(fds), until);
  }
  decision d;
  d.v = decision::verdict::in;
  for (int r = 0; r < P_; ++r)
    if (st[static_cast<std::size_t>(r)] == state::in) d.members.push_back(r);
  d.job_id = w_.job_id + ".shrink" + std::to_string(generation_);
  const std::string host = w_.addresses[static_cast<std::size_t>(me_)].address().to_string();
  server = std::make_shared<store_server>(host, 0, static_cast<int>(d.members.size()), w_.token, d.job_id);
  d.store_host = host;
  d.store_port = static_cast<std::uint16_t>(server->port());
  std::string list;
  for (int m : d.members) list += (list.empty() ? "" : ", ") + std::to_string(m);
  tutti::detail::log(log_level::info, w_.cfg, me_, "tcp shrink: rank " + std::to_string(me_) + " decides: ranks " + list + " carry on");
  for (auto& p : probes_)
    if (p.l && std::find(d.members.begin(), d.members.end(), p.from) != d.members.end()) answer(p, d);
  // The silent ones learn they are out if they ever ask (the verdict waits in their queue).
  const decision out{decision::verdict::out, me_, {}, {}, 0, {}};
  for (auto& wt : mine)
    if (st[static_cast<std::size_t>(wt.from)] == state::pending) {
      const std::string text = decision_text(out);
      (void)::send(wt.l->fd(), text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
  for (auto& p : probes_) p.l.reset();
  return d;
}

}  // namespace tutti::detail::tcp_impl
