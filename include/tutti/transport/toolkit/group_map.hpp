/// \file
/// `toolkit::group_map`: which ranks of the transport's world a group holds, this rank's place
/// in it, and the group's context. A transport keeps one and makes its sub-groups with `sub`;
/// the communicator's `new_group` and `split` pass the members in the new rank order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tutti/detail/attributes.hpp"

namespace tutti::toolkit {

class group_map {
 public:
  group_map() = default;
  /// The whole world of `world_size` ranks, this being `world_rank`, context 0.
  group_map(int world_size, int world_rank) : rank_(world_rank) {
    members_.resize(static_cast<std::size_t>(world_size));
    for (int i = 0; i < world_size; ++i) members_[static_cast<std::size_t>(i)] = i;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }
  std::uint64_t context() const noexcept { return context_; }
  /// The world rank of group rank `r`.
  int world(int r) const noexcept { return members_[static_cast<std::size_t>(r)]; }
  int world_rank() const noexcept { return world(rank_); }
  /// The group rank of world rank `w`, or -1 when it is not a member.
  int local(int w) const noexcept {
    for (std::size_t i = 0; i < members_.size(); ++i)
      if (members_[i] == w) return static_cast<int>(i);
    return -1;
  }
  const std::vector<int>& members() const noexcept { return members_; }

  /// The map of a sub-group: `picked` are ranks of this group, in the new rank order. This rank's
  /// place in it is -1 when it is not picked (the communicator makes sub-groups of members only).
  group_map sub(std::span<const int> picked, std::uint64_t context) const;

  /// The same group over links of its own (a transport that gives a group its own segment or
  /// connections): ranks 0..size()-1 index those links (`world(r)` is r), while the names still
  /// say each rank's world rank.
  group_map own_links() const;

  /// "rank 2", and in a sub-group "rank 2 (world rank 5)".
  std::string name(int r) const;
  /// Group rank r's rank in the whole job, as names say it (its world rank, also in a group
  /// with links of its own): what failure notices name their origin by.
  int job_rank(int r) const { return world_of(r); }
  /// Job rank `w` as this group names it (`name`), or "world rank w" when it is not a member.
  std::string job_name(int w) const;
  /// World rank `w` as this group names it: "rank i" if a member, else "world rank w".
  std::string world_name(int w) const {
    const int l = local(w);
    return l >= 0 ? "rank " + std::to_string(l) : "world rank " + std::to_string(w);
  }

 private:
  /// The world rank of group rank r, as names say it.
  int world_of(int r) const { return named_.empty() ? world(r) : named_[static_cast<std::size_t>(r)]; }

  std::vector<int> members_;
  std::vector<int> named_;  // own_links(): the world ranks, for names
  int rank_ = 0;
  std::uint64_t context_ = 0;
};

}  // namespace tutti::toolkit

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/toolkit/group_map.ipp"
#endif
