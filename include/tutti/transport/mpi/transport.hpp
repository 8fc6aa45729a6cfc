/// \file
/// `tutti::mpi`: the class (see tutti/transport/mpi.hpp for the whole picture). It declares every
/// member, with what each does; the larger ones are defined out of the class, one part a file,
/// in the headers included at the end of this one: start-up and sub-groups (mpi/startup.hpp),
/// shrink (mpi/shrink.hpp), the wait loop and the notices (mpi/wait.hpp), point to point
/// (mpi/point_to_point.hpp) and the native collectives (mpi/native.hpp). What the class stands
/// on comes first: MPI's errors as tutti's (mpi/errors.hpp), the tags, header and bounds
/// (mpi/protocol.hpp), element types and ops as MPI's (mpi/datatypes.hpp), and what the copies
/// share (mpi/state.hpp).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/mpi/datatypes.hpp"
#include "tutti/transport/mpi/errors.hpp"
#include "tutti/transport/mpi/protocol.hpp"
#include "tutti/transport/mpi/state.hpp"
#include "tutti/transport/toolkit.hpp"

namespace tutti {

/// The MPI transport (see tutti/transport/mpi.hpp). Value type; copies share the MPI communicator.
class mpi {
 public:
  /// Joins the MPI job: initialises MPI if needed, checks the launcher's variables against MPI's
  /// rank and size (`config_error` naming the variable that contradicts), and duplicates
  /// `MPI_COMM_WORLD`, waiting for the other ranks up to `TUTTI_TIMEOUT`.
  static mpi from_env();

  /// A transport over a duplicate of `parent` (every rank of `parent` calls it; MPI must be
  /// initialised). Waits for the others up to `timeout`.
  static mpi create(MPI_Comm parent, std::chrono::milliseconds timeout);

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  /// The transport's own MPI communicator (a duplicate; do not free it).
  MPI_Comm native_handle() const noexcept { return st_->comm; }

  /// The transport of a sub-group: `members` are ranks of this group, in the new rank order.
  /// Only the members call it (see tutti/transport/mpi.hpp).
  mpi sub(std::span<const int> members, std::uint64_t context) const;

  /// After a failure, the transport of the ranks still alive (`communicator::shrink`): with an
  /// MPI that has ULFM (MPIX_Comm_shrink: MPICH, Open MPI 5 built with it), the communicator is
  /// revoked and shrunk, and the survivors keep their order. Elsewhere (Debian's Open MPI 4.1)
  /// `usage_error` saying so: there, restart the job (`mpiexec` again, or a launcher's restarts).
  /// MPI's own shrink has no deadline: `timeout` bounds only the duplication that follows.
  /// (TUTTI_COLD is on its definition: GCC warns of an `inline` after a `noinline`.)
  mpi shrink(std::chrono::milliseconds timeout, std::vector<int>* kept = nullptr) const;

  // ---- point to point ---------------------------------------------------------------------

  void send(int peer, const header& h, const std::byte* data, const wait_context& w) {
    exchange(peer, &h, data, -1, nullptr, nullptr, w);
  }
  void recv(int peer, const header& h, std::byte* data, const wait_context& w) {
    exchange(-1, nullptr, nullptr, peer, &h, data, w);
  }
  /// Full duplex: the receive and the send are posted together.
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& w) {
    exchange(to, &hs, sdata, from, &hr, rdata, w);
  }

  /// Point-to-point matched by source and tag (`matched_p2p`; mpi/matching.hpp): MPI's own
  /// matching on a communicator of its own, any order, `any_source` and `any_tag`. A lost peer
  /// is seen by the deadline (or by MPI, which ends most jobs that lose a rank), not yet by the
  /// failure notices.
  std::shared_ptr<detail::operation_state> post_send(const p2p_post& p);
  std::shared_ptr<detail::operation_state> post_recv(const p2p_post& p);
  std::vector<std::string> pending_p2p() const;

  /// Tells the group's other ranks that this one failed, so those waiting for it raise
  /// `peer_lost` with `what` instead of timing out. Never blocks.
  void fail(std::string_view what) noexcept;

  // ---- native collectives (algo::native) ----------------------------------------------------

  /// Every rank's fingerprint is the same, or `mismatch_error` naming the first rank that
  /// differs from this one (on every rank: all of them see the same min and max).
  /// For the v-collectives, `large` says that this rank's counts or offsets exceed MPI's int;
  /// the result says whether any rank's do (every rank gets the same answer, in the same
  /// all-reduce: then they all run tutti's own schedule instead of MPI's).
  bool native_agree(const fingerprint& fp, const wait_context& w, bool blocking = false, bool large = false);

  template <class T>
  void native_broadcast(T* buf, std::size_t n, int root, const fingerprint& fp, const wait_context& w,
                        bool blocking = false);

  template <class T, class Op>
  void native_reduce(const T* in, T* out, std::size_t n, int root, const Op&, const fingerprint& fp,
                     const wait_context& w, bool blocking = false);

  template <class T, class Op>
  void native_all_reduce(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp,
                         const wait_context& w, bool blocking = false);

  /// `n` elements per rank; at the root, `in` may be its own block of `out`.
  template <class T>
  void native_gather(const T* in, T* out, std::size_t n, int root, const fingerprint& fp, const wait_context& w,
                     bool blocking = false);

  template <class T>
  void native_all_gather(const T* in, T* out, std::size_t n, const fingerprint& fp, const wait_context& w,
                         bool blocking = false);

  /// `n` elements per rank; at the root, `out` may be its own block of `in`.
  template <class T>
  void native_scatter(const T* in, T* out, std::size_t n, int root, const fingerprint& fp, const wait_context& w,
                      bool blocking = false);

  /// `n` elements per block.
  template <class T>
  void native_all_to_all(const T* in, T* out, std::size_t n, const fingerprint& fp, const wait_context& w,
                         bool blocking = false);

  /// `n` elements per rank's block of the result.
  template <class T, class Op>
  void native_reduce_scatter(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp,
                             const wait_context& w, bool blocking = false);

  /// Inclusive prefix: MPI_Iscan (rank order; a user op non-commutative).
  template <class T, class Op>
  void native_scan(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp, const wait_context& w,
                   bool blocking = false);

  /// Exclusive prefix: MPI_Iexscan. MPI leaves rank 0's result undefined; tutti promises rank 0's
  /// `out` unchanged, so rank 0 receives into a buffer of its own.
  template <class T, class Op>
  void native_exscan(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp, const wait_context& w,
                     bool blocking = false);

  // ---- native v-collectives: MPI's, with int counts and displacements (algo::native falls back
  // to tutti's schedules where they do not fit: native_agree's `large`). MPI checks no count
  // against its peer's, so where only some ranks know the counts each rank first receives what
  // its peers say it must hold (an MPI_Iscatter or MPI_Ialltoall of 64-bit counts) and compares.

  template <class T>
  void native_all_gather_v(const T* in, T* out, const block_counts& b, const fingerprint& fp, const wait_context& w,
                           bool blocking = false);

  /// `n`: this rank's count; `b`: the root's counts (empty elsewhere).
  template <class T>
  void native_gather_v(const T* in, std::size_t n, T* out, const block_counts& b, int root, const fingerprint& fp,
                       const wait_context& w, bool blocking = false);

  /// `n`: this rank's count; `b`: the root's counts (empty elsewhere).
  template <class T>
  void native_scatter_v(const T* in, const block_counts& b, T* out, std::size_t n, int root, const fingerprint& fp,
                        const wait_context& w, bool blocking = false);

  template <class T>
  void native_all_to_all_v(const T* in, const block_counts& send, T* out, const block_counts& recv,
                           const fingerprint& fp, const wait_context& w, bool blocking = false);

  template <class T, class Op>
  void native_reduce_scatter_v(const T* in, T* out, const block_counts& b, const Op&, const fingerprint& fp,
                               const wait_context& w, bool blocking = false);

  void native_barrier(const fingerprint& fp, const wait_context& w, bool blocking = false);

 private:
  mpi(std::shared_ptr<detail::mpi_impl::comm_state> st, std::uint64_t context)
      : st_(std::move(st)), context_(context) {}

  /// Reads rank, size and the tag bound of the new communicator and makes MPI errors return.
  void adopt();

  /// The launcher's variables must agree with MPI (see tutti/transport/mpi.hpp). Slurm's are
  /// skipped when Open MPI's or PMI's are set: mpirun inside an allocation starts its daemons
  /// with srun, so SLURM_PROCID there is a daemon's index, not this rank.
  static void check_environment(int rank, int size);

  std::string where(const fingerprint& fp, const wait_context& w) const {
    return std::string(collective_name(fp.coll)) + "(" + std::string(w.algorithm) + ") on rank " +
           std::to_string(rank_);
  }

  template <class T>
  static MPI_Datatype type() {
    return detail::mpi_impl::datatype<T>();
  }
  template <class Op, class T>
  static MPI_Op reduce_op_of() {
    return detail::mpi_impl::mpi_op<Op, T>();
  }
  int count(std::size_t n, const fingerprint& fp, const wait_context& w) const {
    return detail::mpi_impl::as_count(n, [&] { return where(fp, w); });
  }

  /// A table of counts or offsets as MPI's ints (the caller made sure they fit: native_agree).
  std::unique_ptr<int[]> int_table(std::span<const std::size_t> v, const fingerprint& fp, const wait_context& w) const;

  /// Runs `f`; when it throws (a collective that may stay pending), `buffers` are kept until exit.
  template <class F, class... B>
  static void kept_on_failure(F&& f, B&... buffers);

  /// gather_v's and scatter_v's count check: the root sends every rank its count for it (an
  /// MPI_Iscatter of 64-bit words), and each rank compares it with the size of its `what`.
  void check_counts_from_root(std::size_t n, const block_counts& b, int root, const char* what, const fingerprint& fp,
                              const wait_context& w, bool blocking);

  /// The (header, payload) tags of a message: the collective pair, or user tag t's pair.
  std::pair<int, int> tags(const header& h, const wait_context& w) const;

  /// Calls `post(offset, bytes)` for each piece of a payload (one, unless it exceeds `max_piece`).
  template <class Post>
  static void pieces(std::size_t bytes, Post post) {
    for (std::size_t at = 0; at < bytes; at += detail::mpi_impl::max_piece)
      post(at, static_cast<int>(std::min(detail::mpi_impl::max_piece, bytes - at)));
  }

  /// Send (`hs`, to `to`) and/or receive (`hr`, from `from`); null headers mean "none". Returns
  /// or throws only once MPI is done with everything it posted (see `settle`).
  void exchange(int to, const header* hs, const std::byte* sdata, int from, const header* hr, std::byte* rdata,
                const wait_context& w);

  /// How long a failed call goes on driving what it posted: `settle_within`, or `abort_settle`
  /// once the communicator is aborted (so that abort() still returns within about 20 ms).
  static std::chrono::milliseconds settle_bound(const wait_context& w) {
    using namespace detail::mpi_impl;
    return w.aborted && w.aborted->load(std::memory_order_acquire) ? abort_settle : settle_within;
  }

  /// What a failed exchange does before its error leaves it, so that MPI touches none of its
  /// buffers afterwards (the caller frees them; an ASan run caught Open MPI's shared-memory
  /// transport still copying a freed send buffer from a later call's progress):
  /// - the header's receive, if nothing matched it yet, is cancelled (if it did match after all,
  ///   its payload is taken as below);
  /// - the payload of a header that arrived but was refused (`refused_from`, `refused_bytes`)
  ///   is received as 0-byte pieces, which end in MPI_ERR_TRUNCATE but let the sender's sends
  ///   complete (Open MPI cannot cancel a send, nor a receive once matched);
  /// - everything else is driven (MPI_Test) until complete: the peer at the other end is in MPI
  ///   too, failing or waiting, so a matched transfer finishes at once. While it waits, a header
  ///   from a peer this rank still sends to is taken the same way (two ranks that each gave up
  ///   on the other's message would otherwise wait for each other), and a send to a rank that
  ///   has sent its failure notice is given up: that rank settled before it sent it, so it will
  ///   never take (or progress) the message (unless it gave up on a transfer with this rank
  ///   itself, which its own error then says);
  /// - what is still pending after `settle_bound` is kept, never freed, and counted: the
  ///   return value, for the error message.
  std::size_t settle(detail::mpi_impl::request_set& rs, const wait_context& w, std::pair<int, int> tag_pair,
                     const detail::mpi_impl::wire_header& in, int refused_from, std::uint64_t refused_bytes);

  /// Whether `peer` sent this communicator a failure notice (read now, or earlier by `check_notice`).
  bool peer_failed(int peer);

  /// Sends every other rank of the group a waiting notice (`fp`, what this rank waits to receive
  /// in), once per call; never blocks.
  void tell_waiting(fingerprint fp);

  /// Reads `peer`'s waiting notices. One that says the peer waits in a later call of this
  /// communicator, or in this call with other arguments, while this rank waits for its message:
  /// the text of a mismatch_error naming both. Others (an earlier call, the same call) are
  /// dropped; empty when none shows a disagreement.
  std::string waiting_notice(int peer, const header& want, const wait_context& w);

  /// The non-blocking form `nb(args..., request)` when there is a request to fill, else the
  /// blocking form `b(args...)`.
  template <class NB, class B, class... A>
  static int either(MPI_Request* request, NB nb, B b, A... args) {
    return request ? nb(args..., request) : b(args...);
  }

  /// Starts a non-blocking collective with `start(&request)` and waits for it under the
  /// deadline; with `blocking`, runs the blocking form (`start(nullptr)`) instead.
  template <class Start>
  void start_and_complete(const fingerprint& fp, std::size_t bytes, const wait_context& w, bool blocking,
                          const char* call, Start start);

  /// Waits for a non-blocking collective. MPI cannot cancel one, so on failure it drives it for
  /// up to `settle_bound` more (it completes if the others are in it still: this rank alone was
  /// aborted or out of time, say); one still pending then is kept, never freed, and the error
  /// says that MPI may still read or write the call's buffers.
  void complete(MPI_Request& req, const fingerprint& fp, std::size_t bytes, const wait_context& w, const char* call);

  /// `drive`'s peer when the communicator cannot be probed yet (it is being made).
  static constexpr int no_notices = -2;

  /// Polls `ready()` (which drives MPI's progress) until it is true (`toolkit::wait_until`):
  /// spins for 50 us when every local rank has a core (a reply is usually that close; a yield on
  /// a busy host can give the core away for a whole time slice), only a few polls when ranks
  /// outnumber cores, where spinning would starve the rank we wait for; then yields for 20 ms
  /// (MPI progresses only inside our calls, so a short wait keeps pipelined transfers moving);
  /// after that the peer is late, and it sleeps in short steps, which free the core. Every 16
  /// looks it checks for failure notices from `peer` and `peer2` (any rank when `peer` is -1;
  /// none when it is `no_notices`) and the deadline. `doing` says what it waits for ("to
  /// receive from"), or the MPI call it waits in ("MPI_Ibcast") when `peer` is -1.
  template <class Ready>
  void drive(const wait_context& w, const header& h, int peer, int peer2, const char* doing, Ready ready);

  // Point-to-point matching's parts (mpi/matching.hpp).
  /// Posts a send (an MPI_Isend) or a receive (an MPI_Irecv) of header and payload.
  std::shared_ptr<detail::operation_state> post_p2p(const p2p_post& p, bool send);
  void check_p2p_post(const detail::mpi_impl::p2p_op& e) const;
  std::string p2p_where(const detail::mpi_impl::p2p_op& e) const;
  /// The operation's state, with the poll that tests it, keeps its deadline and the abort.
  std::shared_ptr<detail::operation_state> p2p_state(const std::shared_ptr<detail::mpi_impl::p2p_op>& e,
                                                     const p2p_post& p);
  /// A receive's message has come: its status, or the mismatch it is.
  std::exception_ptr p2p_received(const detail::mpi_impl::p2p_op& e, detail::operation_state& st) const;

  /// Raises `peer_lost` if `peer` (any rank when -1) sent a failure notice.
  void check_notice(int peer, const header& h, const wait_context& w);

  std::shared_ptr<detail::mpi_impl::comm_state> st_;
  std::uint64_t context_ = 0;
  int rank_ = 0;
  int size_ = 1;
};

static_assert(transport<mpi> && native_collectives<mpi> && failure_notices<mpi> && from_environment<mpi> && shrinkable<mpi> &&
              matched_p2p<mpi>);

}  // namespace tutti

// The members defined out of the class, one part a file (each includes this file first).
#include "tutti/transport/mpi/startup.hpp"
#include "tutti/transport/mpi/shrink.hpp"
#include "tutti/transport/mpi/wait.hpp"
#include "tutti/transport/mpi/point_to_point.hpp"
#include "tutti/transport/mpi/native.hpp"
#include "tutti/transport/mpi/matching.hpp"
