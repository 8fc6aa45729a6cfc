/// \file
/// What meshes and hierarchies share when they make groups: every rank's node key, and a group
/// of a one-host transport (`one_host_job`: `tutti::shm`) among the members of a split over
/// another transport's links, which agree on its name over those links.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/algorithm/direct.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/locality.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/view.hpp"
#include "tutti/group/communicator.hpp"
#include "tutti/transport/capabilities.hpp"

namespace tutti::detail {

/// Every rank's node key hash (one all_gather of a word per rank over `c`); logs this rank's
/// key and its parts at TUTTI_DEBUG=info, under `who`.
template <class Comm>
std::vector<std::uint64_t> gather_node_hashes(Comm& c, std::string_view who) {
  const node_identity me = node_identity::of_this_process();
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(c.size()));
  const std::uint64_t h = me.hash();
  c.all_gather(view<const std::uint64_t>(&h, 1), view<std::uint64_t>(hashes), algo::direct{});
  log(log_level::info, c.settings(), c.rank(),
      std::string(who) + ": node key '" + me.key() + "' (hostname '" + me.hostname + "', boot id " + me.boot_id + ", " +
          me.ipc_namespace + ", " + me.net_namespace +
          (me.given.empty() ? std::string(", TUTTI_NODE_ID unset") : std::string(", from TUTTI_NODE_ID")) + ")");
  return hashes;
}

/// Every rank's node key text, cut to 255 characters, for a message that names two ranks'
/// hosts. Collective: called where every rank found the same fault in the gathered hashes.
template <class Comm>
std::vector<std::string> gather_node_texts(Comm& c) {
  constexpr std::size_t width = 256;
  const auto p = static_cast<std::size_t>(c.size());
  std::vector<char> mine(width, '\0'), all(width * p);
  const std::string text = node_identity::of_this_process().key();
  std::copy_n(text.begin(), std::min(text.size(), width - 1), mine.begin());
  c.all_gather(view<const char>(mine), view<char>(all), algo::direct{});
  std::vector<std::string> texts;
  for (std::size_t r = 0; r < p; ++r) texts.emplace_back(all.data() + r * width);
  return texts;
}

/// A communicator of transport T, algorithm `a`, over the members of `slice` (ranked as
/// there), who must all be on one host: slice rank 0 picks a name and tells the others over
/// the slice's links; T makes its group from it (`T::create(job_env, config)`).
template <class T, class A, class Slice>
  requires one_host_job<T>
communicator<T, A> one_host_group(Slice& slice, A a, const config& cfg, std::string_view label) {
  std::uint64_t id[2] = {0, 0};
  if (slice.rank() == 0) {
    id[0] = hash_combine(static_cast<std::uint64_t>(::getpid()),
                         static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    id[1] = slice.context();
  }
  slice.broadcast(view<std::uint64_t>(id, 2), 0, algo::direct{});
  char name[64];
  std::snprintf(name, sizeof name, "tutti-%016llx%08llx-", static_cast<unsigned long long>(id[0]),
                static_cast<unsigned long long>(id[1] & 0xffffffffu));
  job_env j;
  j.rank = j.local_rank = slice.rank();
  j.world_size = j.local_world_size = slice.size();
  j.job_id = name;
  for (char ch : label) j.job_id += (std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-');  // a file name
  j.source = std::string(label);
  return communicator<T, A>(T::create(j, cfg), std::move(a), cfg);
}

}  // namespace tutti::detail
