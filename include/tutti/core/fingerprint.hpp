/// \file
/// The fingerprint: what each rank says it is doing in a call. It travels in the header of every
/// message, and a receiver that finds a different one raises `mismatch_error` naming both ranks
/// and both values, instead of hanging or reducing garbage.
#pragma once

#include <cstdint>
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
TUTTI_DECL std::string counts_text(const fingerprint& f);

std::string fingerprint_summary(const fingerprint& f, std::string_view algo_name = {});

/// "rank 0 passed count=10, rank 1 passed count=12" for the first field that differs.
std::string describe_difference(const fingerprint& mine, int my_rank, const fingerprint& theirs, int their_rank);
}  // namespace detail

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/core/fingerprint.ipp"
#endif
