/// \file
/// The fingerprint: what each rank says it is doing in a call. It travels in the header of every
/// message, and a receiver that finds a different one raises `mismatch_error` naming both ranks
/// and both values, instead of hanging or reducing garbage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

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

  /// Every member, compared as the 52 bytes they fill (not the padding after them): every
  /// receiver compares the header it finds with the one it expects, and member by member that
  /// was 11 compares and branches; as three 16-byte vectors and 4 bytes, 20 instructions.
  friend constexpr bool operator==(const fingerprint& a, const fingerprint& b) noexcept {
    if (!std::is_constant_evaluated()) {
      const auto* p = reinterpret_cast<const char*>(&a);
      const auto* q = reinterpret_cast<const char*>(&b);
      std::uint32_t pt, qt;
      std::memcpy(&pt, p + 48, sizeof pt);
      std::memcpy(&qt, q + 48, sizeof qt);
#if defined(__GNUC__)  // (GCC, Clang, and nvcc's front end: vector extensions, no intrinsics header)
      using v2 = long long __attribute__((vector_size(16)));
      v2 x[3], y[3];
      std::memcpy(x, p, sizeof x);
      std::memcpy(y, q, sizeof y);
      const v2 d = (x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]);
      return ((d[0] | d[1]) == 0) & (pt == qt);
#else
      std::uint64_t x[6], y[6];
      std::memcpy(x, p, sizeof x);
      std::memcpy(y, q, sizeof y);
      return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4]) | (x[5] ^ y[5])) == 0 &&
             pt == qt;
#endif
    }
    return a.context == b.context && a.seq == b.seq && a.count == b.count && a.shape == b.shape &&
           a.dtype == b.dtype && a.op == b.op && a.root == b.root && a.algo == b.algo && a.coll == b.coll &&
           a.elem_size == b.elem_size && a.reserved == b.reserved;
  }
};
static_assert(std::is_standard_layout_v<fingerprint> && std::is_trivially_copyable_v<fingerprint>);
static_assert(offsetof(fingerprint, coll) == 48 && offsetof(fingerprint, reserved) + sizeof(std::uint16_t) == 52 &&
                  sizeof(fingerprint) == 56,
              "fingerprint's operator== compares bytes 0..51 as the members' bytes: a member added, even in the "
              "4 bytes of padding after `reserved`, must join both of its branches");

/// The header in front of every message: the fingerprint and the byte count of this message.
struct header {
  fingerprint fp;
  std::uint64_t bytes = 0;
};

/// A `mismatch_error` from a comparison of two fingerprints (a header, a phase's, a peer's
/// published wait, MPI's agreement) that keeps both and both ranks, so that a layer that knows
/// more than the fingerprint (the counts themselves, in the communicator) can say the difference
/// in the call's own terms (`detail::counts_difference`). Its text names the difference as
/// `detail::describe_difference(mine, me, theirs, peer)` says it.
class fingerprint_mismatch : public mismatch_error {
 public:
  fingerprint_mismatch(const std::string& what, const fingerprint& mine_, int me_, const fingerprint& theirs_, int peer_)
      : mismatch_error(what), mine(mine_), theirs(theirs_), me(me_), peer(peer_) {}
  fingerprint mine, theirs;
  int me, peer;
};

/// What a receiver found in a header it checked (`toolkit::check_header`): a `fingerprint_mismatch`
/// that keeps both headers too, so that the layer that knows what the message was (a block of a
/// v-collective, in the channel) can say it in the call's own terms.
class header_mismatch : public fingerprint_mismatch {
 public:
  header_mismatch(const std::string& what, const header& expected_, const header& got_, int me_, int peer_)
      : fingerprint_mismatch(what, expected_.fp, me_, got_.fp, peer_), expected(expected_), got(got_) {}
  header expected, got;
};

namespace detail {
/// "[sum 40, digest 1a2b3c4d]": a v-collective's counts, as a fingerprint knows them.
TUTTI_DECL std::string counts_text(const fingerprint& f);

/// The digest of the counts every rank must agree on (a fingerprint's `shape`).
TUTTI_DECL std::uint64_t counts_digest(std::span<const std::size_t> counts) noexcept;

/// For a fingerprint mismatch about counts every rank passes (`mine` with this rank's `counts`,
/// `theirs` from rank `peer`): "rank 1 passes counts[3] = 12, rank 0 passes counts[3] = 10 (every
/// rank passes the same counts)", the index and both values where the ranks' counts differ at one
/// index (found from the peer's sum and digest: the one index whose change by the difference of
/// the sums gives the peer's digest); empty where they differ otherwise (more indices, equal
/// sums) or the search would be long (more than `counts_search_limit` ranks). Failure path only.
TUTTI_DECL std::string counts_difference(const fingerprint& mine, int me, std::span<const std::size_t> counts,
                                         const fingerprint& theirs, int peer);
inline constexpr std::size_t counts_search_limit = 4096;

/// Raises `e` restated with `counts_difference` for this rank's `counts` in place of the sums and
/// digests, where that finds the index; returns otherwise (the caller rethrows `e`).
TUTTI_DECL void restate_counts(const fingerprint_mismatch& e, std::span<const std::size_t> counts);

std::string fingerprint_summary(const fingerprint& f, std::string_view algo_name = {});

/// "rank 0 passed count=10, rank 1 passed count=12" for the first field that differs.
std::string describe_difference(const fingerprint& mine, int my_rank, const fingerprint& theirs, int their_rank);
}  // namespace detail

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/core/fingerprint.ipp"
#endif
