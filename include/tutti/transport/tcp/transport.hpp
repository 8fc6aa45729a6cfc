/// \file
/// `tutti::tcp`: the class (see tutti/transport/tcp.hpp for the whole picture): its data path,
/// which moves a message's frame and payload over non-blocking sockets with one loop per call
/// (`toolkit::wait_until`), and its notices, frames written between messages that tell a peer
/// why this rank failed, timed out, waits, or left last words. Start-up is in tcp/startup.hpp,
/// the sockets in tcp/sockets.hpp, the wire's parsers in tcp/wire.hpp.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/tcp/matching.hpp"
#include "tutti/transport/tcp/options.hpp"
#include "tutti/transport/tcp/wire.hpp"
#include "tutti/transport/toolkit.hpp"

namespace tutti {

namespace detail::tcp_impl {
// Defined with Asio in tutti/transport/tcp/sockets.hpp, which transport.ipp includes: the class
// holds its connections by `shared_ptr` and needs only their names here, so that a program
// compiled against tutti::compiled (TUTTI_SEPARATE_COMPILATION) does not parse Asio.
struct link;
struct connections;
}  // namespace detail::tcp_impl

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
  static tcp from_env();

  static tcp create(const job_env& job, const config& cfg, const tcp_options& opt, const std::string& token);

  int rank() const noexcept { return group_.rank(); }
  int size() const noexcept { return group_.size(); }

  /// The transport of a sub-group: connections of its own, made by the members together (see
  /// `connect_group`), so that the group and its world can be driven from different threads at
  /// once. The world's connections and acceptor stay as they are.
  tcp sub(std::span<const int> members, std::uint64_t context) const;

  /// After a failure, the transport of a new job of the ranks still alive that call this too,
  /// in their old order (`communicator::shrink`; tcp/shrink.hpp says how they agree, also when
  /// rank 0, the store's host, is the one lost: the lowest survivor serves the new store). A rank
  /// alive but silent until `timeout` is left out; if it calls shrink later, it raises
  /// `errc::aborted` saying so. This transport's connections are closed.
  tcp shrink(std::chrono::milliseconds timeout, std::vector<int>* kept = nullptr) const;

  /// The transport of a larger world: this one's ranks (same numbers) and `joiners` processes
  /// started with `TUTTI_JOIN=1`, numbered after them in the order they came (`communicator::grow`;
  /// tcp/grow.hpp). Rank 0 waits up to `timeout` for them. This transport stays usable.
  tcp grow(int joiners, std::chrono::milliseconds timeout) const;

  /// Where this world's store listens ("host:port"): what joiners need as MASTER_ADDR and
  /// MASTER_PORT (it moves when a shrink loses rank 0). Empty for a world of one without a store.
  std::string store_address() const;

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

  /// Point-to-point with matching of its own (`matched_p2p`), over a connection per pair apart
  /// from the collectives' (tcp/matching.hpp): eager up to `detail::tcp_impl::p2p_eager_bytes`,
  /// larger messages by rendezvous straight into the receive buffer.
  std::shared_ptr<detail::operation_state> post_send(const p2p_post& p) {
    return detail::tcp_impl::p2p_post_op(conn_, p, true);
  }
  std::shared_ptr<detail::operation_state> post_recv(const p2p_post& p) {
    return detail::tcp_impl::p2p_post_op(conn_, p, false);
  }
  std::vector<std::string> pending_p2p() const { return detail::tcp_impl::p2p_pending(*conn_); }

  // ---- notices ----------------------------------------------------------------------------

  /// Marks this rank failed: tells every peer why (where its stream is between messages) and
  /// closes every connection, so peers raise `peer_lost` naming this rank instead of waiting.
  /// The notice cannot be lost to a reset: a socket closed while it holds unread bytes (a peer's
  /// message this rank will never read) sends one, and a reset throws away what this side had
  /// not yet sent. So the connections are shut for writing (a FIN behind the notice) and read
  /// dry until all of it has left this host, for at most `notice_linger` (or a quarter of the
  /// deadline), and only then closed (`close_gracefully`).
  void fail(std::string_view what) noexcept;

  /// Leaves `what` as this rank's last words (empty: none) with every peer whose stream is
  /// between messages; a peer that then loses this rank, or times out waiting for it, quotes them.
  void note(std::string_view what) noexcept;

  /// The options this transport runs with (streams, buffers, ...).
  const tcp_options& options() const noexcept;

  /// The descriptor of connection `stream` to `peer` (a rank of this group): for diagnostics
  /// and tests. Writing to it corrupts the stream.
  int native_handle(int peer, int stream = 0) const;

 private:
  static tcp adopt(std::shared_ptr<detail::tcp_impl::connections> c);

  using link = detail::tcp_impl::link;
  using frame = toolkit::wire::frame;
  using kind = toolkit::wire::kind;

  /// Writes a notice frame and its text; best effort: a full socket buffer drops it. The stream
  /// stays between messages only if all of it went.
  static void write_notice(link& l, kind k, std::string_view text) noexcept;

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
    outgoing(tcp& t, int peer_, const header& h_, const std::byte* data_);
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
  void plan(int peer, std::size_t bytes, std::array<part, 16>& parts, int& count);

  /// Moves `out` and `in` (either may be null) until both are complete, by the deadline: each
  /// look moves what it can on every socket (so a sendrecv is full duplex), then the wait spins
  /// for `TUTTI_TCP_SPIN_US` after the last progress and sleeps in `poll()`.
  void run(outgoing* out, incoming* in, const wait_context& w);

  /// One gather write of what is left of the frame and the part; true if bytes moved.
  bool write_part(outgoing& o, part& p, const wait_context& w);

  /// Reads what has arrived for `p`: the frame first (checked before any payload moves), then
  /// the payload into the destination or, for a consumer, into the link's bounce buffer.
  bool read_part(incoming& in, part& p, const wait_context& w);

  /// The text of a notice whose frame was just read (best effort, briefly).
  static std::string notice_body(link& l, std::size_t n);

  /// Checks the frame that arrived where `in` expects its header. True for the header of a
  /// message (checked: `toolkit::check_header`); false for a notice that precedes it (a stall
  /// or a note, kept in the link; a waiting notice, judged); `peer_lost` for a failure notice.
  bool check(incoming& in, part& p, const wait_context& w);

  /// Ranks that disagree about a call can wait to receive from each other, where nothing will
  /// ever come (two ranks that each take the other for the root; with more ranks, a cycle).
  /// So a receive still without its header after a moment writes a 64-byte notice of what it
  /// waits for to every peer of the group, once per call, where its stream to that peer is
  /// between messages and has room. A rank waiting for this one meets it where it expects a
  /// header (see `waiting_notice`); the others drop it when they next read from this rank.
  void tell_waiting(incoming& in);

  /// A waiting notice from the peer where this rank expects the header of `in`: the peer waits
  /// for this rank in a later call of this communicator, or in this call with other arguments,
  /// while this rank waits for a message the peer has not sent (it would precede the notice):
  /// `mismatch_error` naming both. Otherwise (an earlier call, the same call, another
  /// communicator, point to point) the notice is stale or harmless: dropped, the header is next.
  void waiting_notice(incoming& in, const fingerprint& theirs, const wait_context& w);

  /// " after its last words: ..." for a peer that left a note on stream 0, else "".
  std::string last_words(int peer) const;

  [[noreturn]] void lost(int peer, const header& h, const wait_context& w, const char* doing,
                         const std::error_code& ec);

  /// The reason a failed peer sent (see `fail`), if it waits unread on stream 0; else its stall
  /// notice's, else empty; `*failed` is set for a failure notice. Reads past waiting notices
  /// and notes (keeping the last note).
  std::string failure_notice(int peer, bool* failed = nullptr);

  /// After this rank timed out waiting for `peer`: up to `grace` for a notice from the peer (it
  /// timed out or failed too), read where its stream is between messages. After a stall notice
  /// it waits up to twice `grace` more for the failure notice that follows, whose text may name
  /// a rank further down a chain of waiting ranks. Returns the failure notice's text, else the
  /// stall notice's (also one read earlier, which makes the first wait the longer one), else
  /// empty (none, a message came instead, or the peer closed the connection); `failed` is set
  /// for a failure notice.
  std::string await_notice(int peer, std::chrono::milliseconds grace, bool& failed);

  [[noreturn]] void timed_out(outgoing* out, incoming* in, const wait_context& w);

  /// Raises what `peer`'s notice `why` (from `failure_notice` or `await_notice`) says, in the
  /// call `here`: its failure as the peer's kind (`failed`), or its stall as a timeout naming it;
  /// returns where there was none.
  void raise_peer_notice(const std::string& why, bool failed, int peer, const std::string& here);

  std::shared_ptr<detail::tcp_impl::connections> conn_;
  toolkit::group_map group_;
};

static_assert(transport<tcp> && zero_copy_recv<tcp> && failure_notices<tcp> && last_words<tcp> && from_environment<tcp> &&
              shrinkable<tcp> && growable<tcp> && matched_p2p<tcp>);

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/tcp/transport.ipp"
#endif
