/// \file
/// `tutti::inproc`: ranks are threads of one process. A send posts an envelope (header + pointer
/// to the sender's memory) in the receiver's mailbox and waits until the receiver has consumed it
/// (rendezvous), so the payload moves once, straight from the sender's view into the receiver's
/// view or reduction: no library buffer in between (`zero_copy_recv`).
///
/// Beyond timeouts, a waiting rank checks what it can see of its peers, so it fails fast with a
/// precise error instead of waiting for the deadline:
/// - a peer that failed (its communicator's `fail`) or whose function threw or returned:
///   `peer_lost` naming it;
/// - a message from the same communicator for this or an earlier collective with a different
///   fingerprint, or a peer waiting in a later call or in this one with other arguments:
///   `mismatch_error` naming both ranks and both values;
/// - ranks that wait for each other in a cycle of sends (each rendezvous waits for a receiver
///   that is itself sending): `mismatch_error` naming the cycle, at once.
///
/// `inproc::run(n, body)` (tutti/group/threads.hpp) starts the threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/core/launch.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/toolkit.hpp"

namespace tutti {

namespace detail::inproc_impl {

struct envelope {
  enum class state { posted, taken, done, rejected };
  int src = 0;  // world rank of the sender
  header h;
  const std::byte* data = nullptr;
  state st = state::posted;
  std::string reason;
  std::optional<fingerprint> rejected_by;  // the receiver's, where its fingerprint differed
};

struct mailbox {
  std::condition_variable cv;
  std::deque<envelope*> q;
};

/// A send or receive posted for point-to-point matching (`inproc::post_send`, `post_recv`).
struct p2p_entry {
  bool send = false;
  int src = 0, dst = 0;  // group ranks; a receive's `src` may be any_source
  int tag = 0;           // a receive's may be any_tag
  dtype type;
  std::size_t count = 0, bytes = 0;
  std::byte* data = nullptr;           // a receive's buffer; a rendezvous send's input
  std::unique_ptr<std::byte[]> eager;  // an eager send's copy of its input
  bool matched = false;                // taken off its queue by its partner: it completes soon
  std::chrono::steady_clock::time_point posted = std::chrono::steady_clock::now();
  std::shared_ptr<operation_state> state = std::make_shared<operation_state>();
};

/// One receiving rank's point-to-point queues on one communicator (context): the receives it
/// posted and the messages that arrived before a receive matched them, each in order.
struct p2p_queues {
  std::deque<std::shared_ptr<p2p_entry>> receives, arrived;
};

enum class rank_state { running, returned, failed };

/// What a rank is blocked in, for its peers' checks.
struct blocked {
  fingerprint fp;
  int peer = -1;                     // world rank waited for
  const envelope* sending = nullptr;  // in a send's rendezvous: the envelope its receiver must take
};

/// What the threads of one `inproc::run` share.
struct world {
  explicit world(int n);

  const int size;
  std::mutex mu;
  std::vector<mailbox> boxes;
  /// What a rank is blocked in, per communicator context: the world and its groups may each be
  /// driven by a thread of their own. A deque (references stay valid while another context
  /// adds its entry) of entries that are reused, so a wait allocates nothing after the first.
  struct blocked_in_context {
    std::uint64_t context = 0;
    bool active = false;
    blocked b;
  };
  std::vector<std::deque<blocked_in_context>> waiting;
  /// Point-to-point matching, apart from the collectives' mailboxes and their lock: the queues
  /// of each (context, receiving world rank).
  std::mutex p2p_mu;
  std::map<std::pair<std::uint64_t, int>, p2p_queues> p2p;
  std::vector<rank_state> state;
  std::vector<std::string> failure;
  std::vector<std::string> note;  // a rank's last words (a usage error), while it is running
  std::vector<std::exception_ptr> errors;  // what each rank's function threw
  int first_failed = -1;                   // the rank that failed first: the run's error is its

  /// The exception of the rank that failed first (its peers' failures follow from it), or null.
  std::exception_ptr first_error() const;

  void notify_all() {
    for (auto& b : boxes) b.cv.notify_all();
  }
  /// Marks `rank` failed with `why` (its communicator failed) and wakes every waiter.
  void fail(int rank, std::string why);
  /// Marks `rank` finished (failed when `error` is set) and wakes every waiter.
  void finish(int rank, std::exception_ptr error);
};

}  // namespace detail::inproc_impl

/// The in-process transport (see the file comment). Made by `inproc::run`; value type, one per
/// rank per communicator.
class inproc {
 public:
  using world = detail::inproc_impl::world;
  /// automatic's tuned-table rows for this transport (tuned_table.hpp).
  static constexpr std::string_view tuning_kind = "inproc";

  /// Runs `f(comm)` on `n` threads, `comm` being a `communicator<inproc, Algorithm>&` of rank
  /// 0..n-1 (by default the communicator's default algorithm, `algo::automatic`); joins them and
  /// rethrows the first exception any rank threw (the other ranks see that rank as lost and stop
  /// promptly, instead of waiting for their deadlines). The communicators are made by
  /// tutti/group/threads.hpp (included by tutti/tutti.hpp; core/launch.hpp says how).
  template <class Algorithm = default_algorithm, class F>
  static void run(int n, F&& f) {
    run_wrapped<Algorithm>(n, [](inproc t) { return t; }, std::forward<F>(f));
  }

  /// As `run`, with each rank's transport wrapped first: `f` gets a
  /// `communicator<decltype(wrap(inproc)), Algorithm>&`. For user transports that delegate to
  /// inproc (see examples/custom_transport.cpp).
  template <class Algorithm = default_algorithm, class Wrap, class F>
  static void run_wrapped(int n, Wrap&& wrap, F&& f) {
    launch_threads(thread_launch<Algorithm>{}, n, std::forward<Wrap>(wrap), std::forward<F>(f));
  }

  /// A transport for `rank` of a fresh world of `n` ranks.
  inproc(std::shared_ptr<world> w, int rank) : world_(std::move(w)), group_(world_->size, rank) {}

  int rank() const noexcept { return group_.rank(); }
  int size() const noexcept { return group_.size(); }

  /// The transport of a sub-group: `members` are ranks of this group, in the new rank order.
  inproc sub(std::span<const int> members, std::uint64_t context) const;

  void send(int peer, const header& h, const std::byte* data, const wait_context& w);

  void recv(int peer, const header& h, std::byte* data, const wait_context& w) {
    copy_to c{data};
    recv_with(peer, h, c, w);
  }

  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& w) {
    copy_to c{rdata};
    sendrecv_with(to, hs, sdata, from, hr, c, w);
  }

  void recv_with(int peer, const header& h, byte_consumer consume, const wait_context& w) {
    std::unique_lock lk(world_->mu);
    receive(lk, peer, h, consume, w);
  }

  void sendrecv_with(int to, const header& hs, const std::byte* sdata, int from, const header& hr,
                     byte_consumer consume, const wait_context& w);

  /// Point-to-point with its own matching (`matched_p2p`): the entry goes on the receiver's
  /// queues (under the world's point-to-point lock), and whichever of a send and its receive
  /// comes second copies the bytes straight from the sender's input to the receiver's buffer.
  /// A send of at most `eager_bytes` is copied aside when no receive waits for it and completes
  /// at once; a larger one completes when its receive has taken it (rendezvous).
  std::shared_ptr<detail::operation_state> post_send(const p2p_post& p);
  std::shared_ptr<detail::operation_state> post_recv(const p2p_post& p);
  /// This rank's sends and receives on this communicator not yet complete, for the flight
  /// recorder: "recv from rank 1 tag=5 (16 bytes), posted 2.1 ms ago".
  std::vector<std::string> pending_p2p() const;
  /// The largest send that completes without its receive (copied aside: an allocation and a
  /// copy, where a rendezvous copies once; measured in bench/RESULTS.md: 64 KiB sent eagerly
  /// moved 770 MB/s, by rendezvous 15,346).
  static constexpr std::size_t eager_bytes = std::size_t{16} << 10;

  /// Marks this rank failed, so its peers raise `peer_lost` with `what` at once.
  void fail(std::string_view what) noexcept;

  /// Leaves `what` as this rank's last words (empty: none), quoted by peers that find it gone.
  void note(std::string_view what) noexcept;

 private:
  using envelope = detail::inproc_impl::envelope;
  using state = envelope::state;

  struct copy_to {
    std::byte* dst;
    void operator()(const std::byte* src, std::size_t offset, std::size_t n) const {
      if (n) std::memcpy(dst + offset, src, n);
    }
  };

  int world_rank(int r) const { return group_.world(r); }
  detail::inproc_impl::mailbox& my_box() const { return world_->boxes[static_cast<std::size_t>(group_.world_rank())]; }

  envelope make_envelope(const header& h, const std::byte* data) const;

  void post(int peer, envelope& e) {
    auto& box = world_->boxes[static_cast<std::size_t>(world_rank(peer))];
    box.q.push_back(&e);
    box.cv.notify_all();
  }

  static bool same_channel(const header& a, const header& b) {
    if (a.fp.context != b.fp.context) return false;
    const bool pa = a.fp.coll == collective::send_recv, pb = b.fp.coll == collective::send_recv;
    return pa == pb && (!pa || a.fp.root == b.fp.root);
  }

  void receive(std::unique_lock<std::mutex>& lk, int peer, const header& h0, byte_consumer consume,
               const wait_context& w);

  void await_delivery(std::unique_lock<std::mutex>& lk, int peer, envelope& e, const wait_context& w);

  /// Takes back an envelope we are about to abandon; waits out a receiver that is mid-copy.
  void withdraw(std::unique_lock<std::mutex>& lk, int peer, envelope& e);

  /// Waits (toolkit::wait_until, under the world's lock) until `ready()`, failing fast on a lost
  /// peer, a visible mismatch or a cycle of sends, and at the deadline with a `timeout_error`
  /// naming what we waited for.
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lk, int peer, const header& h, const wait_context& w, const char* doing,
            const envelope* sending, Ready ready) {
    if (!entry_) {  // this communicator's entry, found (or made) once
      auto& mine = world_->waiting[static_cast<std::size_t>(group_.world_rank())];
      auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& e) { return e.context == group_.context(); });
      entry_ = it != mine.end() ? &*it : &mine.emplace_back();
      entry_->context = group_.context();
    }
    auto& entry = *entry_;
    entry.b = detail::inproc_impl::blocked{h.fp, world_rank(peer), sending};
    entry.b.fp.context = group_.context();
    entry.active = true;
    // The peer may be waiting for us: let it see what we are blocked in.
    world_->boxes[static_cast<std::size_t>(world_rank(peer))].cv.notify_all();
    struct clear_on_exit {
      bool& active;
      ~clear_on_exit() { active = false; }
    } guard{entry.active};
    const toolkit::wait_subject subject{h, rank(), doing, peer};
    bool last_look = false;
    // `ready()` may take what it finds (a receive dequeues the envelope): call it once per look.
    toolkit::wait_until(
        w, subject, toolkit::wait_policy{0, {}, {}},  // no spinning: a condition variable wakes us
        ready,
        [&](auto) {
          check_peer(peer, h, w);
          check_mailbox(h, w);
          check_cycle(h, w);
        },
        [&](auto until) { my_box().cv.wait_until(lk, until); },
        [&](auto now) {
          if (!last_look) {  // one more look before giving up
            last_look = true;
            return now;
          }
          check_peer(peer, h, w);
          toolkit::time_out(toolkit::timeout_text(h, w.algorithm, group_.name(rank()), w.timeout, doing,
                                                  group_.name(peer) + last_words_of(world_rank(peer))));
        });
  }
  /// " (its last words: usage_error: ...)" for a rank that left a note, else "".
  std::string last_words_of(int wr) const {
    const auto& n = world_->note[static_cast<std::size_t>(wr)];
    return n.empty() ? std::string() : " (its last words: " + n + ")";
  }

  void check_peer(int peer, const header& h, const wait_context& w) const;

  void check_mailbox(const header& h, const wait_context& w);

  /// A cycle of ranks each in a send's rendezvous with the next (rank 0 sends to 1, which sends
  /// to 0, and neither receives): nobody can ever take delivery. The world's lock makes what we
  /// see of the others consistent.
  void check_cycle(const header& h, const wait_context& w) const;

  /// What world rank `wr` is blocked in on this communicator (its context), or null.
  const detail::inproc_impl::blocked* blocked_in(int wr) const {
    for (const auto& e : world_->waiting[static_cast<std::size_t>(wr)])
      if (e.context == group_.context()) return e.active ? &e.b : nullptr;
    return nullptr;
  }

  /// Completes a matched pair: copies the message into the receive's buffer, or fails both
  /// with `mismatch_error` (another dtype, or more elements than the buffer holds).
  void deliver(detail::inproc_impl::p2p_entry& s, detail::inproc_impl::p2p_entry& r) const;
  /// The `poll` of a pending entry: its deadline, the abort, and a peer (or every peer) gone.
  void await_partner(const std::shared_ptr<detail::inproc_impl::p2p_entry>& e, const p2p_post& p) const;

  std::shared_ptr<world> world_;
  toolkit::group_map group_;
  detail::inproc_impl::world::blocked_in_context* entry_ = nullptr;  // in world_->waiting, under its lock
};

static_assert(transport<inproc> && zero_copy_recv<inproc> && failure_notices<inproc> && last_words<inproc> &&
              matched_p2p<inproc>);

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/inproc.ipp"
#endif
