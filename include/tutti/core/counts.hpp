/// \file
/// `tutti::block_counts`: the per-rank counts of a v-collective with their offsets (the prefix
/// sums: blocks lie in rank order), as the communicator hands them to a schedule.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace tutti {

/// Counts of elements per rank and where each rank's block starts.
struct block_counts {
  std::span<const std::size_t> counts;   ///< one per rank of the group
  std::span<const std::size_t> offsets;  ///< offsets[r] = counts[0] + ... + counts[r-1]
  std::size_t total = 0;                 ///< the sum of the counts
  std::size_t largest = 0;               ///< the largest count

  std::size_t count(int r) const noexcept { return counts[static_cast<std::size_t>(r)]; }
  std::size_t offset(int r) const noexcept { return offsets[static_cast<std::size_t>(r)]; }
  std::size_t size() const noexcept { return counts.size(); }
};

/// The offsets of `counts` (their prefix sums: the displacements of MPI's v-collectives).
inline std::vector<std::size_t> displacements(std::span<const std::size_t> counts) {
  std::vector<std::size_t> d(counts.size());
  std::size_t at = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    d[i] = at;
    at += counts[i];
  }
  return d;
}

}  // namespace tutti
