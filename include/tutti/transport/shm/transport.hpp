/// \file
/// `tutti::shm`: processes of one host, over one shared segment (see tutti/transport/shm.hpp for
/// the whole picture). This class is the facade: it joins its parts, each in a file of its own:
/// the segment and its liveness rules (`segment.hpp`), start-up (`startup.hpp`), the byte rings
/// (`rings.hpp`), point-to-point matched by source and tag (`matching.hpp`), the windows (`windows.hpp`), the arena (`arena.hpp`), diagnosis of what the
/// peers are blocked in (`diagnosis.hpp`) and shrink (`shrink.hpp`); the wait loop, the header
/// check, the group map and the error texts come from the transport toolkit.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/detail/futex.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/shm/arena.hpp"
#include "tutti/transport/shm/diagnosis.hpp"
#include "tutti/transport/shm/matching.hpp"
#include "tutti/transport/shm/options.hpp"
#include "tutti/transport/shm/rings.hpp"
#include "tutti/transport/shm/segment.hpp"
#include "tutti/transport/shm/windows.hpp"
#include "tutti/transport/toolkit.hpp"

namespace tutti {

/// The shared-memory transport. Value type; copies share the mapping.
class shm {
 public:
  /// automatic's tuned-table rows for this transport (tuned_table.hpp).
  static constexpr std::string_view tuning_kind = "shm";
  static constexpr bool one_host = true;  // its ranks share a host's memory (`one_host_job`)

  /// Joins the job described by the environment (`job_env::from_env`): every rank must be on
  /// this host (LOCAL_WORLD_SIZE == WORLD_SIZE). Waits for the others up to `TUTTI_TIMEOUT`.
  /// With `TUTTI_JOIN=1`, joins a running job instead (its TUTTI_JOB_ID or MASTER_PORT, and its
  /// TUTTI_JOB_TOKEN): the transport of the world its ranks' next `grow()` makes, in which this
  /// process has a rank after the old ones (shm/grow.hpp).
  static shm from_env();

  TUTTI_COLD static shm create(const job_env& job, const config& cfg);

  TUTTI_COLD static shm create(int rank, int world_size, const std::string& job_id, shm_options opt,
                    std::chrono::milliseconds timeout);

  int rank() const noexcept { return group_.rank(); }
  int size() const noexcept { return group_.size(); }

  /// Whether peers read large inputs straight from this process (`process_vm_readv`), and why.
  bool single_copy() const noexcept { return seg_->single_copy && group_.context() == 0; }
  /// Whether all_reduce reads peers by single copy too: the start-up speed vote found the kernel
  /// copy at least half as fast as a memcpy out of a window on every rank (or it was forced).
  bool single_copy_reduces() const noexcept { return single_copy() && seg_->fast_kernel_copy; }
  const std::string& single_copy_note() const noexcept { return seg_->single_copy_note; }

  /// The transport of a sub-group: a segment of its own, made by the members together (a
  /// rendezvous named after this job and the group's context), so that the group and its world
  /// can be driven from different threads at once. Its rings are the world's size; it has no
  /// windows or arena (collectives of a group run over the rings).
  shm sub(std::span<const int> members, std::uint64_t context) const;

  // ---- point to point -------------------------------------------------------------------

  void send(int peer, const header& h, const std::byte* data, const wait_context& w) {
    detail::shm_impl::outgoing out{peer, h, data};
    while (!detail::shm_impl::progress(*seg_, group_, out))
      wait_for(w, h, peer, -1, "to make room at", wait_kind::send,
               [&] { return detail::shm_impl::room_changed(*seg_, group_, out); });
  }
  void recv(int peer, const header& h, std::byte* data, const wait_context& w) {
    detail::shm_impl::copier c{data};
    recv_with(peer, h, c, w);
  }
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& w) {
    detail::shm_impl::copier c{rdata};
    sendrecv_with(to, hs, sdata, from, hr, c, w);
  }
  void recv_with(int peer, const header& h, byte_consumer consume, const wait_context& w) {
    detail::shm_impl::incoming in{peer, h, consume};
    while (!detail::shm_impl::progress(*seg_, group_, in, w))
      wait_for(w, h, peer, -1, "to receive from", wait_kind::recv,
               [&] { return detail::shm_impl::data_arrived(*seg_, group_, in); });
  }
  void sendrecv_with(int to, const header& hs, const std::byte* sdata, int from, const header& hr,
                     byte_consumer consume, const wait_context& w);

  /// Point-to-point with matching of its own (`matched_p2p`), over rings apart from the
  /// collectives' (matching.hpp): eager up to `detail::shm_impl::p2p_eager_bytes`, larger
  /// messages by rendezvous, written straight into the receive buffer as it is cleared.
  std::shared_ptr<detail::operation_state> post_send(const p2p_post& p) {
    return detail::shm_impl::p2p_post_op(seg_, p2p_, p, true);
  }
  std::shared_ptr<detail::operation_state> post_recv(const p2p_post& p) {
    return detail::shm_impl::p2p_post_op(seg_, p2p_, p, false);
  }
  std::vector<std::string> pending_p2p() const { return detail::shm_impl::p2p_pending(*p2p_); }
  /// The blocking calls' fast path (`p2p_fast_path`): eager messages straight through the rings.
  bool try_send_now(const p2p_post& p) { return detail::shm_impl::p2p_send_now(*seg_, *p2p_, p); }
  bool try_recv_now(const p2p_post& p, recv_status& got) { return detail::shm_impl::p2p_recv_now(*seg_, *p2p_, p, got); }

  // ---- windows and phases (the shared_window capability) ---------------------------------

  /// Windows exist on the world communicator only: sub-groups run their collectives over the
  /// rings (a phase counter is shared by every communicator of the process).
  bool has_window() const noexcept { return group_.context() == 0; }
  std::byte* window(int r) const noexcept { return seg_->window(group_.world(r)); }
  std::size_t window_bytes() const noexcept { return seg_->lay.opt.window_bytes; }
  std::uint64_t phase() const noexcept { return seg_->my_phase; }

  /// Publishes this rank's phase `g` with the fingerprint of the call.
  void post(std::uint64_t g, const fingerprint& fp) noexcept { detail::shm_impl::post_phase(*seg_, group_.members(), g, fp); }

  /// Waits until rank `r` has posted phase `g`, the call being `fp`. With `compare`, a peer at
  /// exactly `g` must have posted `fp` too: `mismatch_error` otherwise.
  void wait_phase(int r, std::uint64_t g, const fingerprint& fp, bool compare, const wait_context& w);
  void wait_all(std::uint64_t g, const fingerprint& fp, bool compare, const wait_context& w) {
    for (int r = 0; r < size(); ++r)
      if (r != rank()) wait_phase(r, g, fp, compare, w);
    if (compare) seg_->compared_all = g;
  }
  /// At the start of a step on the windows, once every peer has posted g (this rank's last
  /// phase), for the call `fp`: catches what no wait of the earlier steps compared.
  /// - Each peer still at g must have posted g with this rank's fingerprint of g. A peer already
  ///   past g compared ours itself (in its wait for g, or here at its next step), so every pair
  ///   of ranks compares every phase, even where a schedule has one of them wait for nobody (a
  ///   broadcast root, a reduce leaf, ranks that disagree on the root).
  /// - No peer may have left an unread message of an earlier collective of this communicator in
  ///   its ring to this rank (`check_ring`).
  /// Reads only control lines and ring heads; no extra synchronisation. The fingerprints are not
  /// read again where this rank's own wait_all at g compared every peer: a peer it found already
  /// past g had run this check at g while this rank was still at g, comparing ours (measured:
  /// 0.1 us of a 0.6 us 8-byte all_reduce at 2 ranks).
  void check_posted(std::uint64_t g, const fingerprint& fp, const wait_context& w) const;

  // ---- shared allocation (zero copy) and single copy ---------------------------------------

  /// `bytes` of this rank's arena in the segment (64-byte aligned): peers read a collective's
  /// input straight from it. `usage_error` when the arena (`TUTTI_SHM_ARENA_BYTES`) is full.
  std::byte* allocate(std::size_t bytes) { return detail::shm_impl::arena_allocate(*seg_, bytes); }
  void deallocate(std::byte* p) noexcept { detail::shm_impl::arena_deallocate(*seg_, p); }

  /// Before posting phase g: offers this rank's input for g, [p, p + bytes), to its peers where it
  /// lies: in this rank's arena (they load from it), or else, with `single_copy` allowed and
  /// working, in this process (they read it with process_vm_readv). False when nothing is offered:
  /// the caller copies the input into its slot. An offered input must stay unchanged until every
  /// peer has posted a later phase.
  bool offer_source(std::uint64_t g, const void* p, std::size_t bytes, bool single_copy) noexcept {
    auto& c = seg_->ctl(seg_->world_rank);
    const auto off = group_.context() == 0 ? detail::shm_impl::arena_offset(*seg_, p, bytes) : std::nullopt;
    const bool remote = !off && single_copy && seg_->single_copy && group_.context() == 0;
    c.source[g % 2].store(off.value_or(detail::shm_impl::no_source), std::memory_order_relaxed);
    c.address[g % 2].store(remote ? reinterpret_cast<std::uintptr_t>(p) : 0, std::memory_order_relaxed);
    return off || remote;
  }
  /// After rank r posted g: `bytes` at byte `offset` of the input r offered for g: a pointer into
  /// r's arena, or this rank's staging buffer `stage` (0..2) filled by one process_vm_readv;
  /// null when r offered nothing (its input is in its slot).
  const std::byte* read_source(int r, std::uint64_t g, std::size_t offset, std::size_t bytes, int stage) {
    const offered where = offered_by(r, g);
    if (where.mapped) return where.mapped + offset;
    if (!where.address) return nullptr;
    std::byte* buf = staging(stage, bytes);
    read_remote(r, where.address + offset, bytes, buf);
    return buf;
  }
  /// This process's staging buffer `stage` (0..2), at least `bytes` long.
  std::byte* staging(int stage, std::size_t bytes) {
    auto& buf = seg_->staging[stage];
    if (buf.size() < bytes) buf.resize(std::max(bytes, std::size_t{1} << 20));
    return buf.data();
  }
  /// Like `read_source`, into `dst`; false when r offered nothing.
  bool copy_source(int r, std::uint64_t g, std::size_t offset, std::size_t bytes, std::byte* dst) {
    const offered where = offered_by(r, g);
    if (where.mapped) {
      if (bytes) std::memcpy(dst, where.mapped + offset, bytes);
      return true;
    }
    if (!where.address) return false;
    read_remote(r, where.address + offset, bytes, dst);
    return true;
  }

  // ---- failures ----------------------------------------------------------------------------

  /// After a failure, a new job of the ranks still alive, renumbered in order, on a fresh segment
  /// (`communicator::shrink`; shrink.hpp says how they agree). A rank that arrives after the
  /// decision without being in it raises `errc::aborted`. `kept`, when given, gets the old ranks
  /// of the members in new rank order.
  TUTTI_COLD shm shrink(std::chrono::milliseconds timeout, std::vector<int>* kept = nullptr) const;

  /// The transport of a larger world: this one's ranks (same numbers) and `joiners` processes
  /// started with `TUTTI_JOIN=1`, numbered after them in the order they came (`communicator::grow`;
  /// grow.hpp). Rank 0 waits up to `timeout` for them. This transport stays usable.
  TUTTI_COLD shm grow(int joiners, std::chrono::milliseconds timeout) const;

  /// `next`, a job that follows this one (shrink, grow): joiners still find it by the first id.
  shm successor(shm next) const {
    next.seg_->base_job_id = seg_->base_job_id.empty() ? seg_->job_id : seg_->base_job_id;
    next.seg_->token = seg_->token;
    return next;
  }

  static std::string job_token() {
    const char* t = detail::getenv_nonempty("TUTTI_JOB_TOKEN");
    return t ? t : "";
  }

  /// Marks this rank failed, so its peers raise `peer_lost` with `what` instead of timing out.
  void fail(std::string_view what) noexcept;

  /// Leaves `what` as this rank's last words (empty: none): a peer that finds this rank's
  /// process gone, or times out waiting for it, quotes them.
  void note(std::string_view what) noexcept;

 private:
  using wait_kind = detail::shm_impl::wait_kind;

  /// Spin, then yield, then sleep on our doorbell until `ready()` (toolkit::wait_until);
  /// before each sleep: our peers (`peer`, and `peer2` unless -1: gone, in a later call, part
  /// of a cycle with us) and the deadline. Without `compare` the wait checks liveness and the
  /// deadline only: it publishes no fingerprint for peers to compare with, and compares none
  /// (a wait for the end of the previous step); its texts still name the call, `h`.
  template <class Ready>
  void wait_for(const wait_context& w, const header& h, int peer, int peer2, const char* doing, wait_kind how,
                Ready ready, bool compare = true) {
    using namespace detail::shm_impl;
    const bool over = seg_->oversubscribed;
    // About 20 us of spinning (a pause is ~40 ns) when every rank has a core of its own, then
    // sleep: a yield would hand the core to whatever else runs there (a busy machine's other
    // processes) for the rest of its time slice, where a sleeper woken by the doorbell preempts
    // it. A moment of spinning and 20 us of yields when ranks outnumber cores, where spinning
    // would starve the rank we wait for.
    const toolkit::wait_policy policy{over ? 16 : 512, {}, std::chrono::microseconds(over ? 20 : 0),
                                      std::chrono::milliseconds(20)};
    bool published = false, extended = false;
    int sleeps = 0;
    std::vector<std::uint64_t> cycle;
    struct unpublish {
      shm& t;
      bool& published;
      ~unpublish() {
        if (published) publish_waiting(*t.seg_, t.group_, nullptr);
      }
    } guard{*this, published};
    auto& me = seg_->ctl(seg_->world_rank);
    toolkit::wait_until(
        w, {h, rank(), doing, peer}, policy, ready,
        [&](auto) {
          if (!published) {
            fingerprint mine = h.fp;
            if (!compare) mine.coll = collective::send_recv;  // peers compare nothing with it
            publish_waiting(*seg_, group_, &mine, group_.world(peer), how);
            published = true;
          }
          // A peer seen in a later call may have finished ours just now: check_peer believes
          // the mismatch only if what we wait for is still missing after it looked.
          if (p2p_) p2p_drive(*seg_, *p2p_);  // point-to-point posted before this call goes on meanwhile
          check_peer(*seg_, group_, peer, h, w, ready, compare);
          if (peer2 >= 0) check_peer(*seg_, group_, peer2, h, w, ready, compare);
          if (how == wait_kind::send || how == wait_kind::recv) check_cycle(*seg_, group_, h, w, cycle);
        },
        [&](auto until) {
          me.sleepers.fetch_add(1, std::memory_order_seq_cst);
          const std::uint32_t bell = me.doorbell.load(std::memory_order_seq_cst);
          const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - std::chrono::steady_clock::now());
          const std::chrono::nanoseconds slice = std::chrono::milliseconds(sleeps++ < 100 ? 2 : 20);
          if (!ready() && left.count() > 0) detail::futex_wait(&me.doorbell, bell, std::min(slice, left));
          me.sleepers.fetch_sub(1, std::memory_order_relaxed);
        },
        [&](auto now) {
          // A peer that is not stopped may be stuck waiting itself and time out a moment after
          // us: half a second more lets its failure (naming whom it waited for) reach us first.
          const int wr = group_.world(peer);
          if (!extended && !toolkit::process_stopped(seg_->pids[static_cast<std::size_t>(wr)])) {
            extended = true;
            return now + std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(500), w.timeout);
          }
          const std::string words = seg_->note_of(wr);
          toolkit::time_out(toolkit::timeout_text(
              h, w.algorithm, "rank " + std::to_string(rank()), w.timeout, doing,
              "rank " + std::to_string(peer) + blocked_chain(*seg_, group_, wr) +
                  (words.empty() ? std::string() : " (its last words: " + words + ")")));
        });
  }

  /// Where rank r offered its input of phase g: mapped here (its arena), at an address in its
  /// process (single copy), or neither (both empty: it is in r's slot).
  struct offered {
    const std::byte* mapped = nullptr;
    std::uint64_t address = 0;
  };
  offered offered_by(int r, std::uint64_t g) const noexcept {
    const auto& c = seg_->ctl(group_.world(r));
    if (const std::uint64_t off = c.source[g % 2].load(std::memory_order_relaxed); off != detail::shm_impl::no_source)
      return {seg_->arena(group_.world(r)) + off, 0};
    return {nullptr, c.address[g % 2].load(std::memory_order_relaxed)};
  }

  /// `bytes` at `address` in rank r's process into `dst`, with process_vm_readv.
  void read_remote(int r, std::uint64_t address, std::size_t bytes, std::byte* dst);

  std::shared_ptr<detail::shm_impl::segment> seg_;
  std::shared_ptr<detail::shm_impl::p2p_engine> p2p_;  // the segment's point-to-point state in this process
  toolkit::group_map group_;
};

static_assert(transport<shm> && zero_copy_recv<shm> && shared_window<shm> && posted_check<shm> &&
              window_sources<shm> && failure_notices<shm> && last_words<shm> && shrinkable<shm> && growable<shm> &&
              shared_allocation<shm> && from_environment<shm> && one_host_job<shm> && matched_p2p<shm>);

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/transport.ipp"
#endif
