/// \file
/// Definitions for tutti/transport/inproc.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include "tutti/transport/inproc.hpp"

namespace tutti {

namespace detail::inproc_impl {

TUTTI_DECL world::world(int n)
    : size(n), boxes(static_cast<std::size_t>(n)), waiting(static_cast<std::size_t>(n)),
      state(static_cast<std::size_t>(n), rank_state::running), failure(static_cast<std::size_t>(n)),
      note(static_cast<std::size_t>(n)), errors(static_cast<std::size_t>(n)) {}

TUTTI_DECL std::exception_ptr world::first_error() const {
  if (first_failed >= 0 && errors[static_cast<std::size_t>(first_failed)]) return errors[static_cast<std::size_t>(first_failed)];
  for (const auto& e : errors)
    if (e) return e;
  return nullptr;
}

TUTTI_DECL void world::fail(int rank, std::string why) {
  std::lock_guard lk(mu);
  if (state[static_cast<std::size_t>(rank)] == rank_state::running) {
    state[static_cast<std::size_t>(rank)] = rank_state::failed;
    failure[static_cast<std::size_t>(rank)] = std::move(why);
    if (first_failed < 0) first_failed = rank;
  }
  notify_all();
}

TUTTI_DECL void world::finish(int rank, std::exception_ptr error) {
  std::lock_guard lk(mu);
  if (error) {
    errors[static_cast<std::size_t>(rank)] = error;
    if (first_failed < 0) first_failed = rank;
    if (state[static_cast<std::size_t>(rank)] != rank_state::failed) {
      state[static_cast<std::size_t>(rank)] = rank_state::failed;
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        failure[static_cast<std::size_t>(rank)] = e.what();
      } catch (...) {
        failure[static_cast<std::size_t>(rank)] = "unknown exception";
      }
    }
  } else if (state[static_cast<std::size_t>(rank)] == rank_state::running) {
    state[static_cast<std::size_t>(rank)] = rank_state::returned;
  }
  notify_all();
}

}  // namespace detail::inproc_impl

TUTTI_DECL inproc inproc::sub(std::span<const int> members, std::uint64_t context) const {
  inproc t = *this;
  t.group_ = group_.sub(members, context);
  t.entry_ = nullptr;
  return t;
}

TUTTI_DECL void inproc::send(int peer, const header& h, const std::byte* data, const wait_context& w) {
  envelope e = make_envelope(h, data);
  std::unique_lock lk(world_->mu);
  post(peer, e);
  await_delivery(lk, peer, e, w);
}

TUTTI_DECL void inproc::sendrecv_with(int to, const header& hs, const std::byte* sdata, int from, const header& hr,
                                      byte_consumer consume, const wait_context& w) {
  envelope e = make_envelope(hs, sdata);
  std::unique_lock lk(world_->mu);
  post(to, e);
  try {
    receive(lk, from, hr, consume, w);
  } catch (...) {
    withdraw(lk, to, e);
    throw;
  }
  await_delivery(lk, to, e, w);
}

namespace detail::inproc_impl {

/// Whether receive `r` takes message `s`: its source (or any) and tag (or any).
inline bool takes(const p2p_entry& r, const p2p_entry& s) {
  return (r.src == any_source || r.src == s.src) && (r.tag == any_tag || r.tag == s.tag);
}

/// The header a pending entry's texts describe.
inline header p2p_header(const p2p_entry& e) { return toolkit::p2p_header(e.type, e.count, e.tag, e.bytes); }

/// An entry for a posted send or receive: a send's source is this rank, a receive's
/// destination.
inline std::shared_ptr<p2p_entry> p2p_entry_of(const p2p_post& p, bool send, int me) {
  auto e = std::make_shared<p2p_entry>();
  e->send = send;
  e->src = send ? me : p.peer;
  e->dst = send ? p.peer : me;
  e->tag = p.tag;
  e->type = p.type;
  e->count = p.count;
  e->bytes = p.bytes;
  e->data = p.data;
  return e;
}

/// "send/recv(p2p) on rank 1", for errors.
inline std::string p2p_here(const toolkit::group_map& g, const p2p_entry& e) {
  return toolkit::where(p2p_header(e), "p2p") + " on " + g.name(e.send ? e.src : e.dst);
}

/// The failure of `e`'s peer (for an any-source receive: of every other rank) as this rank
/// raises it, or null while it may still come: a failed peer's own error, passed on with its
/// kind; `peer_lost` for one that returned.
inline std::exception_ptr p2p_lost(world& w, const toolkit::group_map& g, const p2p_entry& e) {
  std::lock_guard lk(w.mu);
  const auto state_of = [&](int r) { return w.state[static_cast<std::size_t>(g.world(r))]; };
  try {
    if (e.send || e.src != any_source) {
      const int peer = e.send ? e.dst : e.src;
      const rank_state st = state_of(peer);
      if (st == rank_state::running) return nullptr;
      const std::string& why = w.failure[static_cast<std::size_t>(g.world(peer))];
      if (st == rank_state::failed) toolkit::raise_notice(why, g, peer, p2p_here(g, e));
      const std::string& note = w.note[static_cast<std::size_t>(g.world(peer))];
      toolkit::throw_lost(p2p_here(g, e) + ": " + g.name(peer) + " returned without " +
                              (e.send ? "receiving it" : "sending it") +
                              (note.empty() ? std::string() : " (its last words: " + note + ")"),
                          g.job_rank(peer));
    }
    for (int r = 0; r < g.size(); ++r)
      if (r != e.dst && state_of(r) == rank_state::running) return nullptr;
    throw peer_lost(p2p_here(g, e) + " from any rank: every other rank has returned or failed, so no message can come");
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace detail::inproc_impl

TUTTI_DECL std::shared_ptr<detail::operation_state> inproc::post_send(const p2p_post& p) {
  using detail::inproc_impl::p2p_entry;
  auto s = detail::inproc_impl::p2p_entry_of(p, true, rank());
  // To a rank already gone: its failure now, not a message nobody will take.
  if (std::exception_ptr gone = detail::inproc_impl::p2p_lost(*world_, group_, *s)) {
    detail::complete(*s->state, std::move(gone));
    return s->state;
  }
  if (p.bytes > eager_bytes) await_partner(s, p);
  std::shared_ptr<p2p_entry> r;
  {
    std::lock_guard lk(world_->p2p_mu);
    auto& q = world_->p2p[{group_.context(), world_rank(p.peer)}];
    const auto it = std::find_if(q.receives.begin(), q.receives.end(),
                                 [&](const auto& e) { return detail::inproc_impl::takes(*e, *s); });
    if (it != q.receives.end()) {
      r = *it;
      q.receives.erase(it);
      r->matched = s->matched = true;
    } else {
      if (p.bytes <= eager_bytes) {  // copied aside: complete now
        s->eager = std::make_unique_for_overwrite<std::byte[]>(p.bytes);
        if (p.bytes) std::memcpy(s->eager.get(), p.data, p.bytes);
        detail::complete(*s->state, nullptr);
      }
      q.arrived.push_back(s);
    }
  }
  if (r) deliver(*s, *r);
  return s->state;
}

TUTTI_DECL std::shared_ptr<detail::operation_state> inproc::post_recv(const p2p_post& p) {
  using detail::inproc_impl::p2p_entry;
  auto r = detail::inproc_impl::p2p_entry_of(p, false, rank());
  await_partner(r, p);
  std::shared_ptr<p2p_entry> s;
  {
    std::lock_guard lk(world_->p2p_mu);
    auto& q = world_->p2p[{group_.context(), group_.world_rank()}];
    const auto it = std::find_if(q.arrived.begin(), q.arrived.end(),
                                 [&](const auto& e) { return detail::inproc_impl::takes(*r, *e); });
    if (it != q.arrived.end()) {
      s = *it;
      q.arrived.erase(it);
      r->matched = s->matched = true;
    } else {
      q.receives.push_back(r);
    }
  }
  if (s) deliver(*s, *r);
  return r->state;
}

TUTTI_DECL std::vector<std::string> inproc::pending_p2p() const {
  using detail::inproc_impl::p2p_entry;
  const auto now = std::chrono::steady_clock::now();
  const auto line = [&](const p2p_entry& e) {
    const int peer = e.send ? e.dst : e.src;
    return toolkit::p2p_pending_line(e.send, peer == any_source ? "any rank" : group_.name(peer), e.tag, e.bytes,
                                     now - e.posted);
  };
  std::vector<std::string> out;
  std::lock_guard lk(world_->p2p_mu);
  for (const auto& [key, q] : world_->p2p) {
    if (key.first != group_.context()) continue;
    if (key.second == group_.world_rank())
      for (const auto& e : q.receives) out.push_back(line(*e));
    for (const auto& e : q.arrived)
      if (e->src == rank() && !e->state->done.load(std::memory_order_acquire)) out.push_back(line(*e));
  }
  return out;
}

TUTTI_DECL void inproc::deliver(detail::inproc_impl::p2p_entry& s, detail::inproc_impl::p2p_entry& r) const {
  const std::string wrong = toolkit::p2p_mismatch(s.src, r.dst, s.tag, s.type, s.count, r.type, r.count);
  if (wrong.empty()) {
    if (s.bytes) std::memcpy(r.data, s.eager ? s.eager.get() : s.data, s.bytes);
    r.state->status = recv_status{s.src, s.tag, s.count};
  }
  // Each side its own exception object: the two threads that wait read theirs at once.
  const auto failure = [&] { return wrong.empty() ? nullptr : std::make_exception_ptr(mismatch_error(wrong)); };
  detail::complete(*r.state, failure());
  if (!s.state->done.load(std::memory_order_acquire)) detail::complete(*s.state, failure());
}

TUTTI_DECL void inproc::await_partner(const std::shared_ptr<detail::inproc_impl::p2p_entry>& entry,
                                      const p2p_post& p) const {
  using clock = std::chrono::steady_clock;
  // The entry owns its state, which owns this poll: the poll holds the entry weakly. An entry
  // gone has completed its state.
  entry->state->poll = [w = world_, weak = std::weak_ptr(entry), g = group_, timeout = p.timeout, aborted = p.aborted,
                        deadline = clock::time_point{}, look = clock::time_point{}](detail::operation_state& st) mutable {
    const auto e = weak.lock();
    if (!e || st.done.load(std::memory_order_acquire)) return;
    const auto now = clock::now();
    if (deadline == clock::time_point{}) {
      deadline = now + timeout;
      look = now;
    }
    std::exception_ptr why;
    if (aborted && aborted->load(std::memory_order_acquire)) {
      why = std::make_exception_ptr(error(errc::aborted, detail::inproc_impl::p2p_here(g, *e) +
                                                             ": the communicator was aborted (communicator::abort)"));
    } else if (now >= look) {  // the peers' states, every millisecond
      look = now + std::chrono::milliseconds(1);
      why = detail::inproc_impl::p2p_lost(*w, g, *e);
    }
    if (!why && now >= deadline) {
      const int me = e->send ? e->src : e->dst, peer = e->send ? e->dst : e->src;
      why = std::make_exception_ptr(timeout_error(toolkit::timeout_text(
          detail::inproc_impl::p2p_header(*e), "p2p", g.name(me), timeout,
          e->send ? "to take delivery from" : "to receive from", peer == any_source ? "any rank" : g.name(peer))));
    }
    if (!why) return;
    {
      std::lock_guard lk(w->p2p_mu);
      if (e->matched) return;  // its partner is copying: it completes in a moment
      auto& q = w->p2p[{g.context(), g.world(e->dst)}];
      auto& list = e->send ? q.arrived : q.receives;
      list.erase(std::find(list.begin(), list.end(), e));
    }
    detail::complete(st, why);
  };
}

TUTTI_DECL void inproc::fail(std::string_view what) noexcept {
  try {
    world_->fail(group_.world_rank(), std::string(what));
  } catch (...) {
  }
}

TUTTI_DECL void inproc::note(std::string_view what) noexcept {
  try {
    std::lock_guard lk(world_->mu);
    world_->note[static_cast<std::size_t>(group_.world_rank())] = std::string(what);
  } catch (...) {
  }
}

TUTTI_DECL inproc::envelope inproc::make_envelope(const header& h, const std::byte* data) const {
  envelope e;
  e.src = group_.world_rank();
  e.h = h;
  e.h.fp.context = group_.context();
  e.data = data;
  return e;
}

TUTTI_DECL void inproc::receive(std::unique_lock<std::mutex>& lk, int peer, const header& h0, byte_consumer consume,
                                const wait_context& w) {
  header h = h0;
  h.fp.context = group_.context();
  const int src = world_rank(peer);
  auto& q = my_box().q;
  envelope* e = nullptr;
  wait(lk, peer, h, w, "to receive from", nullptr, [&] {
    for (auto it = q.begin(); it != q.end(); ++it)
      if ((*it)->src == src && same_channel((*it)->h, h)) {
        e = *it;
        q.erase(it);
        return true;
      }
    return false;
  });
  try {
    toolkit::check_header(h, rank(), e->h, peer, w.algorithm);
  } catch (const std::exception& ex) {
    e->st = state::rejected;
    e->reason = detail::own_text(ex);
    if (h.fp != e->h.fp) e->rejected_by = h.fp;
    world_->boxes[static_cast<std::size_t>(src)].cv.notify_all();
    throw;
  }
  e->st = state::taken;
  lk.unlock();
  try {
    consume(e->data, 0, e->h.bytes);  // the sender is parked until we mark it done
  } catch (...) {  // e.g. a user op that throws (whatever it throws): release the sender
    std::string why = "an exception not derived from std::exception";
    try {
      throw;
    } catch (const std::exception& ex) {
      why = ex.what();
    } catch (...) {
    }
    lk.lock();
    e->st = state::rejected;
    e->reason = toolkit::where(h, w.algorithm) + ": " + group_.name(rank()) + " failed while taking " +
                group_.name(peer) + "'s message: " + why;
    world_->boxes[static_cast<std::size_t>(src)].cv.notify_all();
    throw;
  }
  lk.lock();
  e->st = state::done;
  world_->boxes[static_cast<std::size_t>(src)].cv.notify_all();
}

TUTTI_DECL void inproc::await_delivery(std::unique_lock<std::mutex>& lk, int peer, envelope& e, const wait_context& w) {
  try {
    wait(lk, peer, e.h, w, "to take delivery from", &e, [&] { return e.st == state::done || e.st == state::rejected; });
  } catch (...) {
    withdraw(lk, peer, e);
    throw;
  }
  if (e.st == state::rejected) {
    if (e.reason.find("failed while taking") != std::string::npos) toolkit::throw_lost(e.reason, group_.job_rank(peer));
    if (e.rejected_by) throw fingerprint_mismatch(e.reason, e.h.fp, rank(), *e.rejected_by, peer);
    throw mismatch_error(e.reason);
  }
}

TUTTI_DECL void inproc::withdraw(std::unique_lock<std::mutex>& lk, int peer, envelope& e) {
  auto& q = world_->boxes[static_cast<std::size_t>(world_rank(peer))].q;
  if (e.st == state::posted) {
    q.erase(std::remove(q.begin(), q.end(), &e), q.end());
    return;
  }
  my_box().cv.wait(lk, [&] { return e.st != state::taken; });
}

TUTTI_DECL void inproc::check_peer(int peer, const header& h, const wait_context& w) const {
  const auto wr = static_cast<std::size_t>(world_rank(peer));
  using rs = detail::inproc_impl::rank_state;
  if (world_->state[wr] == rs::failed)
    toolkit::raise_notice(world_->failure[wr], group_, peer, toolkit::where(h, w.algorithm) + " on " + group_.name(rank()));
  if (world_->state[wr] == rs::returned)
    toolkit::throw_lost(toolkit::where(h, w.algorithm) + ": " + group_.name(peer) + " returned from its function while " +
                            group_.name(rank()) + " still waited for it (did it skip this call?)" +
                            last_words_of(static_cast<int>(wr)),
                        group_.job_rank(peer));
  // Sends are rendezvous, so a peer that must exchange a message with us in this call cannot
  // be blocked in a later one: if it is, the ranks disagree.
  const auto* theirs = blocked_in(static_cast<int>(wr));
  fingerprint mine = h.fp;
  mine.context = group_.context();
  if (theirs && toolkit::left_behind(mine, theirs->fp))
    toolkit::throw_left_behind(h, w.algorithm, mine, rank(), theirs->fp, peer);
}

TUTTI_DECL void inproc::check_mailbox(const header& h, const wait_context& w) {
  if (h.fp.coll == collective::send_recv) return;
  for (envelope* e : my_box().q) {
    const fingerprint& f = e->h.fp;
    if (f.context != group_.context() || f.coll == collective::send_recv) continue;
    if (f.seq < h.fp.seq || (f.seq == h.fp.seq && f != h.fp)) {
      const int peer = group_.local(e->src);
      const std::string what = toolkit::where(h, w.algorithm) + ": " + detail::describe_difference(h.fp, rank(), f, peer);
      e->st = state::rejected;
      e->reason = what;
      e->rejected_by = h.fp;
      auto& q = my_box().q;
      q.erase(std::remove(q.begin(), q.end(), e), q.end());
      world_->boxes[static_cast<std::size_t>(e->src)].cv.notify_all();
      throw fingerprint_mismatch(what, h.fp, rank(), f, peer);
    }
  }
}

TUTTI_DECL void inproc::check_cycle(const header& h, const wait_context& w) const {
  const int me = group_.world_rank();
  const auto* mine = blocked_in(me);
  auto stuck = [](const detail::inproc_impl::blocked* b) {
    return b && b->sending && b->sending->st == state::posted;  // nobody has taken its envelope
  };
  if (!stuck(mine)) return;
  std::string chain;
  std::vector<bool> seen(static_cast<std::size_t>(world_->size));
  for (int r = mine->peer; r >= 0 && !seen[static_cast<std::size_t>(r)];) {
    seen[static_cast<std::size_t>(r)] = true;
    const auto* b = blocked_in(r);
    if (!stuck(b)) return;  // it receives, runs, or its receiver has its message: the chain may move
    chain += ", " + group_.world_name(r) + " waits to send to " + group_.world_name(b->peer);
    if (b->peer == me)
      throw mismatch_error(toolkit::where(h, w.algorithm) + ": the ranks wait for each other in a cycle of sends, which "
                           "no receive breaks: " + group_.name(rank()) + " waits to send to " +
                           group_.world_name(mine->peer) + chain + " (every one sends before it receives)");
    r = b->peer;
  }
}

}  // namespace tutti
