/// \file
/// `tutti::mpi`'s native collectives (`algo::native`): MPI's own, non-blocking ones waited for
/// under the deadline (`start_and_complete`, `complete`), or its blocking ones with
/// `algo::native{.blocking = true}`. `native_agree` checks first that every rank's fingerprint
/// is the same; the v-collectives check the counts that MPI does not (`check_counts_from_root`,
/// an all-to-all of counts) and hand MPI tables of ints (`int_table`); buffers that a failed
/// collective may still write are kept until exit (`kept_on_failure`).
///
/// Members of `tutti::mpi`, defined here out of its class (mpi/transport.hpp, which includes
/// this file at its end).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include "tutti/core/counts.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/mpi/transport.hpp"

namespace tutti {

inline bool mpi::native_agree(const fingerprint& fp, const wait_context& w, bool blocking, bool large) {
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
      throw fingerprint_mismatch(where(fp, w) + ": " + detail::describe_difference(fp, rank_, theirs, r), fp, rank_,
                                 theirs, r);
  }
  throw mismatch_error(where(fp, w) + ": the ranks' fingerprints differ, though none differs from rank " +
                       std::to_string(rank_) + "'s");
}

template <class T>
inline void mpi::native_broadcast(T* buf, std::size_t n, int root, const fingerprint& fp, const wait_context& w,
                                  bool blocking) {
  start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Ibcast", [&](MPI_Request* r) {
    return either(r, MPI_Ibcast, MPI_Bcast, buf, count(n, fp, w), type<T>(), root, st_->comm);
  });
}

template <class T, class Op>
inline void mpi::native_reduce(const T* in, T* out, std::size_t n, int root, const Op&, const fingerprint& fp,
                               const wait_context& w, bool blocking) {
  const bool in_place = rank_ == root && in == out;
  start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Ireduce", [&](MPI_Request* r) {
    return either(r, MPI_Ireduce, MPI_Reduce, in_place ? MPI_IN_PLACE : in, rank_ == root ? out : nullptr,
                  count(n, fp, w), type<T>(), reduce_op_of<Op, T>(), root, st_->comm);
  });
}

template <class T, class Op>
inline void mpi::native_all_reduce(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp,
                                   const wait_context& w, bool blocking) {
  start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Iallreduce", [&](MPI_Request* r) {
    return either(r, MPI_Iallreduce, MPI_Allreduce, in == out ? MPI_IN_PLACE : in, out, count(n, fp, w), type<T>(),
                  reduce_op_of<Op, T>(), st_->comm);
  });
}

template <class T>
inline void mpi::native_gather(const T* in, T* out, std::size_t n, int root, const fingerprint& fp,
                               const wait_context& w, bool blocking) {
  const bool at_root = rank_ == root;
  const bool in_place = at_root && n && in == out + static_cast<std::size_t>(rank_) * n;
  start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Igather", [&](MPI_Request* r) {
    const int c = count(n, fp, w);
    return either(r, MPI_Igather, MPI_Gather, in_place ? MPI_IN_PLACE : in, c, type<T>(), at_root ? out : nullptr,
                  c, type<T>(), root, st_->comm);
  });
}

template <class T>
inline void mpi::native_all_gather(const T* in, T* out, std::size_t n, const fingerprint& fp, const wait_context& w,
                                   bool blocking) {
  const bool in_place = n && in == out + static_cast<std::size_t>(rank_) * n;
  start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Iallgather", [&](MPI_Request* r) {
    const int c = count(n, fp, w);
    return either(r, MPI_Iallgather, MPI_Allgather, in_place ? MPI_IN_PLACE : in, c, type<T>(), out, c, type<T>(),
                  st_->comm);
  });
}

template <class T>
inline void mpi::native_scatter(const T* in, T* out, std::size_t n, int root, const fingerprint& fp,
                                const wait_context& w, bool blocking) {
  const bool at_root = rank_ == root;
  const bool in_place = at_root && n && out == in + static_cast<std::size_t>(rank_) * n;
  start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Iscatter", [&](MPI_Request* r) {
    const int c = count(n, fp, w);
    return either(r, MPI_Iscatter, MPI_Scatter, at_root ? in : nullptr, c, type<T>(),
                  in_place ? MPI_IN_PLACE : static_cast<void*>(out), c, type<T>(), root, st_->comm);
  });
}

template <class T>
inline void mpi::native_all_to_all(const T* in, T* out, std::size_t n, const fingerprint& fp, const wait_context& w,
                                   bool blocking) {
  start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Ialltoall", [&](MPI_Request* r) {
    const int c = count(n, fp, w);
    return either(r, MPI_Ialltoall, MPI_Alltoall, in, c, type<T>(), out, c, type<T>(), st_->comm);
  });
}

template <class T, class Op>
inline void mpi::native_reduce_scatter(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp,
                                       const wait_context& w, bool blocking) {
  start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Ireduce_scatter_block", [&](MPI_Request* r) {
    return either(r, MPI_Ireduce_scatter_block, MPI_Reduce_scatter_block, in, out, count(n, fp, w), type<T>(),
                  reduce_op_of<Op, T>(), st_->comm);
  });
}

template <class T, class Op>
inline void mpi::native_scan(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp,
                             const wait_context& w, bool blocking) {
  start_and_complete(fp, n * sizeof(T), w, blocking, "MPI_Iscan", [&](MPI_Request* r) {
    return either(r, MPI_Iscan, MPI_Scan, in == out ? MPI_IN_PLACE : in, out, count(n, fp, w), type<T>(),
                  detail::mpi_impl::mpi_op<Op, T, true>(), st_->comm);
  });
}

template <class T, class Op>
inline void mpi::native_exscan(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp,
                               const wait_context& w, bool blocking) {
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

template <class T>
inline void mpi::native_all_gather_v(const T* in, T* out, const block_counts& b, const fingerprint& fp,
                                     const wait_context& w, bool blocking) {
  auto counts = int_table(b.counts, fp, w), displs = int_table(b.offsets, fp, w);
  const bool in_place = b.count(rank_) && in == out + b.offset(rank_);
  kept_on_failure([&] {
    start_and_complete(fp, b.total * sizeof(T), w, blocking, "MPI_Iallgatherv", [&](MPI_Request* r) {
      return either(r, MPI_Iallgatherv, MPI_Allgatherv, in_place ? MPI_IN_PLACE : in, count(b.count(rank_), fp, w),
                    type<T>(), out, counts.get(), displs.get(), type<T>(), st_->comm);
    });
  }, counts, displs);
}

template <class T>
inline void mpi::native_gather_v(const T* in, std::size_t n, T* out, const block_counts& b, int root,
                                 const fingerprint& fp, const wait_context& w, bool blocking) {
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

template <class T>
inline void mpi::native_scatter_v(const T* in, const block_counts& b, T* out, std::size_t n, int root,
                                  const fingerprint& fp, const wait_context& w, bool blocking) {
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
inline void mpi::native_all_to_all_v(const T* in, const block_counts& send, T* out, const block_counts& recv,
                                     const fingerprint& fp, const wait_context& w, bool blocking) {
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
inline void mpi::native_reduce_scatter_v(const T* in, T* out, const block_counts& b, const Op&, const fingerprint& fp,
                                         const wait_context& w, bool blocking) {
  auto counts = int_table(b.counts, fp, w);
  kept_on_failure([&] {
    start_and_complete(fp, b.total * sizeof(T), w, blocking, "MPI_Ireduce_scatter", [&](MPI_Request* r) {
      return either(r, MPI_Ireduce_scatter, MPI_Reduce_scatter, in, out, counts.get(), type<T>(),
                    reduce_op_of<Op, T>(), st_->comm);
    });
  }, counts);
}

inline void mpi::native_barrier(const fingerprint& fp, const wait_context& w, bool blocking) {
  start_and_complete(fp, 0, w, blocking, "MPI_Ibarrier",
                     [&](MPI_Request* r) { return either(r, MPI_Ibarrier, MPI_Barrier, st_->comm); });
}

inline std::unique_ptr<int[]> mpi::int_table(std::span<const std::size_t> v, const fingerprint& fp,
                                             const wait_context& w) const {
  auto t = std::make_unique<int[]>(std::max<std::size_t>(v.size(), 1));
  for (std::size_t i = 0; i < v.size(); ++i) t[i] = count(v[i], fp, w);
  return t;
}

template <class F, class... B>
inline void mpi::kept_on_failure(F&& f, B&... buffers) {
  try {
    f();
  } catch (...) {
    (detail::mpi_impl::keep_until_exit(std::move(buffers)), ...);
    throw;
  }
}

inline void mpi::check_counts_from_root(std::size_t n, const block_counts& b, int root, const char* what,
                                        const fingerprint& fp, const wait_context& w, bool blocking) {
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

template <class Start>
inline void mpi::start_and_complete(const fingerprint& fp, std::size_t bytes, const wait_context& w, bool blocking,
                                    const char* call, Start start) {
  if (blocking) {
    detail::mpi_impl::check(start(nullptr), call, [&] { return where(fp, w) + " (blocking form)"; });
    return;
  }
  MPI_Request req = MPI_REQUEST_NULL;
  detail::mpi_impl::check(start(&req), call, [&] { return where(fp, w); });
  complete(req, fp, bytes, w, call);
}

inline void mpi::complete(MPI_Request& req, const fingerprint& fp, std::size_t bytes, const wait_context& w,
                          const char* call) {
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

}  // namespace tutti
