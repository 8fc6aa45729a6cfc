/// \file
/// Definitions for tutti/transport/tcp/transport.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>

#include "tutti/transport/tcp/grow.hpp"
#include "tutti/transport/tcp/shrink.hpp"
#include "tutti/transport/tcp/sockets.hpp"
#include "tutti/transport/tcp/startup.hpp"
#include "tutti/transport/tcp/transport.hpp"

namespace tutti {

// `tcp::lost` takes a `std::error_code`: what Asio's `asio::error_code` is.
static_assert(std::is_same_v<asio::error_code, std::error_code>);

TUTTI_DECL tcp tcp::from_env() {
  const config cfg = config::from_env();
  const char* token = detail::getenv_nonempty("TUTTI_JOB_TOKEN");
  const char* join = detail::getenv_nonempty("TUTTI_JOIN");
  if (join && std::string_view(join) != "0") {
    if (std::string_view(join) != "1") throw config_error("TUTTI_JOIN='" + std::string(join) + "': use 1 (join a running job) or 0");
    return adopt(detail::tcp_impl::join_world(cfg, tcp_options::from_env(), token ? token : ""));
  }
  return create(job_env::from_env(), cfg, tcp_options::from_env(), token ? token : "");
}

TUTTI_COLD TUTTI_DECL tcp tcp::create(const job_env& job, const config& cfg, const tcp_options& opt,
                                      const std::string& token) {
  return adopt(detail::tcp_impl::connect_all(job, cfg, opt, token));
}

TUTTI_DECL tcp tcp::sub(std::span<const int> members, std::uint64_t context) const {
  tcp t = *this;
  t.group_ = group_.sub(members, context);
  const auto& world = conn_->world ? conn_->world : conn_;
  t.conn_ = detail::tcp_impl::connect_group(world, t.group_.members(), context);
  t.conn_->p2p = detail::tcp_impl::p2p_make(t.group_);
  return t;
}

TUTTI_COLD TUTTI_DECL tcp tcp::shrink(std::chrono::milliseconds timeout, std::vector<int>* kept) const {
  if (group_.context() != 0) throw usage_error("tcp shrink: call it on the world communicator, not on a group");
  auto& m = *conn_;
  if (!m.acceptor) {  // a world of one rank
    if (kept) *kept = {0};
    return create(m.job, m.cfg, m.opt, m.token);
  }
  tcp t = adopt(detail::tcp_impl::shrink_agreement(m, timeout).run(kept));
  // The old job is over for this rank: its peers learn it from its connections, if open.
  const_cast<tcp&>(*this).fail("it shrank into a new job of " + std::to_string(t.size()) + " ranks");
  return t;
}

TUTTI_COLD TUTTI_DECL tcp tcp::grow(int joiners, std::chrono::milliseconds timeout) const {
  if (group_.context() != 0) throw usage_error("tcp grow: call it on the world communicator, not on a group");
  return adopt(detail::tcp_impl::grow_world(*conn_, joiners, timeout));
}

TUTTI_DECL std::string tcp::store_address() const {
  const auto& j = conn_->world ? conn_->world->job : conn_->job;
  return j.master_port ? detail::net::host_port(detail::tcp_impl::store_host(j), j.master_port) : std::string();
}

TUTTI_DECL void tcp::fail(std::string_view what) noexcept {
  auto& m = *conn_;
  try {
    if (m.failure.empty()) m.failure = what.empty() ? std::string("failed") : toolkit::notice_text(what);
  } catch (...) {
  }
  detail::tcp_impl::p2p_fail(m, m.failure);
  std::vector<link*> open;
  try {
    for (auto& streams : m.peers)
      for (std::size_t s = 0; s < streams.size(); ++s) {
        link& l = *streams[s];
        if (!l.sock.is_open()) continue;
        if (s == 0 && l.clean) write_notice(l, toolkit::wire::kind::failure, m.failure);
        open.push_back(&l);
      }
    detail::tcp_impl::close_gracefully(open, std::min({m.linger, m.timeout / 4, detail::tcp_impl::notice_linger}), true);
  } catch (...) {  // no memory for the list: close at once
  }
  for (auto& streams : m.peers)
    for (auto& l : streams) {
      asio::error_code ec;
      if (l->sock.is_open()) l->sock.close(ec);
    }
}

TUTTI_DECL void tcp::note(std::string_view what) noexcept {
  try {
    const std::string text = toolkit::notice_text(what);
    for (auto& streams : conn_->peers)
      if (!streams.empty() && streams[0]->sock.is_open() && streams[0]->clean)
        write_notice(*streams[0], toolkit::wire::kind::note, text);
  } catch (...) {
  }
}

TUTTI_DECL const tcp_options& tcp::options() const noexcept { return conn_->opt; }

TUTTI_DECL int tcp::native_handle(int peer, int stream) const {
  return conn_->peers[static_cast<std::size_t>(group_.world(peer))][static_cast<std::size_t>(stream)]->fd();
}

TUTTI_DECL tcp tcp::adopt(std::shared_ptr<detail::tcp_impl::connections> c) {
  tcp t;
  t.group_ = toolkit::group_map(c->world_size, c->world_rank);
  c->p2p = detail::tcp_impl::p2p_make(t.group_);
  t.conn_ = std::move(c);
  return t;
}

TUTTI_DECL void tcp::write_notice(link& l, kind k, std::string_view text) noexcept {
  frame f;
  f.magic = static_cast<std::uint32_t>(k);
  f.bytes = text.size();
  std::array<asio::const_buffer, 2> bufs{asio::buffer(&f, sizeof f), asio::buffer(text.data(), text.size())};
  asio::error_code ec;
  l.clean = l.sock.write_some(bufs, ec) == sizeof f + text.size();
}

TUTTI_DECL tcp::outgoing::outgoing(tcp& t, int peer_, const header& h_, const std::byte* data_)
    : peer(peer_), h(h_), data(data_) {
  header x = h;
  x.fp.context = t.group_.context();
  wire = frame::of(kind::message, x);
  t.plan(peer, h.bytes, parts, count);
}

TUTTI_DECL void tcp::plan(int peer, std::size_t bytes, std::array<part, 16>& parts, int& count) {
  auto& m = *conn_;
  if (!m.failure.empty()) throw error(errc::aborted, "tcp: this rank failed earlier: " + m.failure);
  if (peer < 0 || peer >= size() || peer == rank())
    throw usage_error("tcp: rank " + std::to_string(rank()) + " cannot send to or receive from rank " +
                      std::to_string(peer) + " (itself, or outside the group of " + std::to_string(size()) + ")");
  auto& streams = m.peers[static_cast<std::size_t>(group_.world(peer))];
  const std::size_t k = bytes >= m.opt.stripe_bytes ? static_cast<std::size_t>(m.opt.streams) : 1;
  const std::size_t per = ((bytes + k - 1) / k + 63) & ~std::size_t{63};
  count = 0;
  for (std::size_t s = 0; s < k; ++s) {
    const std::size_t off = std::min(bytes, s * per), end = std::min(bytes, off + per);
    if (s > 0 && end == off) break;
    part& p = parts[static_cast<std::size_t>(count++)];
    p.l = streams[s].get();
    p.offset = off;
    p.n = end - off;
    p.has_head = s == 0;
  }
}

TUTTI_DECL void tcp::run(outgoing* out, incoming* in, const wait_context& w) {
  std::array<pollfd, 32> fds;  // at most 16 parts each way
  const header& h = out ? out->h : in->h;
  const int peer = out ? out->peer : in->peer;
  bool p2p_pending = false;  // point-to-point posted before this call: moved by each look
  toolkit::wait_until(
      w, {h, rank(), out ? "to send to" : "to receive from", peer, in ? in->peer : peer},
      toolkit::wait_policy{0, conn_->opt.spin, {}, std::chrono::milliseconds(1000)},
      [&] {
        bool moved = false, done = true;
        p2p_pending = detail::tcp_impl::p2p_drive(*conn_);
        if (out)
          for (int i = 0; i < out->count; ++i) {
            part& p = out->parts[static_cast<std::size_t>(i)];
            if (p.finished(sizeof out->wire)) continue;
            moved |= write_part(*out, p, w);
            if (!p.finished(sizeof out->wire)) done = false;
          }
        if (in)
          for (int i = 0; i < in->count; ++i) {
            part& p = in->parts[static_cast<std::size_t>(i)];
            if (!p.has_head && !in->checked) {  // the payload waits for the checked header
              done = false;
              continue;
            }
            if (p.finished(sizeof in->wire)) continue;
            moved |= read_part(*in, p, w);
            if (!p.finished(sizeof in->wire)) done = false;
          }
        if (done) {
          if (in) in->parts[0].l->in_clean = true;
          return toolkit::look::done;
        }
        return moved ? toolkit::look::moved : toolkit::look::idle;
      },
      [&](auto waited) {
        if (in && !in->checked && !in->told && waited >= detail::tcp_impl::waiting_notice_after) tell_waiting(*in);
      },
      [&](auto until) {
        std::size_t nfds = 0;
        if (out)
          for (int i = 0; i < out->count; ++i) {
            part& p = out->parts[static_cast<std::size_t>(i)];
            if (!p.finished(sizeof out->wire)) fds[nfds++] = {p.l->fd(), POLLOUT, 0};
          }
        if (in)
          for (int i = 0; i < in->count; ++i) {
            part& p = in->parts[static_cast<std::size_t>(i)];
            if ((p.has_head || in->checked) && !p.finished(sizeof in->wire)) fds[nfds++] = {p.l->fd(), POLLIN, 0};
          }
        auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
        if (p2p_pending) left = std::min<long long>(left, 1);
        ::poll(fds.data(), nfds, static_cast<int>(std::max<long long>(left, 0)));
      },
      [&](auto) -> std::chrono::steady_clock::time_point { timed_out(out, in, w); });
}

TUTTI_DECL bool tcp::write_part(outgoing& o, part& p, const wait_context& w) {
  std::array<asio::const_buffer, 2> bufs{
      asio::buffer(reinterpret_cast<const char*>(&o.wire) + p.head_done, p.has_head ? sizeof o.wire - p.head_done : 0),
      asio::buffer(o.data + p.offset + p.done, p.n - p.done)};
  asio::error_code ec;
  std::size_t k = p.l->sock.write_some(bufs, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again || ec == asio::error::interrupted) return false;
  if (ec) lost(o.peer, o.h, w, "sending to", ec);
  p.l->clean = false;
  if (p.has_head) {
    const std::size_t hk = std::min(k, sizeof o.wire - p.head_done);
    p.head_done += hk;
    k -= hk;
  }
  p.done += k;
  if (p.finished(sizeof o.wire)) p.l->clean = true;
  return true;
}

TUTTI_DECL bool tcp::read_part(incoming& in, part& p, const wait_context& w) {
  asio::error_code ec;
  bool moved = false;
  if (p.has_head && p.head_done < sizeof in.wire) {
    const std::size_t k =
        p.l->sock.read_some(asio::buffer(reinterpret_cast<char*>(&in.wire) + p.head_done, sizeof in.wire - p.head_done), ec);
    p.head_done += k;
    if (k) p.l->in_clean = false;
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again && ec != asio::error::interrupted)
      lost(in.peer, in.h, w, "receiving from", ec);
    if (p.head_done < sizeof in.wire) return k > 0;
    if (!check(in, p, w)) {  // a notice: the message's frame comes later
      p.head_done = 0;
      p.l->in_clean = true;
      return true;
    }
    moved = true;
    if (p.n == 0) return true;
  }
  if (p.done == p.n) return moved;
  std::byte* to;
  std::size_t room;
  if (in.consume) {
    std::byte* b = p.l->bounce.reserve(detail::tcp_impl::piece_bytes);
    to = b + p.piece;
    room = std::min(detail::tcp_impl::piece_bytes - p.piece, p.n - p.done);
  } else {
    to = in.dst + p.offset + p.done;
    room = p.n - p.done;
  }
  const std::size_t k = p.l->sock.read_some(asio::buffer(to, room), ec);
  if (ec && ec != asio::error::would_block && ec != asio::error::try_again && ec != asio::error::interrupted)
    lost(in.peer, in.h, w, "receiving from", ec);
  p.done += k;
  if (in.consume) {
    p.piece += k;
    if (p.piece == detail::tcp_impl::piece_bytes || p.done == p.n) {
      // Pieces start at 64-byte multiples of the payload: parts do, and pieces are 256 KiB.
      (*in.consume)(p.l->bounce.reserve(detail::tcp_impl::piece_bytes), p.offset + p.done - p.piece, p.piece);
      p.piece = 0;
    }
  }
  return moved || k > 0;
}

TUTTI_DECL std::string tcp::notice_body(link& l, std::size_t n) {
  std::string text(n, '\0');
  try {
    detail::tcp_impl::io_by(l, text.data(), text.size(), false, std::chrono::steady_clock::now() + std::chrono::seconds(1), "");
  } catch (const error&) {
    text = "(reason lost)";
  }
  return text;
}

TUTTI_DECL bool tcp::check(incoming& in, part& p, const wait_context& w) {
  detail::tcp_impl::frame_head f;
  try {
    f = detail::tcp_impl::parse_frame_head(in.wire);
  } catch (const detail::net::malformed& e) {
    throw error(errc::aborted, toolkit::where(in.h, w.algorithm) + ": rank " + std::to_string(rank()) +
                                   " received a malformed header from " + group_.name(in.peer) + " (" + e.reason + ")");
  }
  switch (f.kind) {
    case kind::stall: p.l->stalled = notice_body(*p.l, f.text_bytes); return false;
    case kind::note: p.l->note = notice_body(*p.l, f.text_bytes); return false;
    case kind::waiting: waiting_notice(in, f.h.fp, w); return false;
    case kind::failure:
      // The peer failed and said why: raise its failure, of its kind.
      toolkit::raise_notice(notice_body(*p.l, f.text_bytes), group_, in.peer,
                            toolkit::where(in.h, w.algorithm) + " on " + group_.name(rank()));
    default: break;
  }
  header want = in.h;
  want.fp.context = group_.context();
  toolkit::check_header(want, rank(), f.h, in.peer, w.algorithm);
  in.checked = true;
  return true;
}

TUTTI_DECL void tcp::tell_waiting(incoming& in) {
  in.told = true;
  if (in.h.fp.coll == collective::send_recv) return;
  fingerprint fp = in.h.fp;
  fp.context = group_.context();
  auto& m = *conn_;
  if (m.told == fp) return;
  m.told = fp;
  const frame f = frame::of(kind::waiting, {fp, 0});
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    link& l = *m.peers[static_cast<std::size_t>(group_.world(r))][0];
    if (!l.clean || !l.sock.is_open()) continue;  // mid-message (or closed): no room for a notice
    pollfd pf{l.fd(), POLLOUT, 0};
    if (::poll(&pf, 1, 0) != 1 || !(pf.revents & POLLOUT)) continue;
    asio::error_code ec;
    const std::size_t k = l.sock.write_some(asio::buffer(&f, sizeof f), ec);
    if (k > 0 && k < sizeof f) {
      // Writable sockets take 64 bytes whole in practice; if not, finish the notice, briefly.
      try {
        detail::tcp_impl::io_by(l, const_cast<char*>(reinterpret_cast<const char*>(&f)) + k, sizeof f - k, true,
                                std::chrono::steady_clock::now() + std::chrono::seconds(1), "writing a waiting notice");
      } catch (const error&) {
        l.clean = false;  // the stream is cut mid-notice: no failure notice may follow
      }
    }
  }
}

TUTTI_DECL void tcp::waiting_notice(incoming& in, const fingerprint& theirs, const wait_context& w) {
  fingerprint mine = in.h.fp;
  mine.context = group_.context();
  if (toolkit::left_behind(mine, theirs))
    toolkit::throw_left_behind(in.h, w.algorithm, mine, rank(), theirs, in.peer,
                               " (each waits for the other: " + group_.name(in.peer) + " waits in " +
                                   std::string(collective_name(theirs.coll)) + " #" + std::to_string(theirs.seq) + ")");
}

TUTTI_DECL std::string tcp::last_words(int peer) const {
  const link& l = *conn_->peers[static_cast<std::size_t>(group_.world(peer))][0];
  return l.note.empty() ? std::string() : " after its last words: " + l.note;
}

TUTTI_DECL void tcp::lost(int peer, const header& h, const wait_context& w, const char* doing,
                          const std::error_code& ec) {
  // A peer that failed may have said why before closing, on a stream this rank was not reading
  // (it was sending): the notice is the next thing to read there.
  bool failed = false;
  const std::string why = failure_notice(peer, &failed), here = toolkit::where(h, w.algorithm) + " on " + group_.name(rank());
  raise_peer_notice(why, failed, peer, here);
  const bool closed = ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
  toolkit::throw_lost(toolkit::where(h, w.algorithm) + ": rank " + std::to_string(rank()) + " lost " + group_.name(peer) +
                          " while " + doing + " it (" + std::to_string(h.bytes) + " bytes): " +
                          (closed ? "the connection was closed (the peer exited, crashed or failed)" : ec.message()) +
                          last_words(peer),
                      group_.job_rank(peer));
}

TUTTI_DECL std::string tcp::failure_notice(int peer, bool* failed) {
  link& l = *conn_->peers[static_cast<std::size_t>(group_.world(peer))][0];
  if (!l.in_clean || !l.sock.is_open()) return {};
  std::string buf(4 * (sizeof(frame) + toolkit::max_notice_text), '\0');
  const ssize_t k = ::recv(l.fd(), buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
  std::string stalled = l.stalled;
  for (std::size_t at = 0; k > 0 && at + sizeof(frame) <= static_cast<std::size_t>(k);) {
    frame f;
    std::memcpy(&f, buf.data() + at, sizeof f);
    if (f.is(kind::waiting)) {  // no text follows it
      at += sizeof f;
      continue;
    }
    if (!f.is(kind::failure) && !f.is(kind::stall) && !f.is(kind::note)) break;
    const std::size_t n = std::min<std::size_t>(f.bytes, toolkit::max_notice_text);
    const std::size_t got = std::min(n, static_cast<std::size_t>(k) - at - sizeof f);
    std::string text = got ? buf.substr(at + sizeof f, got) : std::string("(reason lost)");
    if (f.is(kind::failure)) {
      if (failed) *failed = true;
      return text;
    }
    if (f.is(kind::note)) l.note = text;
    else stalled = text;
    at += sizeof f + n;
  }
  return stalled;
}

TUTTI_DECL std::string tcp::await_notice(int peer, std::chrono::milliseconds grace, bool& failed) {
  using clock = std::chrono::steady_clock;
  link& l = *conn_->peers[static_cast<std::size_t>(group_.world(peer))][0];
  if (!l.in_clean || !l.sock.is_open()) return l.stalled;
  // A stall notice read before we timed out: its failure notice may still be a grace away.
  auto until = clock::now() + (l.stalled.empty() ? grace : 2 * grace);
  while (true) {
    frame f{};
    const ssize_t k = ::recv(l.fd(), &f, sizeof f, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return l.stalled;
    if (k == static_cast<ssize_t>(sizeof f)) {
      if (f.is(kind::waiting)) {  // stale or harmless here: drop it
        if (::recv(l.fd(), &f, sizeof f, MSG_DONTWAIT) != static_cast<ssize_t>(sizeof f)) return l.stalled;
        continue;
      }
      if (!f.is(kind::failure) && !f.is(kind::stall) && !f.is(kind::note)) return l.stalled;
      std::string buf(sizeof f + std::min<std::size_t>(f.bytes, toolkit::max_notice_text), '\0');
      try {
        detail::tcp_impl::io_by(l, buf.data(), buf.size(), false, clock::now() + std::chrono::seconds(1), "");
      } catch (const error&) {
        return l.stalled.empty() ? "(reason lost)" : l.stalled;
      }
      if (f.is(kind::failure)) {
        failed = true;
        return buf.substr(sizeof f);
      }
      if (f.is(kind::note)) {
        l.note = buf.substr(sizeof f);
        continue;
      }
      l.stalled = buf.substr(sizeof f);
      until = std::max(until, clock::now() + 2 * grace);
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now());
    if (left.count() <= 0) return l.stalled;
    pollfd pf{l.fd(), POLLIN, 0};
    // A partial frame polls as readable: sleep a moment rather than spin on it.
    if (k > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    else ::poll(&pf, 1, static_cast<int>(left.count()));
  }
}

TUTTI_DECL void tcp::timed_out(outgoing* out, incoming* in, const wait_context& w) {
  // Name what is still missing: the receive when it is unfinished, else the send.
  bool in_missing = false;
  if (in)
    for (int i = 0; i < in->count; ++i) in_missing |= !in->parts[static_cast<std::size_t>(i)].finished(sizeof in->wire);
  const header& h = in_missing ? in->h : out->h;
  const int peer = in_missing ? in->peer : out->peer;
  const std::string what = toolkit::timeout_text(h, w.algorithm, "rank " + std::to_string(rank()), w.timeout,
                                                 in_missing ? "to receive from" : "to send to", group_.name(peer));
  // Tell the peers first, then give the one we waited for a moment to say whether it is stuck
  // itself: each rank of a chain times out within moments of the others, in any order.
  for (auto& streams : conn_->peers)
    if (!streams.empty() && streams[0]->sock.is_open() && streams[0]->clean)
      write_notice(*streams[0], kind::stall, toolkit::notice_text(what));
  // Half a second: the ranks of a chain time out milliseconds apart.
  bool failed = false;
  const std::string why =
      await_notice(peer, std::min<std::chrono::milliseconds>(std::chrono::milliseconds(500), w.timeout), failed);
  const std::string here = toolkit::where(h, w.algorithm) + " on " + group_.name(rank());
  raise_peer_notice(why, failed, peer, here);
  throw timeout_error(what + last_words(peer));
}

TUTTI_DECL void tcp::raise_peer_notice(const std::string& why, bool failed, int peer, const std::string& here) {
  if (failed) toolkit::raise_notice(why, group_, peer, here);
  // A stall notice: the peer timed out as well, waiting for another (named in its text).
  if (!why.empty()) toolkit::raise_failure({errc::timeout, group_.job_rank(peer), why}, here, group_.name(peer), {});
}

}  // namespace tutti
