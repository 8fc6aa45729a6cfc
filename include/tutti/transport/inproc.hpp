/// \file
/// `tutti::inproc`: ranks are threads of one process. A send posts an envelope (header + pointer
/// to the sender's memory) in the receiver's mailbox and waits until the receiver has consumed it
/// (rendezvous), so the payload moves once, straight from the sender's view into the receiver's
/// view or reduction: no library buffer in between (`zero_copy_recv`).
///
/// Beyond timeouts, a waiting rank checks what it can see of its peers, so it fails fast with a
/// precise error instead of waiting for the deadline:
/// - a peer whose function threw or returned: `peer_lost` naming it;
/// - a message from the same communicator for this or an earlier collective with a different
///   fingerprint, or a peer waiting in the same collective step with a different fingerprint:
///   `mismatch_error` naming both ranks and both values.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/transport.hpp"

namespace tutti {

namespace algo {
struct automatic;
}

namespace detail::inproc_impl {

struct envelope {
  enum class state { posted, taken, done, rejected };
  int src = 0;  // world rank of the sender
  header h;
  const std::byte* data = nullptr;
  state st = state::posted;
  std::string reason;
};

struct mailbox {
  std::condition_variable cv;
  std::deque<envelope*> q;
};

enum class rank_state { running, returned, failed };

/// What the threads of one `inproc::run` share.
struct world {
  explicit world(int n)
      : size(n), boxes(static_cast<std::size_t>(n)), waiting(static_cast<std::size_t>(n)),
        state(static_cast<std::size_t>(n), rank_state::running),
        failure(static_cast<std::size_t>(n)) {}

  const int size;
  std::mutex mu;
  std::vector<mailbox> boxes;
  std::vector<std::optional<fingerprint>> waiting;  // fingerprint a rank is blocked in
  std::vector<rank_state> state;
  std::vector<std::string> failure;
  std::exception_ptr first_error;

  void notify_all() {
    for (auto& b : boxes) b.cv.notify_all();
  }
  /// Marks `rank` finished (failed when `error` is set) and wakes every waiter.
  void finish(int rank, std::exception_ptr error) {
    std::lock_guard lk(mu);
    if (error) {
      if (!first_error) first_error = error;
      state[static_cast<std::size_t>(rank)] = rank_state::failed;
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        failure[static_cast<std::size_t>(rank)] = e.what();
      } catch (...) {
        failure[static_cast<std::size_t>(rank)] = "unknown exception";
      }
    } else {
      state[static_cast<std::size_t>(rank)] = rank_state::returned;
    }
    notify_all();
  }
};

}  // namespace detail::inproc_impl

/// The in-process transport (see the file comment). Made by `inproc::run`; value type, one per
/// rank per communicator.
class inproc {
 public:
  using world = detail::inproc_impl::world;

  /// Runs `f(comm)` on `n` threads, `comm` being a `communicator<inproc, Algorithm>&` of rank
  /// 0..n-1; joins them and rethrows the first exception any rank threw (the other ranks see
  /// that rank as lost and stop promptly, instead of waiting for their deadlines).
  template <class Algorithm = algo::automatic, class F>
  static void run(int n, F&& f);

  /// As `run`, with each rank's transport wrapped first: `f` gets a
  /// `communicator<decltype(wrap(inproc)), Algorithm>&`. For user transports that delegate to
  /// inproc (see examples/custom_transport.cpp).
  template <class Algorithm = algo::automatic, class Wrap, class F>
  static void run_wrapped(int n, Wrap&& wrap, F&& f);

  /// A transport for `rank` of a fresh world of `n` ranks.
  inproc(std::shared_ptr<world> w, int rank)
      : world_(std::move(w)), rank_(rank), context_(0) {
    members_.resize(static_cast<std::size_t>(world_->size));
    for (int i = 0; i < world_->size; ++i) members_[static_cast<std::size_t>(i)] = i;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }

  /// The transport of a sub-group: `members` are ranks of this group, in the new rank order.
  inproc sub(std::span<const int> members, std::uint64_t context) const {
    inproc t = *this;
    t.context_ = context;
    std::tie(t.members_, t.rank_) = detail::pick_members(members_, rank_, members);
    return t;
  }

  void send(int peer, const header& h, const std::byte* data, const wait_context& w) {
    envelope e = make_envelope(h, data);
    std::unique_lock lk(world_->mu);
    post(peer, e);
    await_delivery(lk, peer, e, w);
  }

  void recv(int peer, const header& h, std::byte* data, const wait_context& w) {
    copy_to c{data};
    recv_with(peer, h, c, w);
  }

  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr,
                std::byte* rdata, const wait_context& w) {
    copy_to c{rdata};
    sendrecv_with(to, hs, sdata, from, hr, c, w);
  }

  void recv_with(int peer, const header& h, byte_consumer consume, const wait_context& w) {
    std::unique_lock lk(world_->mu);
    receive(lk, peer, h, consume, w);
  }

  void sendrecv_with(int to, const header& hs, const std::byte* sdata, int from, const header& hr,
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

 private:
  using envelope = detail::inproc_impl::envelope;
  using state = envelope::state;

  struct copy_to {
    std::byte* dst;
    void operator()(const std::byte* src, std::size_t offset, std::size_t n) const {
      if (n) std::memcpy(dst + offset, src, n);
    }
  };

  int world_rank(int r) const { return members_[static_cast<std::size_t>(r)]; }
  detail::inproc_impl::mailbox& my_box() const {
    return world_->boxes[static_cast<std::size_t>(world_rank(rank_))];
  }
  std::string name(int r) const {
    std::string s = "rank " + std::to_string(r);
    if (context_ != 0) s += " (world rank " + std::to_string(world_rank(r)) + ")";
    return s;
  }

  envelope make_envelope(const header& h, const std::byte* data) const {
    envelope e;
    e.src = world_rank(rank_);
    e.h = h;
    e.h.fp.context = context_;
    e.data = data;
    return e;
  }

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

  void receive(std::unique_lock<std::mutex>& lk, int peer, const header& h0,
               byte_consumer consume, const wait_context& w) {
    header h = h0;
    h.fp.context = context_;
    const int src = world_rank(peer);
    auto& q = my_box().q;
    envelope* e = nullptr;
    wait(lk, peer, h, w, "to receive from", [&] {
      for (auto it = q.begin(); it != q.end(); ++it)
        if ((*it)->src == src && same_channel((*it)->h, h)) {
          e = *it;
          q.erase(it);
          return true;
        }
      return false;
    });
    try {
      detail::check_header(h, rank_, e->h, peer, w.algorithm);
    } catch (const std::exception& ex) {
      e->st = state::rejected;
      e->reason = ex.what();
      world_->boxes[static_cast<std::size_t>(src)].cv.notify_all();
      throw;
    }
    e->st = state::taken;
    lk.unlock();
    try {
      consume(e->data, 0, e->h.bytes);  // the sender is parked until we mark it done
    } catch (const std::exception& ex) {  // e.g. a user op that throws: release the sender
      lk.lock();
      e->st = state::rejected;
      e->reason = detail::where(h, w.algorithm) + ": " + name(rank_) + " failed while taking " + name(peer) +
                  "'s message: " + ex.what();
      world_->boxes[static_cast<std::size_t>(src)].cv.notify_all();
      throw;
    }
    lk.lock();
    e->st = state::done;
    world_->boxes[static_cast<std::size_t>(src)].cv.notify_all();
  }

  void await_delivery(std::unique_lock<std::mutex>& lk, int peer, envelope& e,
                      const wait_context& w) {
    try {
      wait(lk, peer, e.h, w, "to take delivery from",
           [&] { return e.st == state::done || e.st == state::rejected; });
    } catch (...) {
      withdraw(lk, peer, e);
      throw;
    }
    if (e.st == state::rejected) {
      if (e.reason.find("failed while taking") != std::string::npos) throw peer_lost(e.reason);
      throw mismatch_error(e.reason);
    }
  }

  /// Takes back an envelope we are about to abandon; waits out a receiver that is mid-copy.
  void withdraw(std::unique_lock<std::mutex>& lk, int peer, envelope& e) {
    auto& q = world_->boxes[static_cast<std::size_t>(world_rank(peer))].q;
    if (e.st == state::posted) {
      q.erase(std::remove(q.begin(), q.end(), &e), q.end());
      return;
    }
    my_box().cv.wait(lk, [&] { return e.st != state::taken; });
  }

  /// Waits until `ready()`, failing fast on a lost peer or a visible mismatch, and at the
  /// deadline with a `timeout_error` naming what we waited for.
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lk, int peer, const header& h, const wait_context& w,
            const char* doing, Ready ready) {
    auto& self = world_->waiting[static_cast<std::size_t>(world_rank(rank_))];
    self = h.fp;
    self->context = context_;
    // The peer may be waiting for us: let it see what we are blocked in.
    world_->boxes[static_cast<std::size_t>(world_rank(peer))].cv.notify_all();
    struct clear_on_exit {
      std::optional<fingerprint>& f;
      ~clear_on_exit() { f.reset(); }
    } guard{self};
    const auto deadline = std::chrono::steady_clock::now() + w.timeout;
    // `ready()` may take what it finds (a receive dequeues the envelope): call it once per look.
    while (!ready()) {
      detail::check_aborted(w, h, rank_, doing, peer);
      check_peer(peer, h, w);
      check_mailbox(h, w);
      const auto until = w.aborted ? std::min(deadline, std::chrono::steady_clock::now() + detail::abort_poll) : deadline;
      if (my_box().cv.wait_until(lk, until) == std::cv_status::timeout &&
          std::chrono::steady_clock::now() >= deadline) {
        if (ready()) return;
        check_peer(peer, h, w);
        throw timeout_error(detail::where(h, w.algorithm) + ": " + name(rank_) + " timed out after " +
                            detail::seconds_text(w.timeout) + " waiting " + doing + " " + name(peer) + " (" +
                            std::to_string(h.bytes) + " bytes, " +
                            detail::fingerprint_summary(h.fp) + ")");
      }
    }
  }

  void check_peer(int peer, const header& h, const wait_context& w) const {
    const auto wr = static_cast<std::size_t>(world_rank(peer));
    using rs = detail::inproc_impl::rank_state;
    if (world_->state[wr] == rs::failed)
      throw peer_lost(detail::where(h, w.algorithm) + ": " + name(peer) +
                      " failed while " + name(rank_) + " waited for it: " + world_->failure[wr]);
    if (world_->state[wr] == rs::returned)
      throw peer_lost(detail::where(h, w.algorithm) + ": " + name(peer) +
                      " returned from its function while " + name(rank_) +
                      " still waited for it (did it skip this call?)");
    // Sends are rendezvous, so a peer that must exchange a message with us in this call cannot
    // be blocked in a later one: if it is, the ranks disagree.
    const auto& theirs = world_->waiting[wr];
    fingerprint mine = h.fp;
    mine.context = context_;
    if (theirs && is_sequenced(h) && theirs->context == context_ && theirs->coll != collective::send_recv &&
        (theirs->seq > mine.seq || (theirs->seq == mine.seq && *theirs != mine)))
      throw mismatch_error(detail::where(h, w.algorithm) + ": " +
                           detail::describe_difference(mine, rank_, *theirs, peer));
  }

  void check_mailbox(const header& h, const wait_context& w) {
    if (!is_sequenced(h)) return;
    for (envelope* e : my_box().q) {
      const fingerprint& f = e->h.fp;
      if (f.context != context_ || f.coll == collective::send_recv) continue;
      if (f.seq < h.fp.seq || (f.seq == h.fp.seq && f != h.fp)) {
        const int peer = local_rank_of(e->src);
        const std::string what = detail::where(h, w.algorithm) + ": " +
                                 detail::describe_difference(h.fp, rank_, f, peer);
        e->st = state::rejected;
        e->reason = what;
        auto& q = my_box().q;
        q.erase(std::remove(q.begin(), q.end(), e), q.end());
        world_->boxes[static_cast<std::size_t>(e->src)].cv.notify_all();
        throw mismatch_error(what);
      }
    }
  }

  static bool is_sequenced(const header& h) { return h.fp.coll != collective::send_recv; }

  int local_rank_of(int world_rank) const {
    for (std::size_t i = 0; i < members_.size(); ++i)
      if (members_[i] == world_rank) return static_cast<int>(i);
    return -1;
  }


  std::shared_ptr<world> world_;
  std::vector<int> members_;  // local rank -> world rank
  int rank_;
  std::uint64_t context_;
};

static_assert(transport<inproc>);
static_assert(zero_copy_recv<inproc>);

}  // namespace tutti

#include "tutti/group/communicator.hpp"

namespace tutti {

template <class Algorithm, class F>
void inproc::run(int n, F&& f) {
  run_wrapped<Algorithm>(n, [](inproc t) { return t; }, std::forward<F>(f));
}

template <class Algorithm, class Wrap, class F>
void inproc::run_wrapped(int n, Wrap&& wrap, F&& f) {
  if (n < 1) throw usage_error("inproc::run: need at least one rank, got " + std::to_string(n));
  const config cfg = config::from_env();  // read once, before any thread starts
  auto w = std::make_shared<world>(n);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::exception_ptr err;
      try {
        auto t = wrap(inproc(w, r));
        communicator<decltype(t), Algorithm> comm(std::move(t), Algorithm{}, cfg);
        f(comm);
      } catch (...) {
        err = std::current_exception();
      }
      w->finish(r, err);
    });
  }
  for (auto& t : threads) t.join();
  if (w->first_error) std::rethrow_exception(w->first_error);
}

}  // namespace tutti
