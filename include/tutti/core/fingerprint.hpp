/// \file
/// The fingerprint: what each rank says it is doing in a call. It travels in the header of every
/// message, and a receiver that finds a different one raises `mismatch_error` naming both ranks
/// and both values, instead of hanging or reducing garbage.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/dtype.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/op_id.hpp"

namespace tutti {

/// One call's identity. Every rank of a collective computes the same fingerprint; the count is
/// the one all ranks must agree on (the per-rank block for gather, scatter and reduce_scatter's
/// output, the whole buffer for all_to_all), and for the v-collectives whose counts every rank
/// passes (all_gather_v, reduce_scatter_v) the total, with a digest of the counts in `shape`.
/// Where only some ranks know the counts (gather_v and scatter_v: the root; all_to_all_v: each
/// rank its own row), `count` and `shape` are 0 and every block's size is checked where it
/// arrives, against the receiver's count for it.
struct fingerprint {
  std::uint64_t context = 0;  ///< which communicator
  std::uint64_t seq = 0;      ///< collective sequence number within the communicator
  std::uint64_t count = 0;    ///< agreed element count (v-collectives: the agreed total, or 0)
  std::uint64_t shape = 0;    ///< digest of the per-rank counts every rank passes (0: none)
  std::uint32_t dtype = 0;    ///< dtype id
  std::uint32_t op = 0;       ///< op id (0: no op)
  std::int32_t root = -1;     ///< root rank, or the tag for send/recv, -1: none
  std::uint32_t algo = 0;     ///< algorithm id (the concrete one `automatic` chose)
  collective coll = collective::barrier;
  std::uint8_t elem_size = 0;
  std::uint16_t reserved = 0;

  friend bool operator==(const fingerprint&, const fingerprint&) = default;
};

/// The header in front of every message: the fingerprint and the byte count of this message.
struct header {
  fingerprint fp;
  std::uint64_t bytes = 0;
};

/// What a receiver found in a header it checked (`toolkit::check_header`): a `mismatch_error` that
/// keeps both headers and both ranks, so that the layer that knows what the message was (a block
/// of a v-collective, in the channel) can say it in the call's own terms.
class header_mismatch : public mismatch_error {
 public:
  header_mismatch(const std::string& what, const header& expected_, const header& got_, int me_, int peer_)
      : mismatch_error(what), expected(expected_), got(got_), me(me_), peer(peer_) {}
  header expected, got;
  int me, peer;
};

namespace detail {
/// "[sum 40, digest 1a2b3c4d]": a v-collective's counts, as a fingerprint knows them.
inline std::string counts_text(const fingerprint& f) {
  char digest[32];
  std::snprintf(digest, sizeof digest, "%08llx", static_cast<unsigned long long>(f.shape & 0xffffffffu));
  return "[sum " + std::to_string(f.count) + ", digest " + digest + "]";
}

TUTTI_COLD inline std::string fingerprint_summary(const fingerprint& f, std::string_view algo_name = {}) {
  std::string s(collective_name(f.coll));
  if (!algo_name.empty()) {
    s += '(';
    s += algo_name;
    s += ')';
  }
  s += " #" + std::to_string(f.seq);
  if (info(f.coll).counts == counts_kind::per_rank) {
    if (f.shape) s += " counts=" + counts_text(f);
  } else if (f.shape) {
    s += " fused counts=" + counts_text(f);
  } else {
    s += " count=" + std::to_string(f.count);
  }
  s += " dtype=" + dtype_name({f.dtype, f.elem_size});
  if (f.op) s += " op=" + std::string(op_name(f.op));
  if (f.root >= 0) s += (f.coll == collective::send_recv ? " tag=" : " root=") + std::to_string(f.root);
  return s;
}

/// "rank 0 passed count=10, rank 1 passed count=12" for the first field that differs.
TUTTI_COLD inline std::string describe_difference(const fingerprint& mine, int my_rank,
                                       const fingerprint& theirs, int their_rank) {
  auto both = [&](std::string_view what, const std::string& a, const std::string& b) {
    return "rank " + std::to_string(my_rank) + " called with " + std::string(what) + "=" + a +
           ", rank " + std::to_string(their_rank) + " with " + std::string(what) + "=" + b;
  };
  if (mine.coll != theirs.coll || mine.seq != theirs.seq)
    return "rank " + std::to_string(my_rank) + " is in " + fingerprint_summary(mine) +
           ", rank " + std::to_string(their_rank) + " is in " + fingerprint_summary(theirs) +
           " (different collectives, or a different order of calls)";
  if (mine.dtype != theirs.dtype || mine.elem_size != theirs.elem_size)
    return both("dtype", dtype_name({mine.dtype, mine.elem_size}),
                dtype_name({theirs.dtype, theirs.elem_size}));
  if (mine.count != theirs.count || mine.shape != theirs.shape) {
    if (info(mine.coll).counts == counts_kind::per_rank)
      return both("counts", counts_text(mine), counts_text(theirs)) + " (every rank passes the same counts)";
    if (mine.shape || theirs.shape)  // a fused batch of all_reduces (communicator::fuse)
      return both("fused counts", counts_text(mine), counts_text(theirs)) +
             " (the ranks fused different all_reduces: their batches differ in the count, or number, of operations)";
    return both("count", std::to_string(mine.count), std::to_string(theirs.count));
  }
  if (mine.op != theirs.op)
    return both("op", std::string(op_name(mine.op)) + "#" + std::to_string(mine.op),
                std::string(op_name(theirs.op)) + "#" + std::to_string(theirs.op));
  if (mine.root != theirs.root)
    return both(mine.coll == collective::send_recv ? "tag" : "root", std::to_string(mine.root),
                std::to_string(theirs.root));
  if (mine.algo != theirs.algo)
    return both("algorithm id", std::to_string(mine.algo), std::to_string(theirs.algo)) +
           " (TUTTI_ALGO or the algorithm type differs between ranks)";
  if (mine.context != theirs.context)
    return both("communicator context", std::to_string(mine.context),
                std::to_string(theirs.context));
  return "fingerprints differ";
}
}  // namespace detail

}  // namespace tutti
