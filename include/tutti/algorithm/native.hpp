/// \file
/// `tutti::algo::native`: hands each collective to the transport's own implementation, for
/// transports that have one (the `native_collectives` capability: `tutti::mpi`, where each call
/// becomes MPI's non-blocking collective, `MPI_Iallreduce`, `MPI_Ibcast`, ..., completed under
/// the call's deadline). The schedule and its cost are the library's (Open MPI's `coll` tuned or
/// libnbc component picks one per call); tutti only maps the element type and the op.
///
/// MPI's collectives carry no tutti header, so before each one the ranks agree on the call's
/// fingerprint with one small all-reduce (the fingerprint and its complement, under MPI_MAX: the
/// min and the max of every field at once). Ranks that disagree get `mismatch_error` naming the
/// first rank that differs and both values, instead of MPI's truncation error, wrong numbers or
/// a hang. It costs one 96-byte all-reduce per call (a few µs on one host); latency-bound users
/// who trust their call sites can turn it off with `.check_fingerprint = false`.
///
/// Deadlines: by default each call is MPI's non-blocking form, polled under the call's deadline,
/// so a rank that never joins gives `timeout_error`, as everywhere in tutti. Open MPI runs those
/// through libnbc, which is slower than its tuned blocking collectives (several times so for
/// small messages, on one host at 2 ranks). `.blocking = true` calls the blocking forms
/// (`MPI_Allreduce`, ...): the fastest path, but nothing bounds the wait any more: a rank that
/// never joins hangs the call, as in plain MPI.
///
/// Not chosen by `automatic` on its own (it keeps to the point-to-point schedules, whose results
/// are bitwise identical on every rank and whose every message is checked): ask for it by type
/// (`communicator<mpi, algo::native>`, `comm.all_reduce(v, op, algo::native{})`) or with
/// `TUTTI_ALGO=native`. A communicator whose transport lacks the capability rejects the name.
/// Device transports (`transport_traits::native_first`: tutti::cuda_ipc's kernels, NCCL) are the
/// exception: there automatic picks it wherever it runs. Where a transport cannot reduce an
/// element type with an op itself (`native_reduces`: NCCL has no user ops), the reducing
/// collectives run tutti's ring over the transport's messages.
#pragma once

#include <concepts>
#include <climits>
#include <cstddef>
#include <string_view>

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/capabilities.hpp"

namespace tutti {

namespace algo {

struct native {
  static constexpr std::string_view name = "native";
  /// What it needs of a transport, and that automatic picks it only by name (see above).
  static constexpr std::string_view needs = "a transport with collectives of its own (tutti::mpi)";
  static constexpr bool explicit_only = true;
  /// The transport maps the element type and op to its own (MPI's datatypes and ops): it needs
  /// the typed call, not the erased one of tutti's schedules.
  static constexpr bool needs_types = true;
  /// Agree on the fingerprint before each collective (see the file comment).
  bool check_fingerprint = true;
  /// Use MPI's blocking collectives: faster, but no deadline (see the file comment).
  bool blocking = false;

  template <class Ch, class T, class M>
    requires native_collectives<typename Ch::transport_type>
  void broadcast(Ch& ch, view<T, M> buf, int root) const {
    agree(ch);
    ch.transport().native_broadcast(buf.data(), buf.size(), root, ch.fp(), ch.wait(), blocking);
  }

  /// Non-root buffers are only read (MPI's send buffer); the root reduces in place.
  template <class Ch, class T, class M, class Op>
    requires native_collectives<typename Ch::transport_type>
  void reduce(Ch& ch, view<T, M> buf, int root, const Op& op) const {
    if constexpr (!native_op<Ch, T, Op>) {
      agree(ch);  // the ring's messages (NCCL's) carry no fingerprint
      ring{}.reduce(ch, buf, root, op);
    } else {
      agree(ch);
      ch.transport().native_reduce(static_cast<const T*>(buf.data()), buf.data(), buf.size(), root, op, ch.fp(),
                                   ch.wait(), blocking);
    }
  }

  template <class Ch, class T, class M, class Op>
    requires native_collectives<typename Ch::transport_type>
  void all_reduce(Ch& ch, view<T, M> buf, const Op& op) const {
    all_reduce(ch, view<const T, M>(buf), buf, op);
  }
  template <class Ch, class T, class M, class Op>
    requires native_collectives<typename Ch::transport_type>
  void all_reduce(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    if constexpr (!native_op<Ch, T, Op>) {
      agree(ch);
      ch.copy(in, out);
      ring{}.all_reduce(ch, out, op);
    } else {
      agree(ch);
      ch.transport().native_all_reduce(in.data(), out.data(), in.size(), op, ch.fp(), ch.wait(), blocking);
    }
  }

  template <class Ch, class T, class M>
    requires native_collectives<typename Ch::transport_type>
  void gather(Ch& ch, view<const T, M> in, view<T, M> out, int root) const {
    agree(ch);
    ch.transport().native_gather(in.data(), out.data(), in.size(), root, ch.fp(), ch.wait(), blocking);
  }

  template <class Ch, class T, class M>
    requires native_collectives<typename Ch::transport_type>
  void all_gather(Ch& ch, view<const T, M> in, view<T, M> out) const {
    agree(ch);
    ch.transport().native_all_gather(in.data(), out.data(), in.size(), ch.fp(), ch.wait(), blocking);
  }

  template <class Ch, class T, class M>
    requires native_collectives<typename Ch::transport_type>
  void scatter(Ch& ch, view<const T, M> in, view<T, M> out, int root) const {
    agree(ch);
    ch.transport().native_scatter(in.data(), out.data(), out.size(), root, ch.fp(), ch.wait(), blocking);
  }

  template <class Ch, class T, class M>
    requires native_collectives<typename Ch::transport_type>
  void all_to_all(Ch& ch, view<const T, M> in, view<T, M> out) const {
    agree(ch);
    ch.transport().native_all_to_all(in.data(), out.data(), in.size() / static_cast<std::size_t>(ch.size()), ch.fp(),
                                     ch.wait(), blocking);
  }

  template <class Ch, class T, class M, class Op>
    requires native_collectives<typename Ch::transport_type>
  void reduce_scatter(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    if constexpr (!native_op<Ch, T, Op>) {
      agree(ch);
      ring{}.reduce_scatter(ch, in, out, op);
    } else {
      agree(ch);
      ch.transport().native_reduce_scatter(in.data(), out.data(), out.size(), op, ch.fp(), ch.wait(), blocking);
    }
  }

  // The v-collectives: MPI's own (MPI_Iallgatherv, MPI_Igatherv, MPI_Iscatterv, MPI_Ialltoallv,
  // MPI_Ireduce_scatter), whose counts and displacements are ints. Where a count or an offset of
  // some rank exceeds that, every rank runs tutti's `direct` schedule instead: the fingerprint
  // agreement, which the v-collectives always make (`check_fingerprint` or not), tells every rank
  // whether any rank's do.

  template <class Ch, class T, class M>
    requires native_collectives<typename Ch::transport_type>
  void all_gather_v(Ch& ch, view<const T, M> in, view<T, M> out, const block_counts& b) const {
    if (ch.transport().native_agree(ch.fp(), ch.wait(), blocking, too_large(b)))
      return direct{}.all_gather_v(ch, in, out, b);
    ch.transport().native_all_gather_v(in.data(), out.data(), b, ch.fp(), ch.wait(), blocking);
  }

  template <class Ch, class T, class M>
    requires native_collectives<typename Ch::transport_type>
  void gather_v(Ch& ch, view<const T, M> in, view<T, M> out, const block_counts& b, int root) const {
    if (ch.transport().native_agree(ch.fp(), ch.wait(), blocking, too_large(b) || too_large(in.size())))
      return direct{}.gather_v(ch, in, out, b, root);
    ch.transport().native_gather_v(in.data(), in.size(), out.data(), b, root, ch.fp(), ch.wait(), blocking);
  }

  template <class Ch, class T, class M>
    requires native_collectives<typename Ch::transport_type>
  void scatter_v(Ch& ch, view<const T, M> in, const block_counts& b, view<T, M> out, int root) const {
    if (ch.transport().native_agree(ch.fp(), ch.wait(), blocking, too_large(b) || too_large(out.size())))
      return direct{}.scatter_v(ch, in, b, out, root);
    ch.transport().native_scatter_v(in.data(), b, out.data(), out.size(), root, ch.fp(), ch.wait(), blocking);
  }

  template <class Ch, class T, class M>
    requires native_collectives<typename Ch::transport_type>
  void all_to_all_v(Ch& ch, view<const T, M> in, const block_counts& send, view<T, M> out, const block_counts& recv) const {
    if (ch.transport().native_agree(ch.fp(), ch.wait(), blocking, too_large(send) || too_large(recv)))
      return direct{}.all_to_all_v(ch, in, send, out, recv);
    ch.transport().native_all_to_all_v(in.data(), send, out.data(), recv, ch.fp(), ch.wait(), blocking);
  }

  template <class Ch, class T, class M, class Op>
    requires native_collectives<typename Ch::transport_type>
  void reduce_scatter_v(Ch& ch, view<const T, M> in, view<T, M> out, const block_counts& b, const Op& op) const {
    if constexpr (!native_op<Ch, T, Op>) {
      agree(ch);
      ring{}.reduce_scatter_v(ch, in, out, b, op);
    } else {
      if (ch.transport().native_agree(ch.fp(), ch.wait(), blocking, too_large(b)))
        return direct{}.reduce_scatter_v(ch, in, out, b, op);
      ch.transport().native_reduce_scatter_v(in.data(), out.data(), b, op, ch.fp(), ch.wait(), blocking);
    }
  }

  /// MPI_Iscan / MPI_Iexscan where the transport has them (and reduces T with Op); elsewhere
  /// tutti's direct chain over the transport's messages.
  template <class Ch, class T, class M, class Op>
    requires native_collectives<typename Ch::transport_type>
  void scan(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    prefix<collective::scan>(ch, in, out, op);
  }
  template <class Ch, class T, class M, class Op>
    requires native_collectives<typename Ch::transport_type>
  void exscan(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    prefix<collective::exscan>(ch, in, out, op);
  }

  template <class Ch>
    requires native_collectives<typename Ch::transport_type>
  void barrier(Ch& ch) const {
    agree(ch);
    ch.transport().native_barrier(ch.fp(), ch.wait(), blocking);
  }

 private:
  /// scan and exscan: the transport's own where it has it for T and Op, else direct's chain
  /// (agreed first either way: the chain's messages, NCCL's, may carry no fingerprint).
  template <collective C, class Ch, class T, class M, class Op>
  void prefix(Ch& ch, view<const T, M> in, view<T, M> out, const Op& op) const {
    auto& t = ch.transport();
    agree(ch);
    if constexpr (C == collective::scan && native_op<Ch, T, Op> &&
                  requires { t.native_scan(in.data(), out.data(), in.size(), op, ch.fp(), ch.wait(), blocking); })
      t.native_scan(in.data(), out.data(), in.size(), op, ch.fp(), ch.wait(), blocking);
    else if constexpr (C == collective::exscan && native_op<Ch, T, Op> &&
                       requires { t.native_exscan(in.data(), out.data(), in.size(), op, ch.fp(), ch.wait(), blocking); })
      t.native_exscan(in.data(), out.data(), in.size(), op, ch.fp(), ch.wait(), blocking);
    else if constexpr (C == collective::scan)
      direct{}.scan(ch, in, out, op);
    else
      direct{}.exscan(ch, in, out, op);
  }

  /// Whether the transport reduces `T` with `Op` itself: unless it says otherwise
  /// (`native_reduces<T, Op>`, NCCL: its types and ops only), it does; where it does not, the
  /// reducing collectives run tutti's ring over the transport's messages instead.
  template <class Ch, class T, class Op>
  static constexpr bool native_op = [] {
    using Tr = typename Ch::transport_type;
    if constexpr (requires { Tr::template native_reduces<T, Op>; }) return Tr::template native_reduces<T, Op>;
    else return true;
  }();

  /// Whether a count, or counts with their offsets and total, exceed MPI's int.
  static bool too_large(std::size_t n) noexcept { return n > static_cast<std::size_t>(INT_MAX); }
  static bool too_large(const block_counts& b) noexcept { return too_large(b.total); }

  template <class Ch>
  void agree(Ch& ch) const {
    if (check_fingerprint) ch.transport().native_agree(ch.fp(), ch.wait(), blocking);
  }
};

}  // namespace algo
}  // namespace tutti
