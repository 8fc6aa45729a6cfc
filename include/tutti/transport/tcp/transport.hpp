/// \file
/// `tutti::tcp`: the class (see tutti/transport/tcp.hpp for the whole picture): its data path,
/// which moves a message's frame and payload over non-blocking sockets with one loop per call
/// (`toolkit::wait_until`), and its notices, frames written between messages that tell a peer
/// why this rank failed, timed out, waits, or left last words. Start-up is in tcp/startup.hpp,
/// the sockets in tcp/sockets.hpp, the wire's parsers in tcp/wire.hpp.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/tcp/grow.hpp"
#include "tutti/transport/tcp/options.hpp"
#include "tutti/transport/tcp/shrink.hpp"
#include "tutti/transport/tcp/sockets.hpp"
#include "tutti/transport/tcp/startup.hpp"
#include "tutti/transport/tcp/wire.hpp"
#include "tutti/transport/toolkit.hpp"

namespace tutti {

/// The TCP transport. Value type; copies share the connections.
class tcp {
 public:
  /// automatic's tuned-table rows for this transport (tuned_table.hpp).
  static constexpr std::string_view tuning_kind = "tcp";

  /// Joins the job the environment describes (`job_env::from_env`, `config::from_env`,
  /// `tcp_options::from_env`, `TUTTI_JOB_TOKEN`). Needs `MASTER_PORT` (and `MASTER_ADDR`
  /// unless every rank runs on this host); waits for the other ranks up to `TUTTI_TIMEOUT`.
  /// With `TUTTI_JOIN=1`, joins a running job instead, through its store (MASTER_ADDR,
  /// MASTER_PORT, TUTTI_JOB_TOKEN): the transport of the world its ranks' next `grow()` makes,
  /// in which this process has a rank after the old ones (tcp/grow.hpp).
  static tcp from_env() {
    const config cfg = config::from_env();
    const char* token = detail::getenv_nonempty("TUTTI_JOB_TOKEN");
    const char* join = detail::getenv_nonempty("TUTTI_JOIN");
    if (join && std::string_view(join) != "0") {
      if (std::string_view(join) != "1") throw config_error("TUTTI_JOIN='" + std::string(join) + "': use 1 (join a running job) or 0");
      return adopt(detail::tcp_impl::join_world(cfg, tcp_options::from_env(), token ? token : ""));
    }
    return create(job_env::from_env(), cfg, tcp_options::from_env(), token ? token : "");
  }

  TUTTI_COLD static tcp create(const job_env& job, const config& cfg, const tcp_options& opt, const std::string& token) {
    return adopt(detail::tcp_impl::connect_all(job, cfg, opt, token));
  }

  int rank() const noexcept { return group_.rank(); }
  int size() const noexcept { return group_.size(); }

  /// The transport of a sub-group: connections of its own, made by the members together (see
  /// `connect_group`), so that the group and its world can be driven from different threads at
  /// once. The world's connections and acceptor stay as they are.
  tcp sub(std::span<const int> members, std::uint64_t context) const {
    tcp t = *this;
    t.group_ = group_.sub(members, context);
    const auto& world = conn_->world ? conn_->world : conn_;
    t.conn_ = detail::tcp_impl::connect_group(world, t.group_.members(), context);
    return t;
  }

  /// After a failure, the transport of a new job of the ranks still alive that call this too,
  /// in their old order (`communicator::shrink`; tcp/shrink.hpp says how they agree, also when
  /// rank 0, the store's host, is the one lost: the lowest survivor serves the new store). A rank
  /// alive but silent until `timeout` is left out; if it calls shrink later, it raises
  /// `errc::aborted` saying so. This transport's connections are closed.
  TUTTI_COLD tcp shrink(std::chrono::milliseconds timeout, std::vector<int>* kept = nullptr) const {
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

  /// The transport of a larger world: this one's ranks (same numbers) and `joiners` processes
  /// started with `TUTTI_JOIN=1`, numbered after them in the order they came (`communicator::grow`;
  /// tcp/grow.hpp). Rank 0 waits up to `timeout` for them. This transport stays usable.
  TUTTI_COLD tcp grow(int joiners, std::chrono::milliseconds timeout) const {
    if (group_.context() != 0) throw usage_error("tcp grow: call it on the world communicator, not on a group");
    return adopt(detail::tcp_impl::grow_world(*conn_, joiners, timeout));
  }

  /// Where this world's store listens ("host:port"): what joiners need as MASTER_ADDR and
  /// MASTER_PORT (it moves when a shrink loses rank 0). Empty for a world of one without a store.
  std::string store_address() const {
    const auto& j = conn_->world ? conn_->world->job : conn_->job;
    return j.master_port ? detail::net::host_port(detail::tcp_impl::store_host(j), j.master_port) : std::string();
  }

  // ---- point to point -------------------------------------------------------------------

  void send(int peer, const header& h, const std::byte* data, const wait_context& w) {
    outgoing out(*this, peer, h, data);
    run(&out, nullptr, w);
  }
  void recv(int peer, const header& h, std::byte* data, const wait_context& w) {
    incoming in(*this, peer, h, data, nullptr);
    run(nullptr, &in, w);
  }
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& w) {
    outgoing out(*this, to, hs, sdata);
    incoming in(*this, from, hr, rdata, nullptr);
    run(&out, &in, w);
  }
  void recv_with(int peer, const header& h, byte_consumer consume, const wait_context& w) {
    incoming in(*this, peer, h, nullptr, &consume);
    run(nullptr, &in, w);
  }
  void sendrecv_with(int to, const header& hs, const std::byte* sdata, int from, const header& hr,
                     byte_consumer consume, const wait_context& w) {
    outgoing out(*this, to, hs, sdata);
    incoming in(*this, from, hr, nullptr, &consume);
    run(&out, &in, w);
  }

  // ---- notices ----------------------------------------------------------------------------

  /// Marks this rank failed: tells every peer why (where its stream is between messages) and
  /// closes every connection, so peers raise `peer_lost` naming this rank instead of waiting.
  /// The notice cannot be lost to a reset: a socket closed while it holds unread bytes (a peer's
  /// message this rank will never read) sends one, and a reset throws away what this side had
  /// not yet sent. So the connections are shut for writing (a FIN behind the notice) and read
  /// dry until all of it has left this host, for at most `notice_linger` (or a quarter of the
  /// deadline), and only then closed (`close_gracefully`).
  void fail(std::string_view what) noexcept {
    auto& m = *conn_;
    try {
      if (m.failure.empty()) m.failure = what.empty() ? std::string("failed") : toolkit::notice_text(what);
    } catch (...) {
    }
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

  /// Leaves `what` as this rank's last words (empty: none) with every peer whose stream is
  /// between messages; a peer that then loses this rank, or times out waiting for it, quotes them.
  void note(std::string_view what) noexcept {
    try {
      const std::string text = toolkit::notice_text(what);
      for (auto& streams : conn_->peers)
        if (!streams.empty() && streams[0]->sock.is_open() && streams[0]->clean)
          write_notice(*streams[0], toolkit::wire::kind::note, text);
    } catch (...) {
    }
  }

  /// The options this transport runs with (streams, buffers, ...).
  const tcp_options& options() const noexcept { return conn_->opt; }

  /// The descriptor of connection `stream` to `peer` (a rank of this group): for diagnostics
  /// and tests. Writing to it corrupts the stream.
  int native_handle(int peer, int stream = 0) const {
    return conn_->peers[static_cast<std::size_t>(group_.world(peer))][static_cast<std::size_t>(stream)]->fd();
  }

 private:
  static tcp adopt(std::shared_ptr<detail::tcp_impl::connections> c) {
    tcp t;
    t.group_ = toolkit::group_map(c->world_size, c->world_rank);
    t.conn_ = std::move(c);
    return t;
  }

  using link = detail::tcp_impl::link;
  using frame = toolkit::wire::frame;
  using kind = toolkit::wire::kind;

  /// Writes a notice frame and its text; best effort: a full socket buffer drops it. The stream
  /// stays between messages only if all of it went.
  static void write_notice(link& l, kind k, std::string_view text) noexcept {
    frame f;
    f.magic = static_cast<std::uint32_t>(k);
    f.bytes = text.size();
    std::array<asio::const_buffer, 2> bufs{asio::buffer(&f, sizeof f), asio::buffer(text.data(), text.size())};
    asio::error_code ec;
    l.clean = l.sock.write_some(bufs, ec) == sizeof f + text.size();
  }

  /// One stretch of bytes to move on one link: the frame (stream 0) and a part of the payload.
  struct part {
    link* l = nullptr;
    std::size_t offset = 0, n = 0, done = 0;  // payload range [offset, offset+n), bytes moved
    std::size_t head_done = 0;                // frame bytes moved (stream 0 only)
    bool has_head = false;
    std::size_t piece = 0;                    // recv_with: bytes in the bounce buffer
    bool finished(std::size_t head) const { return done == n && (!has_head || head_done == head); }
  };

  struct outgoing {
    outgoing(tcp& t, int peer_, const header& h_, const std::byte* data_) : peer(peer_), h(h_), data(data_) {
      header x = h;
      x.fp.context = t.group_.context();
      wire = frame::of(kind::message, x);
      t.plan(peer, h.bytes, parts, count);
    }
    int peer;
    const header& h;
    const std::byte* data;
    frame wire{};
    std::array<part, 16> parts;
    int count = 0;
  };

  struct incoming {
    incoming(tcp& t, int peer_, const header& h_, std::byte* dst_, byte_consumer* consume_)
        : peer(peer_), h(h_), dst(dst_), consume(consume_) {
      t.plan(peer, h.bytes, parts, count);
    }
    int peer;
    const header& h;
    std::byte* dst;
    byte_consumer* consume;
    frame wire{};
    bool checked = false;
    bool told = false;  // the peer has been sent a waiting notice for this message
    std::array<part, 16> parts;
    int count = 0;
  };

  /// Cuts `bytes` of payload to `peer` into one part per stream (only the first when the
  /// payload is small), each starting at a multiple of 64 bytes.
  void plan(int peer, std::size_t bytes, std::array<part, 16>& parts, int& count) {
    auto& m = *conn_;
    if (!m.failure.empty()) throw error(errc::aborted, "tcp: this rank failed earlier: " + m.failure);
    if (peer < 0 || peer >= size() || peer == rank())
      throw usage_error("tcp: rank " + std::to_string(rank()) + " cannot send to or receive from rank " +
                        std::to_string(peer) + " (itself, or outside the group of " + std::to_string(size()) + ")");
    auto& streams = m.peers[static_cast<std::size_t>(group_.world(peer))];
    const std::size_t k = bytes >= m.opt.stripe_bytes ? streams.size() : 1;
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

  /// Moves `out` and `in` (either may be null) until both are complete, by the deadline: each
  /// look moves what it can on every socket (so a sendrecv is full duplex), then the wait spins
  /// for `TUTTI_TCP_SPIN_US` after the last progress and sleeps in `poll()`.
  void run(outgoing* out, incoming* in, const wait_context& w) {
    std::array<pollfd, 32> fds;  // at most 16 parts each way
    const header& h = out ? out->h : in->h;
    const int peer = out ? out->peer : in->peer;
    toolkit::wait_until(
        w, {h, rank(), out ? "to send to" : "to receive from", peer},
        toolkit::wait_policy{0, conn_->opt.spin, {}, std::chrono::milliseconds(1000)},
        [&] {
          bool moved = false, done = true;
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
          const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
          ::poll(fds.data(), nfds, static_cast<int>(std::max<long long>(left, 0)));
        },
        [&](auto) -> std::chrono::steady_clock::time_point { timed_out(out, in, w); });
  }

  /// One gather write of what is left of the frame and the part; true if bytes moved.
  bool write_part(outgoing& o, part& p, const wait_context& w) {
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

  /// Reads what has arrived for `p`: the frame first (checked before any payload moves), then
  /// the payload into the destination or, for a consumer, into the link's bounce buffer.
  bool read_part(incoming& in, part& p, const wait_context& w) {
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

  /// The text of a notice whose frame was just read (best effort, briefly).
  static std::string notice_body(link& l, std::size_t n) {
    std::string text(n, '\0');
    try {
      detail::tcp_impl::io_by(l, text.data(), text.size(), false, std::chrono::steady_clock::now() + std::chrono::seconds(1), "");
    } catch (const error&) {
      text = "(reason lost)";
    }
    return text;
  }

  /// Checks the frame that arrived where `in` expects its header. True for the header of a
  /// message (checked: `toolkit::check_header`); false for a notice that precedes it (a stall
  /// or a note, kept in the link; a waiting notice, judged); `peer_lost` for a failure notice.
  bool check(incoming& in, part& p, const wait_context& w) {
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
        // The peer failed and said why.
        throw peer_lost(toolkit::peer_failed_text(in.h, w.algorithm, group_.name(in.peer), "rank " + std::to_string(rank()),
                                                  notice_body(*p.l, f.text_bytes)));
      default: break;
    }
    header want = in.h;
    want.fp.context = group_.context();
    toolkit::check_header(want, rank(), f.h, in.peer, w.algorithm);
    in.checked = true;
    return true;
  }

  /// Ranks that disagree about a call can wait to receive from each other, where nothing will
  /// ever come (two ranks that each take the other for the root; with more ranks, a cycle).
  /// So a receive still without its header after a moment writes a 64-byte notice of what it
  /// waits for to every peer of the group, once per call, where its stream to that peer is
  /// between messages and has room. A rank waiting for this one meets it where it expects a
  /// header (see `waiting_notice`); the others drop it when they next read from this rank.
  void tell_waiting(incoming& in) {
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

  /// A waiting notice from the peer where this rank expects the header of `in`: the peer waits
  /// for this rank in a later call of this communicator, or in this call with other arguments,
  /// while this rank waits for a message the peer has not sent (it would precede the notice):
  /// `mismatch_error` naming both. Otherwise (an earlier call, the same call, another
  /// communicator, point to point) the notice is stale or harmless: dropped, the header is next.
  void waiting_notice(incoming& in, const fingerprint& theirs, const wait_context& w) {
    fingerprint mine = in.h.fp;
    mine.context = group_.context();
    if (toolkit::left_behind(mine, theirs))
      toolkit::throw_left_behind(in.h, w.algorithm, mine, rank(), theirs, in.peer,
                                 " (each waits for the other: " + group_.name(in.peer) + " waits in " +
                                     std::string(collective_name(theirs.coll)) + " #" + std::to_string(theirs.seq) + ")");
  }

  /// " after its last words: ..." for a peer that left a note on stream 0, else "".
  std::string last_words(int peer) const {
    const link& l = *conn_->peers[static_cast<std::size_t>(group_.world(peer))][0];
    return l.note.empty() ? std::string() : " after its last words: " + l.note;
  }

  [[noreturn]] void lost(int peer, const header& h, const wait_context& w, const char* doing, const asio::error_code& ec) {
    // A peer that failed may have said why before closing, on a stream this rank was not reading
    // (it was sending): the notice is the next thing to read there.
    if (std::string why = failure_notice(peer); !why.empty())
      throw peer_lost(toolkit::peer_failed_text(h, w.algorithm, group_.name(peer), "rank " + std::to_string(rank()), why,
                                                std::string("was ") + doing + " it"));
    const bool closed = ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
    throw peer_lost(toolkit::where(h, w.algorithm) + ": rank " + std::to_string(rank()) + " lost " + group_.name(peer) +
                    " while " + doing + " it (" + std::to_string(h.bytes) + " bytes): " +
                    (closed ? "the connection was closed (the peer exited, crashed or failed)" : ec.message()) +
                    last_words(peer));
  }

  /// The reason a failed peer sent (see `fail`), if it waits unread on stream 0; else its stall
  /// notice's, else empty. Reads past waiting notices and notes (keeping the last note).
  std::string failure_notice(int peer) {
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
      if (f.is(kind::failure)) return text;
      if (f.is(kind::note)) l.note = text;
      else stalled = text;
      at += sizeof f + n;
    }
    return stalled;
  }

  /// After this rank timed out waiting for `peer`: up to `grace` for a notice from the peer (it
  /// timed out or failed too), read where its stream is between messages. After a stall notice
  /// it waits up to twice `grace` more for the failure notice that follows, whose text may name
  /// a rank further down a chain of waiting ranks. Returns the failure notice's text, else the
  /// stall notice's (also one read earlier, which makes the first wait the longer one), else
  /// empty (none, a message came instead, or the peer closed the connection).
  std::string await_notice(int peer, std::chrono::milliseconds grace) {
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
        if (f.is(kind::failure)) return buf.substr(sizeof f);
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

  [[noreturn]] void timed_out(outgoing* out, incoming* in, const wait_context& w) {
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
    const std::string why = await_notice(peer, std::min<std::chrono::milliseconds>(std::chrono::milliseconds(500), w.timeout));
    if (!why.empty())
      throw peer_lost(toolkit::where(h, w.algorithm) + ": " + group_.name(peer) + " failed as well while rank " +
                      std::to_string(rank()) + " waited for it: " + why);
    throw timeout_error(what + last_words(peer));
  }

  std::shared_ptr<detail::tcp_impl::connections> conn_;
  toolkit::group_map group_;
};

static_assert(transport<tcp> && zero_copy_recv<tcp> && failure_notices<tcp> && last_words<tcp> && from_environment<tcp> &&
              shrinkable<tcp> && growable<tcp>);

}  // namespace tutti
