/// \file
/// Definitions for tutti/transport/toolkit/group_map.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include "tutti/transport/toolkit/group_map.hpp"

namespace tutti::toolkit {

TUTTI_DECL group_map group_map::sub(std::span<const int> picked, std::uint64_t context) const {
  group_map g;
  g.context_ = context;
  g.rank_ = -1;
  for (int m : picked) {
    if (m == rank_) g.rank_ = static_cast<int>(g.members_.size());
    g.members_.push_back(world(m));
  }
  return g;
}

TUTTI_DECL group_map group_map::own_links() const {
  group_map g = *this;
  g.named_.resize(members_.size());
  for (std::size_t i = 0; i < members_.size(); ++i) {
    g.named_[i] = world_of(static_cast<int>(i));
    g.members_[i] = static_cast<int>(i);
  }
  return g;
}

TUTTI_DECL std::string group_map::name(int r) const {
  std::string s = "rank " + std::to_string(r);
  if (context_ != 0) s += " (world rank " + std::to_string(world_of(r)) + ")";
  return s;
}

TUTTI_DECL std::string group_map::job_name(int w) const {
  for (int r = 0; r < size(); ++r)
    if (world_of(r) == w) return name(r);
  return "world rank " + std::to_string(w);
}

}  // namespace tutti::toolkit
