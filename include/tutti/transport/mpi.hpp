/// \file
/// `tutti::mpi`: the ranks of an MPI job (`mpirun`, `srun`), over MPI. Needs `<mpi.h>` and the
/// CMake target `tutti::mpi`; not included by `tutti/tutti.hpp`.
///
/// - Start-up (`mpi::from_env`): initialises MPI (`MPI_Init_thread`, asking for
///   `MPI_THREAD_MULTIPLE`) unless the program already did, and then finalises it at exit; checks
///   that the launcher's variables (`OMPI_COMM_WORLD_*`, `SLURM_PROCID`/`SLURM_NTASKS`,
///   `PMI_RANK`/`PMI_SIZE`, and `RANK`/`WORLD_SIZE`, `TUTTI_*` if set) agree with MPI's rank and
///   size; duplicates `MPI_COMM_WORLD` (`mpi::create` duplicates any communicator of yours) and
///   sets `MPI_ERRORS_RETURN` on the duplicate, so MPI errors become `tutti::error`s carrying
///   `MPI_Error_string`'s text instead of aborting the job.
/// - Point to point: a message is two MPI messages on the transport's own communicator, the
///   header (fingerprint and byte count) and then the payload, with distinct tags (collectives
///   and each user tag have their own pair, so user tags may be received in any order). The
///   receiver receives and checks the header (`toolkit::check_header`) before it posts the
///   payload's receive straight into the destination: no staging beyond what MPI itself does for
///   small (eager) messages. Payloads above 1 GiB go as several messages (MPI counts are `int`).
/// - Deadlines: every wait is `MPI_Isend`/`MPI_Irecv` (or a non-blocking collective) and an
///   `MPI_Test` loop that spins briefly, then yields, then sleeps in short steps, and raises
///   `timeout_error` naming the peer, the collective, the algorithm and the bytes. While it
///   waits, it looks for a failure notice from the peer (`fail`, which the communicator calls
///   when a collective fails on a rank), so peers of a failed rank raise `peer_lost` at once.
///   (`algo::native{.blocking = true}` opts out: MPI's blocking collectives, no deadline.)
/// - A collective's receive still without its header after 20 ms sends every peer a waiting
///   notice (its fingerprint; once per call, on its own tag) and reads the notices of the peer it
///   waits for: ranks that disagree so that they wait for each other (two ranks that each take
///   the other for the root) raise `mismatch_error` naming both instead of timing out.
/// - After a timeout or another failure the communicator is broken (as every communicator is),
///   and the failed call returns only once MPI is done with its buffers: it cancels the receive
///   of a header that has not come, takes the payload of one it refused (0-byte receives, so the
///   sender's send completes) and drives the rest until complete, for at most 2 s
///   (`settle_within`; a non-blocking collective, which MPI cannot cancel, too). What is still
///   pending then (a peer stopped mid-transfer) is kept, never freed, and the error says that
///   MPI may still read or write the call's buffers: end the job (or `MPI_Abort`) rather than
///   carry on. A broken communicator's MPI handle is
///   never freed, so that MPI cannot give its context id (and the messages still in flight on it)
///   to a later communicator.
/// - Sub-groups (`sub`) are new MPI communicators, made with `MPI_Comm_create_group`, which only
///   the members call (as `communicator::new_group` and `split` do). That call blocks without a
///   deadline, but the members have just agreed on the group over point to point.
/// - `algo::native` runs MPI's own collectives on it (`native_*` below); built-in ops on built-in
///   element types map to `MPI_SUM`, ...; other pairs (float16, bfloat16, bool, user types and
///   ops) run tutti's kernels in a user `MPI_Op`.
///
/// Ranks must run the same build on the same architecture (headers travel as raw bytes).
#pragma once

#include <mpi.h>
#if defined(OPEN_MPI) && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: ULFM's MPIX_Comm_shrink where it was built with it
#endif

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/core/dtype.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/op/kernels.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/mpi/datatypes.hpp"
#include "tutti/transport/mpi/errors.hpp"
#include "tutti/transport/mpi/protocol.hpp"
#include "tutti/transport/mpi/state.hpp"
#include "tutti/transport/toolkit.hpp"

namespace tutti {

namespace detail::mpi_impl {

/// Finalises MPI at exit when tutti initialised it (a function-local static, made right after
/// `MPI_Init_thread`, so communicators kept in statics made later are destroyed before it).
struct finalizer {
  ~finalizer() {
    int init = 0;
    MPI_Initialized(&init);
    if (init && !finalized()) MPI_Finalize();
  }
};

/// More ranks on this host than cores, by the launcher's local size. (Not by this process's CPU
/// affinity: mpirun binds each rank to a core or a socket, which says nothing of the others.)
inline bool oversubscribed() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE"}) {
    const char* v = detail::getenv_nonempty(var);
    if (!v) continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);  // Slurm may say "2(x3)": the leading number is ours
    if (end != v) return n > static_cast<long>(std::max(1u, std::thread::hardware_concurrency()));
  }
  return false;
}

}  // namespace detail::mpi_impl

/// The MPI transport (see the file comment). Value type; copies share the MPI communicator.
class mpi {
 public:
  /// Joins the MPI job: initialises MPI if needed, checks the launcher's variables against MPI's
  /// rank and size (`config_error` naming the variable that contradicts), and duplicates
  /// `MPI_COMM_WORLD`, waiting for the other ranks up to `TUTTI_TIMEOUT`.
  static mpi from_env() {
    const config cfg = config::from_env();
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      if (detail::mpi_impl::finalized())
        throw usage_error("tutti::mpi::from_env: MPI was already finalized; it cannot be initialised again");
      int provided = 0;
      detail::mpi_impl::check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread",
                              "tutti::mpi::from_env");
      static detail::mpi_impl::finalizer at_exit;
      (void)at_exit;
    }
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_environment(rank, size);
    return create(MPI_COMM_WORLD, cfg.timeout);
  }

  /// A transport over a duplicate of `parent` (every rank of `parent` calls it; MPI must be
  /// initialised). Waits for the others up to `timeout`.
  static mpi create(MPI_Comm parent, std::chrono::milliseconds timeout) {
    using namespace detail::mpi_impl;
    // MPI writes the new handle when the duplication completes, which after a timeout may be
    // never or later: the handle and the request live on the heap and are leaked in that case
    // (a non-blocking collective cannot be cancelled).
    auto pending = std::make_unique<std::pair<MPI_Comm, MPI_Request>>(MPI_COMM_NULL, MPI_REQUEST_NULL);
    check(MPI_Comm_idup(parent, &pending->first, &pending->second), "MPI_Comm_idup", "tutti::mpi");
    mpi t(std::make_shared<comm_state>(), 0);
    header h;
    h.fp.coll = collective::group;
    try {
      t.drive(wait_context{timeout, "start-up"}, h, no_notices, -1, "to duplicate the communicator with", [&] {
        int done = 0;
        check(MPI_Test(&pending->second, &done, MPI_STATUS_IGNORE), "MPI_Comm_idup", "tutti::mpi start-up");
        return done != 0;
      });
    } catch (...) {
      (void)pending.release();
      throw;
    }
    t.st_->comm = pending->first;
    t.adopt();
    return t;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  /// The transport's own MPI communicator (a duplicate; do not free it).
  MPI_Comm native_handle() const noexcept { return st_->comm; }

  /// The transport of a sub-group: `members` are ranks of this group, in the new rank order.
  /// Only the members call it (see the file comment).
  mpi sub(std::span<const int> members, std::uint64_t context) const {
    using namespace detail::mpi_impl;
    const std::string where = "tutti::mpi::sub";
    MPI_Group parent, picked;
    check(MPI_Comm_group(st_->comm, &parent), "MPI_Comm_group", where);
    std::vector<int> ranks(members.begin(), members.end());
    const int rc = MPI_Group_incl(parent, static_cast<int>(ranks.size()), ranks.data(), &picked);
    MPI_Group_free(&parent);
    check(rc, "MPI_Group_incl", where);
    auto st = std::make_shared<comm_state>();
    const int rc2 = MPI_Comm_create_group(st_->comm, picked, static_cast<int>(context & 0x7fff), &st->comm);
    MPI_Group_free(&picked);
    check(rc2, "MPI_Comm_create_group", where);
    mpi t(std::move(st), context);
    t.adopt();
    return t;
  }

  /// After a failure, the transport of the ranks still alive (`communicator::shrink`): with an
  /// MPI that has ULFM (MPIX_Comm_shrink: MPICH, Open MPI 5 built with it), the communicator is
  /// revoked and shrunk, and the survivors keep their order. Elsewhere (Debian's Open MPI 4.1)
  /// `usage_error` saying so: there, restart the job (`mpiexec` again, or a launcher's restarts).
  /// MPI's own shrink has no deadline: `timeout` bounds only the duplication that follows.
  TUTTI_COLD mpi shrink(std::chrono::milliseconds timeout, std::vector<int>* kept = nullptr) const {
    if (context_ != 0) throw usage_error("mpi shrink: call it on the world communicator, not on a group");
#if defined(MPIX_ERR_PROC_FAILED)
    using namespace detail::mpi_impl;
    const std::string where = "tutti::mpi::shrink";
    MPIX_Comm_revoke(st_->comm);  // every survivor leaves what it was waiting in
    MPI_Comm survivors = MPI_COMM_NULL;
    check(MPIX_Comm_shrink(st_->comm, &survivors), "MPIX_Comm_shrink", where);
    if (kept) {
      MPI_Group old_group, new_group;
      MPI_Comm_group(st_->comm, &old_group);
      MPI_Comm_group(survivors, &new_group);
      int n = 0;
      MPI_Comm_size(survivors, &n);
      std::vector<int> ranks(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) ranks[static_cast<std::size_t>(i)] = i;
      kept->assign(static_cast<std::size_t>(n), 0);
      MPI_Group_translate_ranks(new_group, n, ranks.data(), old_group, kept->data());
      MPI_Group_free(&old_group);
      MPI_Group_free(&new_group);
    }
    mpi t = create(survivors, timeout);
    MPI_Comm_free(&survivors);
    return t;
#else
    (void)timeout;
    (void)kept;
    throw usage_error("mpi shrink: this MPI has no ULFM (no MPIX_Comm_shrink; "
#if defined(OPEN_MPI)
                      "Open MPI " + std::to_string(OMPI_MAJOR_VERSION) + "." + std::to_string(OMPI_MINOR_VERSION) +
                      " was built without it"
#else
                      "its mpi.h does not declare it"
#endif
                      "), so the survivors of a failure cannot form a new communicator in this job: start it "
                      "again (tuttirun --max-restarts, or mpiexec again), or use tutti::shm or tutti::tcp, which "
                      "shrink");
#endif
  }

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

  /// Tells the group's other ranks that this one failed, so those waiting for it raise
  /// `peer_lost` with `what` instead of timing out. Never blocks.
  void fail(std::string_view what) noexcept {
    using namespace detail::mpi_impl;
    if (finalized()) return;
    st_->broken = true;
    try {
      // The communicator's context, then the text: a receiver drops notices of another context.
      auto text = std::make_unique<std::string>(sizeof context_, '\0');
      std::memcpy(text->data(), &context_, sizeof context_);
      text->append(toolkit::notice_text(what, max_notice));
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        MPI_Request req = MPI_REQUEST_NULL;
        if (MPI_Isend(text->data(), static_cast<int>(text->size()), MPI_CHAR, r, tag_failure, st_->comm, &req) ==
            MPI_SUCCESS)
          MPI_Request_free(&req);  // completes on its own; the text lives as long as the communicator
      }
      st_->notices.push_back(std::move(text));
    } catch (...) {
    }
  }

  // ---- native collectives (algo::native) ----------------------------------------------------

  /// Every rank's fingerprint is the same, or `mismatch_error` naming the first rank that
  /// differs from this one (on every rank: all of them see the same min and max).
  /// For the v-collectives, `large` says that this rank's counts or offsets exceed MPI's int;
  /// the result says whether any rank's do (every rank gets the same answer, in the same
  /// all-reduce: then they all run tutti's own schedule instead of MPI's).
  bool native_agree(const fingerprint& fp, const wait_context& w, bool blocking = false, bool large = false) {
    using namespace detail::mpi_impl;
    // On the heap: a collective that fails may stay pending and write them later (`complete`),
    // so they are then kept until exit.
    auto words = std::make_unique<std::uint64_t[]>(2 * fp_words + 1);
    encode(fp, words.get());
    for (int i = 0; i < fp_words; ++i) words[fp_words + i] = ~words[i];
    words[2 * fp_words] = large ? 1 : 0;
    try {
      start_and_complete(fp, (2 * fp_words + 1) * 8, w, blocking, "MPI_Iallreduce (fingerprint agreement)",
                         [&](MPI_Request* r) {
                           return either(r, MPI_Iallreduce, MPI_Allreduce, MPI_IN_PLACE, words.get(), 2 * fp_words + 1,
                                         MPI_UINT64_T, MPI_MAX, st_->comm);
                         });
    } catch (...) {
      keep_until_exit(std::move(words));
      throw;
    }
    bool same = true;
    for (int i = 0; i < fp_words; ++i) same = same && words[i] == ~words[fp_words + i];
    if (same) return words[2 * fp_words] != 0;
    auto mine = std::make_unique<std::uint64_t[]>(fp_words);
    encode(fp, mine.get());
    auto all = std::make_unique<std::uint64_t[]>(static_cast<std::size_t>(size_) * fp_words);
    try {
      start_and_complete(fp, static_cast<std::size_t>(size_) * fp_words * 8, w, blocking,
                         "MPI_Iallgather (fingerprint agreement)", [&](MPI_Request* r) {
                           return either(r, MPI_Iallgather, MPI_Allgather, mine.get(), fp_words, MPI_UINT64_T,
                                         all.get(), fp_words, MPI_UINT64_T, st_->comm);
                         });
    } catch (...) {
      keep_until_exit(std::move(mine));
      keep_until_exit(std::move(all));
      throw;
    }
    for (int r = 0; r < size_; ++r) {
      const fingerprint theirs = decode(all.get() + static_cast<std::size_t>(r) * fp_words);
      if (theirs != fp)
        throw mismatch_error(where(fp, w) + ": " + detail::describe_difference(fp, rank_, theirs, r));
    }
    throw mismatch_error(where(fp, w) + ": the ranks' fingerprints differ, though none differs from rank " +
                         std::to_string(rank_) + "'s");
  }

  template <class T>
  void native_broadcast(T* buf, std::size_t n, int root, const fingerprint& fp, const wait_context& w,
                        bool blocking = false) {
    start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Ibcast", [&](MPI_Request* r) {
      return either(r, MPI_Ibcast, MPI_Bcast, buf, count(n, fp, w), type<T>(), root, st_->comm);
    });
  }

  template <class T, class Op>
  void native_reduce(const T* in, T* out, std::size_t n, int root, const Op&, const fingerprint& fp,
                     const wait_context& w, bool blocking = false) {
    const bool in_place = rank_ == root && in == out;
    start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Ireduce", [&](MPI_Request* r) {
      return either(r, MPI_Ireduce, MPI_Reduce, in_place ? MPI_IN_PLACE : in, rank_ == root ? out : nullptr,
                    count(n, fp, w), type<T>(), reduce_op_of<Op, T>(), root, st_->comm);
    });
  }

  template <class T, class Op>
  void native_all_reduce(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp,
                         const wait_context& w, bool blocking = false) {
    start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Iallreduce", [&](MPI_Request* r) {
      return either(r, MPI_Iallreduce, MPI_Allreduce, in == out ? MPI_IN_PLACE : in, out, count(n, fp, w), type<T>(),
                    reduce_op_of<Op, T>(), st_->comm);
    });
  }

  /// `n` elements per rank; at the root, `in` may be its own block of `out`.
  template <class T>
  void native_gather(const T* in, T* out, std::size_t n, int root, const fingerprint& fp, const wait_context& w,
                     bool blocking = false) {
    const bool at_root = rank_ == root;
    const bool in_place = at_root && n && in == out + static_cast<std::size_t>(rank_) * n;
    start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Igather", [&](MPI_Request* r) {
      const int c = count(n, fp, w);
      return either(r, MPI_Igather, MPI_Gather, in_place ? MPI_IN_PLACE : in, c, type<T>(), at_root ? out : nullptr,
                    c, type<T>(), root, st_->comm);
    });
  }

  template <class T>
  void native_all_gather(const T* in, T* out, std::size_t n, const fingerprint& fp, const wait_context& w,
                         bool blocking = false) {
    const bool in_place = n && in == out + static_cast<std::size_t>(rank_) * n;
    start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Iallgather", [&](MPI_Request* r) {
      const int c = count(n, fp, w);
      return either(r, MPI_Iallgather, MPI_Allgather, in_place ? MPI_IN_PLACE : in, c, type<T>(), out, c, type<T>(),
                    st_->comm);
    });
  }

  /// `n` elements per rank; at the root, `out` may be its own block of `in`.
  template <class T>
  void native_scatter(const T* in, T* out, std::size_t n, int root, const fingerprint& fp, const wait_context& w,
                      bool blocking = false) {
    const bool at_root = rank_ == root;
    const bool in_place = at_root && n && out == in + static_cast<std::size_t>(rank_) * n;
    start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Iscatter", [&](MPI_Request* r) {
      const int c = count(n, fp, w);
      return either(r, MPI_Iscatter, MPI_Scatter, at_root ? in : nullptr, c, type<T>(),
                    in_place ? MPI_IN_PLACE : static_cast<void*>(out), c, type<T>(), root, st_->comm);
    });
  }

  /// `n` elements per block.
  template <class T>
  void native_all_to_all(const T* in, T* out, std::size_t n, const fingerprint& fp, const wait_context& w,
                         bool blocking = false) {
    start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Ialltoall", [&](MPI_Request* r) {
      const int c = count(n, fp, w);
      return either(r, MPI_Ialltoall, MPI_Alltoall, in, c, type<T>(), out, c, type<T>(), st_->comm);
    });
  }

  /// `n` elements per rank's block of the result.
  template <class T, class Op>
  void native_reduce_scatter(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp,
                             const wait_context& w, bool blocking = false) {
    start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Ireduce_scatter_block", [&](MPI_Request* r) {
      return either(r, MPI_Ireduce_scatter_block, MPI_Reduce_scatter_block, in, out, count(n, fp, w), type<T>(),
                    reduce_op_of<Op, T>(), st_->comm);
    });
  }

  /// Inclusive prefix: MPI_Iscan (rank order; a user op non-commutative).
  template <class T, class Op>
  void native_scan(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp, const wait_context& w,
                   bool blocking = false) {
    start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Iscan", [&](MPI_Request* r) {
      return either(r, MPI_Iscan, MPI_Scan, in == out ? MPI_IN_PLACE : in, out, count(n, fp, w), type<T>(),
                    detail::mpi_impl::mpi_op<Op, T, true>(), st_->comm);
    });
  }

  /// Exclusive prefix: MPI_Iexscan. MPI leaves rank 0's result undefined; tutti promises rank 0's
  /// `out` unchanged, so rank 0 receives into a buffer of its own.
  template <class T, class Op>
  void native_exscan(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp, const wait_context& w,
                     bool blocking = false) {
    std::unique_ptr<std::byte[]> discard;
    T* result = out;
    if (rank_ == 0) {
      discard = std::make_unique<std::byte[]>(n * sizeof(T) + 1);
      result = reinterpret_cast<T*>(discard.get());
    }
    const bool in_place = in == out && rank_ != 0;
    start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Iexscan", [&](MPI_Request* r) {
      return either(r, MPI_Iexscan, MPI_Exscan, in_place ? MPI_IN_PLACE : in, result, count(n, fp, w), type<T>(),
                    detail::mpi_impl::mpi_op<Op, T, true>(), st_->comm);
    });
  }

  // ---- native v-collectives: MPI's, with int counts and displacements (algo::native falls back
  // to tutti's schedules where they do not fit: native_agree's `large`). MPI checks no count
  // against its peer's, so where only some ranks know the counts each rank first receives what
  // its peers say it must hold (an MPI_Iscatter or MPI_Ialltoall of 64-bit counts) and compares.

  template <class T>
  void native_all_gather_v(const T* in, T* out, const block_counts& b, const fingerprint& fp, const wait_context& w,
                           bool blocking = false) {
    auto counts = int_table(b.counts, fp, w), displs = int_table(b.offsets, fp, w);
    const bool in_place = b.count(rank_) && in == out + b.offset(rank_);
    kept_on_failure([&] {
      start_and_complete(fp, b.total * sizeof(T), w, blocking, "MPI_Iallgatherv", [&](MPI_Request* r) {
        return either(r, MPI_Iallgatherv, MPI_Allgatherv, in_place ? MPI_IN_PLACE : in, count(b.count(rank_), fp, w),
                      type<T>(), out, counts.get(), displs.get(), type<T>(), st_->comm);
      });
    }, counts, displs);
  }

  /// `n`: this rank's count; `b`: the root's counts (empty elsewhere).
  template <class T>
  void native_gather_v(const T* in, std::size_t n, T* out, const block_counts& b, int root, const fingerprint& fp,
                       const wait_context& w, bool blocking = false) {
    check_counts_from_root(n, b, root, "in", fp, w, blocking);
    const bool at_root = rank_ == root;
    auto counts = int_table(b.counts, fp, w), displs = int_table(b.offsets, fp, w);
    const bool in_place = at_root && n && in == out + b.offset(rank_);
    kept_on_failure([&] {
      start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Igatherv", [&](MPI_Request* r) {
        return either(r, MPI_Igatherv, MPI_Gatherv, in_place ? MPI_IN_PLACE : in, count(n, fp, w), type<T>(),
                      at_root ? out : nullptr, counts.get(), displs.get(), type<T>(), root, st_->comm);
      });
    }, counts, displs);
  }

  /// `n`: this rank's count; `b`: the root's counts (empty elsewhere).
  template <class T>
  void native_scatter_v(const T* in, const block_counts& b, T* out, std::size_t n, int root, const fingerprint& fp,
                        const wait_context& w, bool blocking = false) {
    check_counts_from_root(n, b, root, "out", fp, w, blocking);
    const bool at_root = rank_ == root;
    auto counts = int_table(b.counts, fp, w), displs = int_table(b.offsets, fp, w);
    const bool in_place = at_root && n && out == in + b.offset(rank_);
    kept_on_failure([&] {
      start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Iscatterv", [&](MPI_Request* r) {
        return either(r, MPI_Iscatterv, MPI_Scatterv, at_root ? in : nullptr, counts.get(), displs.get(), type<T>(),
                      in_place ? MPI_IN_PLACE : static_cast<void*>(out), count(n, fp, w), type<T>(), root, st_->comm);
      });
    }, counts, displs);
  }

  template <class T>
  void native_all_to_all_v(const T* in, const block_counts& send, T* out, const block_counts& recv,
                           const fingerprint& fp, const wait_context& w, bool blocking = false) {
    // What every rank sends this one must be what this one expects from it.
    auto mine = std::make_unique<std::uint64_t[]>(static_cast<std::size_t>(size_));
    auto theirs = std::make_unique<std::uint64_t[]>(static_cast<std::size_t>(size_));
    for (int j = 0; j < size_; ++j) mine[static_cast<std::size_t>(j)] = send.count(j);
    kept_on_failure([&] {
      start_and_complete(fp, 8, w, blocking, "MPI_Ialltoall (all_to_all_v counts)", [&](MPI_Request* r) {
        return either(r, MPI_Ialltoall, MPI_Alltoall, mine.get(), 1, MPI_UINT64_T, theirs.get(), 1, MPI_UINT64_T,
                      st_->comm);
      });
    }, mine, theirs);
    for (int i = 0; i < size_; ++i)
      if (theirs[static_cast<std::size_t>(i)] != recv.count(i))
        throw mismatch_error(where(fp, w) + ": rank " + std::to_string(rank_) + " has recv_counts[" + std::to_string(i) +
                             "] = " + std::to_string(recv.count(i)) + ", but rank " + std::to_string(i) +
                             " has send_counts[" + std::to_string(rank_) + "] = " +
                             std::to_string(theirs[static_cast<std::size_t>(i)]));
    auto sc = int_table(send.counts, fp, w), sd = int_table(send.offsets, fp, w);
    auto rc = int_table(recv.counts, fp, w), rd = int_table(recv.offsets, fp, w);
    kept_on_failure([&] {
      start_and_complete(fp, recv.total * sizeof(T), w, blocking, "MPI_Ialltoallv", [&](MPI_Request* r) {
        return either(r, MPI_Ialltoallv, MPI_Alltoallv, in, sc.get(), sd.get(), type<T>(), out, rc.get(), rd.get(),
                      type<T>(), st_->comm);
      });
    }, sc, sd, rc, rd);
  }

  template <class T, class Op>
  void native_reduce_scatter_v(const T* in, T* out, const block_counts& b, const Op&, const fingerprint& fp,
                               const wait_context& w, bool blocking = false) {
    auto counts = int_table(b.counts, fp, w);
    kept_on_failure([&] {
      start_and_complete(fp, b.total * sizeof(T), w, blocking, "MPI_Ireduce_scatter", [&](MPI_Request* r) {
        return either(r, MPI_Ireduce_scatter, MPI_Reduce_scatter, in, out, counts.get(), type<T>(),
                      reduce_op_of<Op, T>(), st_->comm);
      });
    }, counts);
  }

  void native_barrier(const fingerprint& fp, const wait_context& w, bool blocking = false) {
    start_and_complete(fp, 0, w, blocking, "MPI_Ibarrier",
                       [&](MPI_Request* r) { return either(r, MPI_Ibarrier, MPI_Barrier, st_->comm); });
  }

 private:
  mpi(std::shared_ptr<detail::mpi_impl::comm_state> st, std::uint64_t context)
      : st_(std::move(st)), context_(context) {}

  /// Reads rank, size and the tag bound of the new communicator and makes MPI errors return.
  void adopt() {
    using namespace detail::mpi_impl;
    const std::string where = "tutti::mpi";
    check(MPI_Comm_set_errhandler(st_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", where);
    check(MPI_Comm_rank(st_->comm, &rank_), "MPI_Comm_rank", where);
    check(MPI_Comm_size(st_->comm, &size_), "MPI_Comm_size", where);
    st_->oversubscribed = detail::mpi_impl::oversubscribed();
    void* ub = nullptr;
    int flag = 0;
    check(MPI_Comm_get_attr(st_->comm, MPI_TAG_UB, &ub, &flag), "MPI_Comm_get_attr", where);
    if (flag && ub) st_->tag_ub = *static_cast<int*>(ub);
  }

  /// The launcher's variables must agree with MPI (see the file comment). Slurm's are skipped
  /// when Open MPI's or PMI's are set: mpirun inside an allocation starts its daemons with srun,
  /// so SLURM_PROCID there is a daemon's index, not this rank.
  static void check_environment(int rank, int size) {
    const bool other_launcher =
        detail::getenv_nonempty("OMPI_COMM_WORLD_RANK") != nullptr || detail::getenv_nonempty("PMI_RANK") != nullptr;
    for (const auto& c : detail::conventions) {
      if (std::string_view(c.name) == "Slurm" && other_launcher) continue;
      const auto r = detail::env_int(c.rank, 0, 1L << 30), s = detail::env_int(c.size, 1, 1L << 30);
      auto says = [&](const char* var, long v, const char* what, int mpi_value) {
        return std::string("tutti::mpi: ") + var + "=" + std::to_string(v) + " (" + c.name + " convention) but MPI says " +
               what + " is " + std::to_string(mpi_value) +
               (size == 1 ? " (was the program started without mpirun/srun, as a singleton?)" : "");
      };
      if (s && *s != size) throw config_error(says(c.size, *s, "the world size", size));
      if (r && *r != rank) throw config_error(says(c.rank, *r, "this process's rank", rank));
    }
  }

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
  std::unique_ptr<int[]> int_table(std::span<const std::size_t> v, const fingerprint& fp, const wait_context& w) const {
    auto t = std::make_unique<int[]>(std::max<std::size_t>(v.size(), 1));
    for (std::size_t i = 0; i < v.size(); ++i) t[i] = count(v[i], fp, w);
    return t;
  }

  /// Runs `f`; when it throws (a collective that may stay pending), `buffers` are kept until exit.
  template <class F, class... B>
  static void kept_on_failure(F&& f, B&... buffers) {
    try {
      f();
    } catch (...) {
      (detail::mpi_impl::keep_until_exit(std::move(buffers)), ...);
      throw;
    }
  }

  /// gather_v's and scatter_v's count check: the root sends every rank its count for it (an
  /// MPI_Iscatter of 64-bit words), and each rank compares it with the size of its `what`.
  void check_counts_from_root(std::size_t n, const block_counts& b, int root, const char* what, const fingerprint& fp,
                              const wait_context& w, bool blocking) {
    const bool at_root = rank_ == root;
    auto table = std::make_unique<std::uint64_t[]>(at_root ? static_cast<std::size_t>(size_) : 1);
    auto mine = std::make_unique<std::uint64_t[]>(1);
    if (at_root)
      for (int r = 0; r < size_; ++r) table[static_cast<std::size_t>(r)] = b.count(r);
    kept_on_failure([&] {
      start_and_complete(fp, 8, w, blocking, "MPI_Iscatter (counts)", [&](MPI_Request* r) {
        return either(r, MPI_Iscatter, MPI_Scatter, table.get(), 1, MPI_UINT64_T, mine.get(), 1, MPI_UINT64_T, root,
                      st_->comm);
      });
    }, table, mine);
    if (mine[0] != n)
      throw mismatch_error(where(fp, w) + ": rank " + std::to_string(rank_) + "'s " + what + " has " +
                           std::to_string(n) + " elements, but the root, rank " + std::to_string(root) +
                           ", has counts[" + std::to_string(rank_) + "] = " + std::to_string(mine[0]));
  }

  /// The (header, payload) tags of a message: the collective pair, or user tag t's pair.
  std::pair<int, int> tags(const header& h, const wait_context& w) const {
    using namespace detail::mpi_impl;
    if (h.fp.coll != collective::send_recv) return {tag_header, tag_payload};
    const long t = h.fp.root < 0 ? 0 : h.fp.root;
    const long top = (static_cast<long>(st_->tag_ub) - tag_p2p - 1) / 2;
    if (t > top)
      throw usage_error(toolkit::where(h, w.algorithm) + ": tag " +
                        std::to_string(t) + " exceeds " + std::to_string(top) +
                        ", the largest this MPI's tag range (MPI_TAG_UB) leaves for user tags");
    return {tag_p2p + 2 * static_cast<int>(t), tag_p2p + 2 * static_cast<int>(t) + 1};
  }

  /// Calls `post(offset, bytes)` for each piece of a payload (one, unless it exceeds `max_piece`).
  template <class Post>
  static void pieces(std::size_t bytes, Post post) {
    for (std::size_t at = 0; at < bytes; at += detail::mpi_impl::max_piece)
      post(at, static_cast<int>(std::min(detail::mpi_impl::max_piece, bytes - at)));
  }

  /// Send (`hs`, to `to`) and/or receive (`hr`, from `from`); null headers mean "none". Returns
  /// or throws only once MPI is done with everything it posted (see `settle`).
  void exchange(int to, const header* hs, const std::byte* sdata, int from, const header* hr, std::byte* rdata,
                const wait_context& w) {
    using namespace detail::mpi_impl;
    using role = request_set::role;
    const header& h = hr ? *hr : *hs;
    auto at = [&] { return toolkit::where(h, w.algorithm) + " on rank " + std::to_string(rank_); };
    const auto tag_pair = tags(h, w);
    wire_header in{}, out{};  // before `rs`: the requests on them end before they go
    request_set rs;
    const std::size_t send_pieces = hs ? (hs->bytes + max_piece - 1) / max_piece : 0;
    const std::size_t recv_pieces = hr ? (hr->bytes + max_piece - 1) / max_piece : 0;
    rs.reserve(2 + send_pieces + recv_pieces);
    bool checked = hr == nullptr;
    bool header_in = false;  // the header arrived (and was checked, or refused)
    try {
      // Receive first: the header, whose check decides whether the payload is taken.
      if (hr)
        check(MPI_Irecv(&in, sizeof in, MPI_BYTE, from, tags(*hr, w).first, st_->comm, rs.add(from, role::header)),
              "MPI_Irecv", at);
      if (hs) {
        header x = *hs;
        x.fp.context = context_;
        out = toolkit::wire::frame::of(toolkit::wire::kind::message, x);
        const auto [th, tp] = tags(*hs, w);
        check(MPI_Isend(&out, sizeof out, MPI_BYTE, to, th, st_->comm, rs.add(to, role::send)), "MPI_Isend", at);
        pieces(hs->bytes, [&](std::size_t off, int n) {
          check(MPI_Isend(sdata + off, n, MPI_BYTE, to, tp, st_->comm, rs.add(to, role::send)), "MPI_Isend", at);
        });
      }
      const std::size_t first_other = hr ? 1 : 0;
      const auto started = std::chrono::steady_clock::now();
      unsigned polls = 0;
      bool told = false;
      std::string suspect;  // a waiting notice that shows a disagreement, unless the header comes
      drive(w, h, hr ? from : to, hr && hs && to != from ? to : -1, hr ? "to receive from" : "to deliver to", [&] {
        if (!checked && hr->fp.coll != collective::send_recv && ++polls % 64 == 0 &&
            std::chrono::steady_clock::now() - started > waiting_notice_after) {
          // Ranks that disagree about a call can each wait to receive from the other (two ranks
          // that each take the other for the root, or a cycle): say what this rank waits for, and
          // look at what the peer says. A notice arrives on its own tag, so the header it would
          // follow may still be on its way: believe it only if the header is still missing at
          // the next look.
          if (!suspect.empty()) throw mismatch_error(suspect);
          if (!told) tell_waiting(hr->fp);
          told = true;
          suspect = waiting_notice(from, *hr, w);
        }
        if (!checked) {
          int done = 0;
          MPI_Status status;
          check(MPI_Test(&rs[0], &done, &status), "MPI_Test", at);
          if (done) {
            header_in = true;
            header want = *hr;
            want.fp.context = context_;
            toolkit::check_header(want, rank_, in.head(), from, w.algorithm);
            checked = true;
            const int tp = tags(*hr, w).second;
            pieces(hr->bytes, [&](std::size_t off, int n) {
              check(MPI_Irecv(rdata + off, n, MPI_BYTE, from, tp, st_->comm, rs.add(from, role::payload)), "MPI_Irecv",
                    at);
            });
          }
        }
        const bool rest = rs.test(first_other, at);  // the sends, and the payload once posted
        return checked && rest;
      });
    } catch (...) {
      // A refused header's payload is still coming: take it (see `settle`).
      const std::uint64_t refused = header_in && !checked ? in.bytes : 0;
      if (const std::size_t left = settle(rs, w, tag_pair, in, refused ? from : -1, refused))
        rethrow_noting(" [and " + std::to_string(left) + " of its MPI requests (sends or receives of the payload) "
                       "could not be completed within " + std::to_string(settle_within.count()) +
                       " s after the failure: MPI may still read or write this call's buffers; end the job rather "
                       "than carry on]");
      throw;
    }
  }

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
                     const detail::mpi_impl::wire_header& in, int refused_from, std::uint64_t refused_bytes) {
    using namespace detail::mpi_impl;
    using role = request_set::role;
    using clock = std::chrono::steady_clock;
    if (finalized()) return 0;
    auto drain = [&](int peer, std::uint64_t bytes) {
      pieces(bytes, [&](std::size_t, int) {
        MPI_Irecv(nullptr, 0, MPI_BYTE, peer, tag_pair.second, st_->comm, rs.add(peer, role::payload));
      });
    };
    if (refused_from >= 0) drain(refused_from, refused_bytes);
    if (rs.size() > 0 && rs.at(0).r == role::header && rs[0] != MPI_REQUEST_NULL) MPI_Cancel(&rs[0]);
    const auto start = clock::now();
    const std::chrono::milliseconds bound = settle_bound(w);
    int cancelled_from = -1;  // the peer whose header this rank no longer waits for
    for (unsigned round = 0;; ++round) {
      bool left = false;
      for (std::size_t i = 0; i < rs.size(); ++i) {
        auto& e = rs.at(i);
        if (e.req == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_Status status{};
        if (MPI_Test(&e.req, &done, &status) != MPI_SUCCESS) {  // ended in error (a drain's truncation)
          e.req = MPI_REQUEST_NULL;
          continue;
        }
        if (done) {
          int cancelled = 0;
          if (e.r != role::header || MPI_Test_cancelled(&status, &cancelled) != MPI_SUCCESS) continue;
          if (cancelled) cancelled_from = e.peer;
          else drain(e.peer, in.bytes);  // matched before the cancel: its payload comes (`e` may move)
          continue;
        }
        if (e.r == role::send && round % 16 == 0 && peer_failed(e.peer)) {
          st_->kept.push_back(e.req);  // never taken: see above
          e.req = MPI_REQUEST_NULL;
          continue;
        }
        left = true;
      }
      if (!left) {
        if (!st_->kept.empty()) st_->broken = true;  // so its MPI handle is kept too
        return 0;
      }
      if (round % 16 == 0) {  // take the headers of the peer it gave up on, and of those it sends to
        std::vector<int> peers;
        if (cancelled_from >= 0) peers.push_back(cancelled_from);
        for (std::size_t i = 0; i < rs.size(); ++i)
          if (rs.at(i).r == role::send && rs[i] != MPI_REQUEST_NULL) peers.push_back(rs.at(i).peer);
        std::sort(peers.begin(), peers.end());
        peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
        for (const int peer : peers) {
          int flag = 0;
          MPI_Status status;
          if (MPI_Iprobe(peer, tag_pair.first, st_->comm, &flag, &status) != MPI_SUCCESS || !flag) continue;
          wire_header theirs{};
          if (MPI_Recv(&theirs, sizeof theirs, MPI_BYTE, peer, tag_pair.first, st_->comm, MPI_STATUS_IGNORE) ==
              MPI_SUCCESS)
            drain(peer, theirs.bytes);
        }
      }
      const auto now = clock::now();
      if (now - start > bound) break;
      if (now - start > std::chrono::milliseconds(20)) std::this_thread::sleep_for(std::chrono::microseconds(100));
      else std::this_thread::yield();
    }
    std::size_t kept = 0;
    for (std::size_t i = 0; i < rs.size(); ++i)
      if (rs[i] != MPI_REQUEST_NULL) {
        st_->kept.push_back(rs[i]);
        rs[i] = MPI_REQUEST_NULL;
        ++kept;
      }
    st_->broken = true;  // so its MPI handle is kept too
    return kept;
  }

  /// Whether `peer` sent this communicator a failure notice (read now, or earlier by `check_notice`).
  bool peer_failed(int peer) {
    using namespace detail::mpi_impl;
    auto& lost = st_->lost;
    if (std::find(lost.begin(), lost.end(), peer) != lost.end()) return true;
    for (int flag = 1;;) {
      MPI_Status status;
      if (MPI_Iprobe(peer, tag_failure, st_->comm, &flag, &status) != MPI_SUCCESS || !flag) return false;
      int n = 0;
      MPI_Get_count(&status, MPI_CHAR, &n);
      std::string text(static_cast<std::size_t>(std::max(n, 0)), '\0');
      if (MPI_Recv(text.data(), n, MPI_CHAR, peer, tag_failure, st_->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
      std::uint64_t context = ~context_;
      if (text.size() >= sizeof context) std::memcpy(&context, text.data(), sizeof context);
      if (context == context_) {
        lost.push_back(peer);
        return true;
      }
    }
  }

  /// Sends every other rank of the group a waiting notice (`fp`, what this rank waits to receive
  /// in), once per call; never blocks.
  void tell_waiting(fingerprint fp) {
    using namespace detail::mpi_impl;
    fp.context = context_;
    std::uint64_t words[fp_words];
    encode(fp, words);
    if (std::memcmp(words, st_->told, sizeof words) == 0) return;
    std::memcpy(st_->told, words, sizeof words);
    auto& pending = st_->waiting;
    std::erase_if(pending, [](auto& e) {
      int done = 0;
      return MPI_Test(&e.first, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done;
    });
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      auto buf = std::make_unique<std::uint64_t[]>(fp_words);
      std::memcpy(buf.get(), words, sizeof words);
      MPI_Request req = MPI_REQUEST_NULL;
      if (MPI_Isend(buf.get(), fp_words, MPI_UINT64_T, r, tag_waiting, st_->comm, &req) == MPI_SUCCESS)
        pending.emplace_back(req, std::move(buf));
    }
  }

  /// Reads `peer`'s waiting notices. One that says the peer waits in a later call of this
  /// communicator, or in this call with other arguments, while this rank waits for its message:
  /// the text of a mismatch_error naming both. Others (an earlier call, the same call) are
  /// dropped; empty when none shows a disagreement.
  std::string waiting_notice(int peer, const header& want, const wait_context& w) {
    using namespace detail::mpi_impl;
    auto at = [&] { return toolkit::where(want, w.algorithm); };
    fingerprint mine = want.fp;
    mine.context = context_;
    for (int flag = 1;;) {
      MPI_Status st;
      check(MPI_Iprobe(peer, tag_waiting, st_->comm, &flag, &st), "MPI_Iprobe", at);
      if (!flag) return {};
      std::uint64_t words[fp_words];
      check(MPI_Recv(words, fp_words, MPI_UINT64_T, peer, tag_waiting, st_->comm, MPI_STATUS_IGNORE), "MPI_Recv", at);
      const fingerprint theirs = decode(words);
      if (toolkit::left_behind(mine, theirs))
        return at() + ": " + detail::describe_difference(mine, rank_, theirs, peer) + " (each waits for the other: rank " +
               std::to_string(peer) + " waits in " + std::string(collective_name(theirs.coll)) + " #" +
               std::to_string(theirs.seq) + ")";
    }
  }

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
                          const char* call, Start start) {
    if (blocking) {
      detail::mpi_impl::check(start(nullptr), call, [&] { return where(fp, w) + " (blocking form)"; });
      return;
    }
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_impl::check(start(&req), call, [&] { return where(fp, w); });
    complete(req, fp, bytes, w, call);
  }

  /// Waits for a non-blocking collective. MPI cannot cancel one, so on failure it drives it for
  /// up to `settle_bound` more (it completes if the others are in it still: this rank alone was
  /// aborted or out of time, say); one still pending then is kept, never freed, and the error
  /// says that MPI may still read or write the call's buffers.
  void complete(MPI_Request& req, const fingerprint& fp, std::size_t bytes, const wait_context& w, const char* call) {
    using namespace detail::mpi_impl;
    header h{fp, bytes};
    try {
      drive(w, h, -1, -1, call, [&] {
        int done = 0;
        check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), call, [&] { return where(fp, w); });
        return done != 0;
      });
    } catch (...) {
      const auto until = std::chrono::steady_clock::now() + settle_bound(w);
      for (int done = 0; req != MPI_REQUEST_NULL && !finalized();) {
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) req = MPI_REQUEST_NULL;
        else if (std::chrono::steady_clock::now() > until) break;
        else std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (req == MPI_REQUEST_NULL || finalized()) throw;
      st_->kept.push_back(req);
      st_->broken = true;
      rethrow_noting(std::string(" [and ") + call + " is still pending " + std::to_string(settle_within.count()) +
                     " s after the failure (MPI cannot cancel a collective): MPI may still read or write this "
                     "call's buffers; end the job rather than carry on]");
    }
  }

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
  void drive(const wait_context& w, const header& h, int peer, int peer2, const char* doing, Ready ready) {
    const bool over = st_->oversubscribed;
    const toolkit::wait_policy policy{over ? 16 : 0, std::chrono::microseconds(over ? 0 : 50),
                                      std::chrono::milliseconds(20), std::chrono::milliseconds(1), 16};
    unsigned sleeps = 0;
    toolkit::wait_until(
        w, {h, rank_, doing, peer}, policy, ready,
        [&](auto) {
          if (peer != no_notices) check_notice(peer, h, w);
          if (peer2 >= 0) check_notice(peer2, h, w);
        },
        [&](auto until) {
          const auto left = until - std::chrono::steady_clock::now();
          const std::chrono::nanoseconds step = std::chrono::microseconds(sleeps++ < 4096 ? 100 : 1000);
          if (left.count() > 0) std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(step, left));
        },
        [&](auto) -> std::chrono::steady_clock::time_point {
          const std::string me = "rank " + std::to_string(rank_);
          if (peer >= 0)
            toolkit::time_out(toolkit::timeout_text(h, w.algorithm, me, w.timeout, doing, "rank " + std::to_string(peer)));
          if (peer == -1)
            toolkit::time_out(toolkit::timeout_text(h, w.algorithm, me, w.timeout, std::string("in ") + doing,
                                                    "for the other ranks"));
          toolkit::time_out(toolkit::timeout_text(h, w.algorithm, me, w.timeout, doing, "the other ranks"));
        });
  }

  /// Raises `peer_lost` if `peer` (any rank when -1) sent a failure notice.
  void check_notice(int peer, const header& h, const wait_context& w) {
    using namespace detail::mpi_impl;
    int flag = 0;
    MPI_Status status;
    auto at = [&] { return toolkit::where(h, w.algorithm); };
    check(MPI_Iprobe(peer >= 0 ? peer : MPI_ANY_SOURCE, tag_failure, st_->comm, &flag, &status), "MPI_Iprobe", at);
    if (!flag) return;
    int n = 0;
    MPI_Get_count(&status, MPI_CHAR, &n);
    std::string text(static_cast<std::size_t>(std::max(n, 0)), '\0');
    check(MPI_Recv(text.data(), n, MPI_CHAR, status.MPI_SOURCE, tag_failure, st_->comm, MPI_STATUS_IGNORE),
          "MPI_Recv", at);
    std::uint64_t context = ~context_;
    if (text.size() >= sizeof context) std::memcpy(&context, text.data(), sizeof context);
    if (context != context_) return;  // from an earlier communicator that MPI gave the same id
    text.erase(0, sizeof context);
    st_->lost.push_back(status.MPI_SOURCE);  // for `settle`: that rank takes none of our messages now
    throw peer_lost(at() + ": rank " + std::to_string(status.MPI_SOURCE) + " failed while rank " +
                    std::to_string(rank_) + " waited" + (peer >= 0 ? " for it" : " in this collective") + ": " + text);
  }

  std::shared_ptr<detail::mpi_impl::comm_state> st_;
  std::uint64_t context_ = 0;
  int rank_ = 0;
  int size_ = 1;
};

static_assert(transport<mpi> && native_collectives<mpi> && failure_notices<mpi> && from_environment<mpi> && shrinkable<mpi>);

}  // namespace tutti
