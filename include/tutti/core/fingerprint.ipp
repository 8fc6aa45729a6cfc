/// \file
/// Definitions for tutti/core/fingerprint.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <cstdio>
#include <vector>

#include "tutti/core/fingerprint.hpp"

namespace tutti {

namespace detail {
TUTTI_DECL std::string counts_text(const fingerprint& f) {
  char digest[32];
  std::snprintf(digest, sizeof digest, "%08llx", static_cast<unsigned long long>(f.shape & 0xffffffffu));
  return "[sum " + std::to_string(f.count) + ", digest " + digest + "]";
}

TUTTI_DECL std::uint64_t counts_digest(std::span<const std::size_t> counts) noexcept {
  std::uint64_t h = 0x636f756e7473ull;  // "counts"
  for (std::size_t c : counts) h = hash_combine(h * 0x100000001b3ull, static_cast<std::uint64_t>(c));
  return h;
}

TUTTI_COLD TUTTI_DECL std::string counts_difference(const fingerprint& mine, int me, std::span<const std::size_t> counts,
                                                   const fingerprint& theirs, int peer) {
  fingerprint a = mine, b = theirs;
  a.count = b.count = a.shape = b.shape = 0;
  if (a != b || !is_collective(static_cast<std::uint8_t>(mine.coll)) || info(mine.coll).where != counts_at::every_rank ||
      mine.count == theirs.count || counts.size() > counts_search_limit || counts_digest(counts) != mine.shape)
    return {};
  // The peer's counts are ours with one index changed by the difference of the sums, or differ
  // in more than one index: try each index (the digest is sequential, so each try hashes the
  // counts from that index on).
  const std::uint64_t d = theirs.count - mine.count;  // modulo 2^64: negative where theirs is smaller
  std::vector<std::size_t> c(counts.begin(), counts.end());
  for (std::size_t j = 0; j < c.size(); ++j) {
    const std::uint64_t v = static_cast<std::uint64_t>(c[j]) + d;
    if ((theirs.count > mine.count) != (v > c[j])) continue;  // it would wrap: not a count
    const std::size_t own = c[j];
    c[j] = static_cast<std::size_t>(v);
    const bool found = counts_digest(c) == theirs.shape;
    c[j] = own;
    if (!found) continue;
    const std::string idx = "counts[" + std::to_string(j) + "] = ";
    return "rank " + std::to_string(me) + " passes " + idx + std::to_string(own) + ", rank " + std::to_string(peer) +
           " passes " + idx + std::to_string(v) + " (every rank passes the same counts)";
  }
  return {};
}

TUTTI_COLD TUTTI_DECL void restate_counts(const fingerprint_mismatch& e, std::span<const std::size_t> counts) {
  const std::string said = counts_difference(e.mine, e.me, counts, e.theirs, e.peer);
  if (said.empty()) return;
  std::string text = own_text(e);
  // The text says the difference from this rank's side, or, passed on from the peer that found
  // it (inproc's rejected envelope), from the peer's.
  const std::string sums[] = {describe_difference(e.mine, e.me, e.theirs, e.peer),
                              describe_difference(e.theirs, e.peer, e.mine, e.me)};
  std::size_t at = std::string::npos;
  for (const auto& s : sums)
    if ((at = text.find(s)) != std::string::npos) {
      text.replace(at, s.size(), said);
      break;
    }
  if (at == std::string::npos) text += "; " + said;
  throw mismatch_error(text);
}

TUTTI_COLD TUTTI_DECL std::string fingerprint_summary(const fingerprint& f, std::string_view algo_name) {
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

TUTTI_COLD TUTTI_DECL std::string describe_difference(const fingerprint& mine, int my_rank,
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
