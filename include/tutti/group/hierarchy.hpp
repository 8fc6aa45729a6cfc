/// \file
/// `tutti::hierarchy<Levels..., Outer>`: one job over several levels of locality, composed at
/// compile time, innermost first, the last being the transport of the whole job:
///
///     auto job = tutti::hierarchy<tutti::shm, tutti::tcp>::from_env();          // hosts
///     tutti::hierarchy<tutti::level<tutti::shm, tutti::scope::numa>, tutti::shm, tutti::tcp>
///                                                     // NUMA nodes inside hosts inside the job
///
/// Each inner level is a transport and a scope (`tutti::level<T, Scope>`; a bare transport
/// means `scope::host`): the ranks with equal scope keys, at that level and every level above
/// it, form one group of the level. Locality is learned, not assumed: when the hierarchy is
/// made every rank's keys are gathered (one all_gather over the outer transport), so hosts may
/// hold different numbers of ranks and ranks may be numbered in any order. `scope::host` is
/// the node key (`node_identity`: hostname, boot id, IPC and network namespaces, or
/// `TUTTI_NODE_ID`); the keys and the layout found are printed at `TUTTI_DEBUG=info`. A level
/// whose groups are those of the level below it collapses (is skipped), as every rank decides
/// alike from the same keys; so does the outer one when the whole job is one group.
///
/// Every collective but all_to_all and the v-collectives is hierarchical, moving each byte
/// across the outer (slowest) level as few times as it must:
///  - all_reduce with every group of the single inner level the same size L: reduce_scatter
///    inside the group, all_reduce of each block among the ranks of the same local rank (L
///    such groups at once, so each outer link carries 1/L of the message per group member),
///    all_gather inside; the n mod L tail and every other layout go up and down the levels:
///    reduce to each group's leader, level by level, all_reduce among the outermost leaders,
///    broadcast back down;
///  - broadcast, reduce: the root's data climbs to its outermost leader (or the reduction comes
///    down to the root) by point-to-point hops inside groups, the rest as above;
///  - all_gather, gather: blocks gathered to the leaders level by level, all_gather_v (gather_v)
///    among the outermost leaders, broadcast (or handed to the root) back down;
///  - reduce_scatter, scatter: reduce up the levels, reduce_scatter_v (scatter_v) among the
///    outermost leaders of each group's share, scatter_v back down;
///  - barrier: a barrier per level on the way up and on the way down.
/// Inside the levels the ranks are ordered by group (the hierarchy's own order); a program's
/// rank order that is not host by host costs one local copy of the buffer in the collectives
/// with blocks. all_to_all and the v-collectives run flat over `world()`.
///
/// Results: integer and min/max reductions are exact; floating-point sums are reduced in
/// another order than the flat ones (group by group), the same order on every rank.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/locality.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/view.hpp"
#include "tutti/detail/buffer.hpp"
#include "tutti/group/communicator.hpp"
#include "tutti/group/subgroup.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/memory_ops.hpp"

#if defined(__linux__)
#include <sched.h>
#endif

namespace tutti {

/// Which ranks share a level of a hierarchy: those whose `key()` is equal.
namespace scope {
/// The host: the node key (hostname, boot id, IPC and network namespaces, or TUTTI_NODE_ID).
struct host {
  static constexpr std::string_view name = "host";
  static std::string key() { return node_identity::of_this_process().key(); }
};
/// The NUMA node of the CPU the rank runs on when the hierarchy is made, within its host.
struct numa {
  static constexpr std::string_view name = "numa";
  static std::string key() {
    int node = 0;
#if defined(__linux__)
    unsigned cpu = 0, n = 0;
    if (getcpu(&cpu, &n) == 0) node = static_cast<int>(n);
#endif
    return node_identity::of_this_process().key() + " numa " + std::to_string(node);
  }
};
}  // namespace scope

/// An inner level of a hierarchy: transport T among the ranks that share `Scope`.
template <transport T, class Scope = scope::host>
struct level {
  using transport_type = T;
  using scope_type = Scope;
};

namespace detail {
template <class L>
struct level_of {
  using type = level<L>;
};
template <class T, class S>
struct level_of<level<T, S>> {
  using type = level<T, S>;
};
}  // namespace detail

template <class... Levels>
class hierarchy {
  static_assert(sizeof...(Levels) >= 2,
                "tutti::hierarchy: name at least one inner level and the job's transport (hierarchy<shm, tcp>)");
  using all_levels = std::tuple<typename detail::level_of<Levels>::type...>;
  using outer_level = std::tuple_element_t<sizeof...(Levels) - 1, all_levels>;

 public:
  /// The number of inner levels (all but the outer one).
  static constexpr std::size_t inner_levels = sizeof...(Levels) - 1;
  using outer_transport = typename outer_level::transport_type;
  using world_communicator = communicator<outer_transport>;
  template <std::size_t I>
  using level_type = std::tuple_element_t<I, all_levels>;
  template <std::size_t I>
  using level_communicator = communicator<typename level_type<I>::transport_type>;
  using local_communicator = level_communicator<0>;

 private:
  template <std::size_t I>
  static constexpr bool own_group = !std::is_same_v<typename level_type<I>::transport_type, outer_transport>;
  template <std::size_t... I>
  static constexpr bool levels_can_be_made(std::index_sequence<I...>) {
    return ((!own_group<I> || one_host_job<typename level_type<I>::transport_type>) && ...);
  }
  static_assert(levels_can_be_made(std::make_index_sequence<inner_levels>{}),
                "tutti::hierarchy: an inner level's transport must be the outer one, or one that makes a group of "
                "the ranks of one host from a name they agree on (one_host_job: tutti::shm)");
  static constexpr std::size_t top = inner_levels;  // the stage of the outermost leaders
  static constexpr int tag = 0x7475;                // the point-to-point hops inside groups
  static constexpr std::size_t pipeline_pieces = 16;             // all_reduce's pieces of a block
  static constexpr std::size_t min_piece_bytes = std::size_t{256} << 10;  // not smaller than this

 public:
  /// Joins the job the environment describes (`Outer::from_env()`), then learns the levels.
  static hierarchy from_env()
    requires from_environment<outer_transport>
  {
    return hierarchy(world_communicator(outer_transport::from_env()));
  }

  /// Learns the levels of `world`'s ranks (collective). `keys`, when given, replaces this
  /// rank's scope key of level i by `keys[i]` (tests; programs that know their topology).
  explicit hierarchy(world_communicator world, std::vector<std::string> keys = {}) : world_(std::move(world)) {
    if (keys.size() > inner_levels)
      throw usage_error("hierarchy: " + std::to_string(keys.size()) + " keys given for " +
                        std::to_string(inner_levels) + " inner levels");
    learn(keys);
    make_groups(std::make_index_sequence<inner_levels>{});
  }

  int rank() const { return world_.rank(); }
  int size() const { return world_.size(); }
  /// This rank's group of the innermost level, and its rank there.
  local_communicator& local() noexcept { return *std::get<0>(groups_); }
  int local_rank() const noexcept { return std::get<0>(groups_)->rank(); }
  int local_size() const noexcept { return std::get<0>(groups_)->size(); }
  /// Which group of the outermost active inner level (the host, usually) this rank is in, of how
  /// many, in the hierarchy's order.
  int host() const noexcept { return host_; }
  int hosts() const noexcept { return hosts_; }
  /// Every rank, over the outer transport.
  world_communicator& world() noexcept { return world_; }
  /// The ranks with this rank's local rank, one per group, where every group of the single
  /// inner level has the same size (all_reduce's blocks cross the outer level there); else a
  /// usage_error.
  world_communicator& cross() {
    if (!cross_) throw usage_error("hierarchy: cross() exists where every group of one inner level has the same size");
    return *cross_;
  }
  /// The layout found, as `TUTTI_DEBUG=info` prints it.
  const std::string& layout() const noexcept { return layout_; }

  // ---- collectives -------------------------------------------------------------------------

  /// The reductions' refusal of rank-ordered ops, at compile time.
  template <class Op>
  static constexpr void refuse_rank_ordered() {
    static_assert(!detail::rank_ordered_op<Op>,
                  "tutti::hierarchy reduces inside each group before across them, not in rank order: a "
                  "rank-ordered op (op::ordered, op::reproducible_sum) runs on a flat communicator (the "
                  "hierarchy's world(), or a mesh's flatten())");
  }

  /// Every rank gets the reduction of every rank's `buf` in `buf`.
  template <class T, class Op = op::sum>
  void all_reduce(view<T> buf, const Op& op = {}) {
    refuse_rank_ordered<Op>();
    if constexpr (std::is_same_v<Op, op::avg>) {
      all_reduce(buf, op::sum{});
      detail::divide_elements(world_.transport(), buf.data(), buf.size(), size());
    } else if (cross_) {
      const std::size_t L = static_cast<std::size_t>(local_size()), n = buf.size();
      const std::size_t blk = n / L, body = blk * L;
      if (blk > 0) {
        // In pieces, pipelined: while the outer level carries piece c (posted on the cross
        // communicator, whose engine runs it), the group reduce_scatters the next pieces, and
        // all_gathers each piece once it is back.
        T* mine = scratch<T>(0, blk);
        const std::size_t piece = std::max(blk / pipeline_pieces, std::max<std::size_t>(1, min_piece_bytes / sizeof(T)));
        std::vector<request>& posted = requests_;
        posted.clear();
        for (std::size_t at = 0; at < blk; at += piece) {
          const std::size_t m = std::min(piece, blk - at);
          local().reduce_scatter(view<const T>(buf.data() + at * L, m * L), view<T>(mine + at, m), op);
          posted.push_back(cross_->iall_reduce(view<T>(mine + at, m), op));
        }
        std::size_t c = 0;
        for (std::size_t at = 0; at < blk; at += piece, ++c) {
          const std::size_t m = std::min(piece, blk - at);
          posted[c].wait();
          local().all_gather(view<const T>(mine + at, m), view<T>(buf.data() + at * L, m * L));
        }
      }
      if (body < n) up_and_down(view<T>(buf.data() + body, n - body), op);
    } else {
      up_and_down(buf, op);
    }
  }

  /// Copies root's `buf` into every rank's `buf`.
  template <class T>
  void broadcast(view<T> buf, int root) {
    check_root(root, "broadcast");
    for (std::size_t s : path_) {
      if (s == top) {
        on(s, [&](auto& c) { c.broadcast(buf, representative(s, root)); });
        break;
      }
      hop_up(s, root, buf);
    }
    down([&](auto& c) { c.broadcast(buf, 0); });
  }

  /// Root's `buf` gets the reduction of every rank's `buf`; the others' are left unchanged.
  template <class T, class Op = op::sum>
  void reduce(view<T> buf, int root, const Op& op = {}) {
    refuse_rank_ordered<Op>();
    check_root(root, "reduce");
    if constexpr (std::is_same_v<Op, op::avg>) {
      reduce(buf, root, op::sum{});
      if (rank() == root) detail::divide_elements(world_.transport(), buf.data(), buf.size(), size());
    } else {
      view<T> work = buf;
      if (rank() != root && leads_) {  // a leader: reduce into a copy
        work = view<T>(scratch<T>(0, buf.size()), buf.size());
        std::copy(buf.begin(), buf.end(), work.begin());
      }
      for (std::size_t s : path_)
        on(s, [&](auto& c) { c.reduce(work, s == top ? representative(s, root) : 0, op); });
      down([&](auto& c, std::size_t s) { hop_down(c, s, root, work); });
    }
  }

  /// Every rank's `out` (size() · in.size() elements) gets every rank's `in`, in rank order.
  template <class In, class T>
    requires std::same_as<std::remove_const_t<In>, T>
  void all_gather(view<In> in, view<T> out) {
    const std::size_t b = in.size(), p = size_t_size();
    check_size(out.size(), p * b, "all_gather: out", "size() * in.size()");
    if (cross_ && b > 0) return all_gather_across(in, out);
    T* h = identity_ ? out.data() : scratch<T>(0, p * b);
    place_own(in, h);
    gather_up(h, b, [&](auto& c, std::span<const std::size_t> counts) {
      c.all_gather_v(view<const T>(h + start_of_me() * b, count_of_me() * b), view<T>(h, p * b), counts);
    });
    down([&](auto& c) { c.broadcast(view<T>(h, p * b), 0); });
    if (!identity_) unpermute(h, out.data(), b);
  }

  /// Root's `out` (size() · in.size() elements, in rank order) gets every rank's `in`; `out` is
  /// ignored elsewhere.
  template <class In, class T>
    requires std::same_as<std::remove_const_t<In>, T>
  void gather(view<In> in, view<T> out, int root) {
    check_root(root, "gather");
    const std::size_t b = in.size(), p = size_t_size();
    if (rank() == root) check_size(out.size(), p * b, "gather: out", "size() * in.size()");
    const bool whole = rank() == root || leads_;  // holds more than its own block
    T* h = whole ? ((rank() == root && identity_) ? out.data() : scratch<T>(0, p * b)) : nullptr;
    if (whole) place_own(in, h);
    gather_up(h, b, [&](auto& c, std::span<const std::size_t> counts) {
      c.gather_v(view<const T>(h + start_of_me() * b, count_of_me() * b), view<T>(h, p * b), counts,
                 representative(top, root));
    }, whole ? nullptr : in.data());
    down([&](auto& c, std::size_t s) { hop_down(c, s, root, view<T>(h, whole ? p * b : 0)); });
    if (rank() == root && !identity_) unpermute(h, out.data(), b);
  }

  /// Rank i's `out` gets block i of root's `in` (size() · out.size() elements, in rank order).
  template <class In, class T>
    requires std::same_as<std::remove_const_t<In>, T>
  void scatter(view<In> in, view<T> out, int root) {
    check_root(root, "scatter");
    const std::size_t b = out.size(), p = size_t_size();
    if (rank() == root) check_size(in.size(), p * b, "scatter: in", "size() * out.size()");
    // h: where a leader keeps the blocks it hands on; src: the hierarchy-ordered blocks it has.
    T* h = leads_ || (rank() == root && !identity_) ? scratch<T>(0, p * b) : nullptr;
    const T* src = h;
    if (rank() == root) {
      if (identity_) src = in.data();
      else permute(in.data(), h, b);
    }
    for (std::size_t s : path_) {
      if (s == top) {
        on(s, [&](auto& c) {
          c.scatter_v(view<const T>(src, src ? p * b : 0), counts_of(s, b),
                      view<T>(h + start_of_me() * b, count_of_me() * b), representative(s, root));
        });
        break;
      }
      // The root's representative hands every block to its group's leader.
      on(s, [&](auto& c) {
        const int rep = representative(s, root);
        if (rep <= 0) return;
        if (c.rank() == rep) c.send(view<const T>(src, p * b), 0, tag);
        else if (c.rank() == 0) c.recv(view<T>(h, p * b), rep, tag);
      });
    }
    down([&](auto& c, std::size_t s) {
      const bool leads = c.rank() == 0;
      const T* from = leads ? src + group_start(s) * b : nullptr;
      view<T> target = s == path_.front() ? out : view<T>(h + start_of_me_at(s) * b, count_at(s) * b);
      c.scatter_v(view<const T>(from, leads ? group_count(s) * b : 0), counts_of(s, b), target, 0);
    });
  }

  /// Rank i's `out` (`in.size() / size()` elements) gets block i of the reduction of every
  /// rank's `in`.
  template <class In, class T, class Op = op::sum>
    requires std::same_as<std::remove_const_t<In>, T>
  void reduce_scatter(view<In> in, view<T> out, const Op& op = {}) {
    refuse_rank_ordered<Op>();
    const std::size_t b = out.size(), p = size_t_size();
    check_size(in.size(), p * b, "reduce_scatter: in", "size() * out.size()");
    if constexpr (std::is_same_v<Op, op::avg>) {
      reduce_scatter(in, out, op::sum{});
      detail::divide_elements(world_.transport(), out.data(), out.size(), size());
    } else if (cross_ && b > 0) {
      reduce_scatter_across(in, out, op);
    } else {
      T* work = scratch<T>(0, p * b);
      if (identity_) std::copy(in.begin(), in.end(), work);
      else permute(in.data(), work, b);
      for (std::size_t s : path_) {
        if (s == top) {
          on(s, [&](auto& c) {
            T* mine = scratch<T>(1, count_of_me() * b);
            c.reduce_scatter_v(view<const T>(work, p * b), view<T>(mine, count_of_me() * b), counts_of(s, b), op);
            std::copy(mine, mine + count_of_me() * b, work + start_of_me() * b);
          });
          break;
        }
        on(s, [&](auto& c) { c.reduce(view<T>(work, p * b), 0, op); });
      }
      down([&](auto& c, std::size_t s) {
        const std::size_t first = group_start(s) * b;
        view<T> target = s == path_.front() ? out : view<T>(work + start_of_me_at(s) * b, count_at(s) * b);
        c.scatter_v(view<const T>(work + first, group_count(s) * b), counts_of(s, b), target, 0);
      });
    }
  }

  /// No rank returns before every rank has called it.
  void barrier() {
    for (std::size_t s : path_) on(s, [](auto& c) { c.barrier(); });
    down([](auto& c) { c.barrier(); });
  }

  /// Flat over `world()`: the hierarchy has nothing better for them.
  template <class In, class T>
  void all_to_all(view<In> in, view<T> out) { world_.all_to_all(in, out); }

 private:
  // ---- what every rank learns at the start ---------------------------------------------------

  /// One stage of the climb: the ranks of a group of an active level that lead a group of the
  /// stage below (every rank, at the first stage); each stands for its group's ranks, a
  /// contiguous range of the hierarchy's order.
  struct stage {
    bool active = false;
    std::vector<int> color;                    // per world rank: its group here, or -1 (not a member)
    std::vector<std::size_t> start, count;     // per world rank: the range it stands for
    std::vector<std::vector<int>> members_of;  // per group (by color): world ranks, in order
  };

  void learn(const std::vector<std::string>& given) {
    const int p = world_.size();
    const auto P = static_cast<std::size_t>(p);
    // Keys: level i's is the hash of its scope key and those of every level above it.
    std::vector<std::string> key(inner_levels);
    std::vector<std::string> names(inner_levels);
    scope_keys(key, names, std::make_index_sequence<inner_levels>{});
    for (std::size_t i = 0; i < given.size(); ++i) key[i] = given[i];
    std::vector<std::uint64_t> mine(inner_levels + 1);
    std::uint64_t above = 0x68696572ull;
    for (std::size_t i = inner_levels; i-- > 0;) mine[i] = above = detail::hash_combine(above, detail::fnv1a(key[i]));
    mine[inner_levels] = node_identity::of_this_process().hash();
    std::vector<std::uint64_t> all(P * (inner_levels + 1));
    world_.all_gather(view<const std::uint64_t>(mine), view<std::uint64_t>(all), algo::direct{});
    auto word = [&](int r, std::size_t i) { return all[static_cast<std::size_t>(r) * (inner_levels + 1) + i]; };
    node_.resize(P);
    for (int r = 0; r < p; ++r) node_[static_cast<std::size_t>(r)] = word(r, inner_levels);

    // group[i][r]: the lowest world rank with r's key at level i.
    std::vector<std::vector<int>> group(inner_levels, std::vector<int>(P));
    for (std::size_t i = 0; i < inner_levels; ++i) {
      std::map<std::uint64_t, int> first;
      for (int r = 0; r < p; ++r) group[i][static_cast<std::size_t>(r)] = first.emplace(word(r, i), r).first->second;
    }
    // The hierarchy's order: by group, outermost first, then world rank.
    order_.resize(P);
    for (int r = 0; r < p; ++r) order_[static_cast<std::size_t>(r)] = r;
    std::sort(order_.begin(), order_.end(), [&](int a, int b) {
      for (std::size_t i = inner_levels; i-- > 0;) {
        const int ga = group[i][static_cast<std::size_t>(a)], gb = group[i][static_cast<std::size_t>(b)];
        if (ga != gb) return ga < gb;
      }
      return a < b;
    });
    pos_.resize(P);
    identity_ = true;
    for (std::size_t k = 0; k < P; ++k) {
      pos_[static_cast<std::size_t>(order_[k])] = k;
      identity_ = identity_ && order_[k] == static_cast<int>(k);
    }

    // Stages: level 0 always; a level above only where its groups differ from the last active
    // one's; the top where more than one group remains.
    std::vector<int> prev(P);  // the last active partition: singletons before the first
    for (int r = 0; r < p; ++r) prev[static_cast<std::size_t>(r)] = r;
    std::vector<char> leads(P, 1);  // leads its group at every active stage so far
    std::string text = "hierarchy: " + std::to_string(p) + " ranks;";
    auto fill = [&](stage& st, const std::vector<int>& part) {
      st.active = true;
      st.color.assign(P, -1);
      st.start.assign(P, 0);
      st.count.assign(P, 0);
      // The range each member stands for: its group of the partition below (prev).
      std::vector<std::size_t> lo(P, P), n(P, 0);
      for (int r = 0; r < p; ++r) {
        const auto g = static_cast<std::size_t>(prev[static_cast<std::size_t>(r)]);
        lo[g] = std::min(lo[g], pos_[static_cast<std::size_t>(r)]);
        ++n[g];
      }
      std::map<int, int> colors;
      for (std::size_t k = 0; k < P; ++k) {
        const int r = order_[k];
        const auto R = static_cast<std::size_t>(r);
        if (!leads[R]) continue;
        const int c = colors.emplace(part[R], static_cast<int>(colors.size())).first->second;
        st.color[R] = c;
        const auto g = static_cast<std::size_t>(prev[R]);
        st.start[R] = lo[g];
        st.count[R] = n[g];
        if (st.members_of.size() <= static_cast<std::size_t>(c)) st.members_of.resize(static_cast<std::size_t>(c) + 1);
        st.members_of[static_cast<std::size_t>(c)].push_back(r);
      }
      for (auto& m : st.members_of)
        for (std::size_t j = 1; j < m.size(); ++j) leads[static_cast<std::size_t>(m[j])] = 0;
      prev = part;
    };
    for (std::size_t i = 0; i < inner_levels; ++i) {
      if (i > 0 && group[i] == prev) {
        text += " level " + std::to_string(i) + " (" + names[i] + ") collapses into the one below;";
        continue;
      }
      fill(stages_[i], group[i]);
      text += " level " + std::to_string(i) + " (" + names[i] + "): " + sizes_text(stages_[i]) + ";";
    }
    if (std::any_of(prev.begin(), prev.end(), [](int g) { return g != 0; })) {
      fill(stages_[top], std::vector<int>(P, 0));
      text += " outer: " + std::to_string(stages_[top].members_of[0].size()) + " leaders";
    } else {
      text += " outer: one group, nothing crosses it";
    }
    if (!identity_) text += "; ranks are not numbered group by group (the collectives with blocks reorder them)";
    // This rank's path: the stages it is a member of.
    const auto me = static_cast<std::size_t>(world_.rank());
    for (std::size_t s = 0; s <= top; ++s)
      if (stages_[s].active && stages_[s].color[me] >= 0) path_.push_back(s);
    for (std::size_t s : path_)
      leads_ = leads_ || s == top || my_group(s)[0] == world_.rank();
    // Hosts: the groups of the last active inner level.
    std::vector<int> hosts_seen;
    for (std::size_t k = 0; k < P; ++k) {
      const int g = last_inner_group(group, order_[k]);
      if (std::find(hosts_seen.begin(), hosts_seen.end(), g) == hosts_seen.end()) hosts_seen.push_back(g);
    }
    hosts_ = static_cast<int>(hosts_seen.size());
    host_ = static_cast<int>(std::find(hosts_seen.begin(), hosts_seen.end(), last_inner_group(group, world_.rank())) -
                             hosts_seen.begin());
    // all_reduce's blocks: a single active inner level whose groups have one size.
    uniform_ = stages_[top].active;
    for (std::size_t i = 1; i < inner_levels; ++i) uniform_ = uniform_ && !stages_[i].active;
    for (const auto& m : stages_[0].members_of)
      uniform_ = uniform_ && m.size() == stages_[0].members_of[0].size() && m.size() > 1;
    layout_ = text;
    detail::log(log_level::info, world_.settings(), world_.rank(),
                layout_ + " (this rank's keys: " + keys_text(key, names) + ")");
  }

  template <std::size_t... I>
  static void scope_keys(std::vector<std::string>& key, std::vector<std::string>& names, std::index_sequence<I...>) {
    ((key[I] = level_type<I>::scope_type::key(), names[I] = std::string(level_type<I>::scope_type::name)), ...);
  }
  static std::string keys_text(const std::vector<std::string>& key, const std::vector<std::string>& names) {
    std::string t;
    for (std::size_t i = 0; i < key.size(); ++i) {
      if (i) t += "; ";
      t += names[i];
      t += " '";
      t += key[i];
      t += '\'';
    }
    return t;
  }
  static std::string sizes_text(const stage& st) {
    std::string t = std::to_string(st.members_of.size()) + " groups of ";
    for (std::size_t g = 0; g < st.members_of.size(); ++g) {
      if (g) t += '+';  // appended piece by piece: GCC 12 warns (-Wrestrict) on "+" + ...
      t += std::to_string(st.members_of[g].size());
    }
    return t;
  }
  int last_inner_group(const std::vector<std::vector<int>>& group, int r) const {
    for (std::size_t i = inner_levels; i-- > 0;)
      if (stages_[i].active) return group[i][static_cast<std::size_t>(r)];
    return r;
  }

  template <std::size_t... I>
  void make_groups(std::index_sequence<I...>) {
    (make_group<I>(), ...);
    const int me = world_.rank();
    const auto M = static_cast<std::size_t>(me);
    if (stages_[top].active) {
      auto t = world_.split(stages_[top].color[M], static_cast<int>(pos_[M]));
      if (t) top_.emplace(std::move(*t));
    }
    if (uniform_) {
      auto c = world_.split(local_rank(), static_cast<int>(pos_[M]));
      cross_.emplace(std::move(*c));
    }
  }

  template <std::size_t I>
  void make_group() {
    const stage& st = stages_[I];
    if (!st.active) return;
    const auto M = static_cast<std::size_t>(world_.rank());
    const int color = st.color[M], key = static_cast<int>(pos_[M]);
    if constexpr (!own_group<I>) {
      auto g = world_.split(color, key);
      if (g) std::get<I>(groups_).emplace(std::move(*g));
    } else {
      // A one-host transport: every group must lie within a host (by the node keys).
      for (const auto& m : st.members_of)
        for (int r : m)
          if (node_[static_cast<std::size_t>(r)] != node_[static_cast<std::size_t>(m[0])]) {
            const auto texts = detail::gather_node_texts(world_);  // every rank finds the same group
            throw config_error("hierarchy: level " + std::to_string(I) + " (" +
                               std::string(level_type<I>::scope_type::name) +
                               ") has a transport of one host, but its group of ranks " + std::to_string(m[0]) +
                               " and " + std::to_string(r) + " spans two hosts (node keys '" +
                               texts[static_cast<std::size_t>(m[0])] + "' and '" + texts[static_cast<std::size_t>(r)] +
                               "'); give the level a key within hosts");
          }
      auto slice = world_.split(color, key);
      if (slice)
        std::get<I>(groups_).emplace(detail::one_host_group<typename level_type<I>::transport_type>(
            *slice, typename world_communicator::algorithm_type{}, world_.settings(), "hierarchy-" + std::to_string(I)));
    }
  }

  // ---- the walk up and down the stages ----------------------------------------------------

  /// Calls f on this rank's communicator of stage s (a member there).
  template <class F>
  void on(std::size_t s, F&& f) {
    if (s == top) f(*top_);
    else on_inner(s, f, std::make_index_sequence<inner_levels>{});
  }
  template <class F, std::size_t... I>
  void on_inner(std::size_t s, F& f, std::index_sequence<I...>) {
    ((s == I ? (void)f(*std::get<I>(groups_)) : void()), ...);
  }
  /// The way down: the stages of this rank's path below the top, outermost first (a path that
  /// ends below the top ends where this rank is a member but does not lead). `f(c)` or `f(c, s)`.
  template <class F>
  void down(F&& f) {
    for (std::size_t k = path_.size(); k-- > 0;) {
      const std::size_t s = path_[k];
      if (s == top) continue;
      on(s, [&](auto& c) {
        if constexpr (std::is_invocable_v<F&, decltype(c)&, std::size_t>) f(c, s);
        else f(c);
      });
    }
  }

  /// The world rank r's representative at stage s: the member of r's group there whose range
  /// holds r; returned as a rank of that group's communicator, or -1 if r is not under this
  /// rank's group of stage s.
  int representative(std::size_t s, int r) const {
    const stage& st = stages_[s];
    const auto me = static_cast<std::size_t>(world_.rank());
    const auto& m = st.members_of[static_cast<std::size_t>(st.color[me])];
    const std::size_t at = pos_[static_cast<std::size_t>(r)];
    for (std::size_t j = 0; j < m.size(); ++j) {
      const auto R = static_cast<std::size_t>(m[j]);
      if (at >= st.start[R] && at < st.start[R] + st.count[R]) return static_cast<int>(j);
    }
    return -1;
  }
  /// On the way up: the root's representative in this rank's group of stage s hands `buf` to
  /// the group's leader, if it is not the leader itself.
  template <class T>
  void hop_up(std::size_t s, int root, view<T> buf) {
    on(s, [&](auto& c) {
      const int rep = representative(s, root);
      if (rep <= 0) return;
      if (c.rank() == rep) c.send(view<const T>(buf.data(), buf.size()), 0, tag);
      else if (c.rank() == 0) c.recv(buf, rep, tag);
    });
  }
  /// On the way down: the group's leader hands `buf` to the root's representative.
  template <class C, class T>
  void hop_down(C& c, std::size_t s, int root, view<T> buf) {
    const int rep = representative(s, root);
    if (rep <= 0) return;
    if (c.rank() == 0) c.send(view<const T>(buf.data(), buf.size()), rep, tag);
    else if (c.rank() == rep) c.recv(buf, 0, tag);
  }

  /// Groups of one size L (cross() exists): the rank at position (j, k) (group j, local rank k)
  /// does its outer-level share with the ranks of local rank k, L such groups at once, and the
  /// inner level moves the rest, in pieces of every block so that the two levels overlap.
  template <class T>
  std::size_t piece_of(std::size_t b) const {
    return std::max(b / pipeline_pieces, std::max<std::size_t>(1, min_piece_bytes / sizeof(T)));
  }
  /// all_gather: across (cross: the H blocks of local rank k), then inside (local: every local
  /// rank's H blocks), then each piece to its ranks' places in `out`.
  template <class In, class T>
  void all_gather_across(view<In> in, view<T> out) {
    const std::size_t b = in.size(), p = size_t_size(), L = static_cast<std::size_t>(local_size()), H = p / L;
    const T* src = in.data();
    if (detail::overlaps(view<const T>(in.data(), b), view<const T>(out.data(), out.size()))) {
      T* copy = scratch<T>(2, b);  // the pieces are read while out is written
      std::copy(in.begin(), in.end(), copy);
      src = copy;
    }
    const std::size_t piece = piece_of<T>(b);
    T* across = scratch<T>(1, H * b);  // piece c: H blocks of m at across + H * at
    T* inside = scratch<T>(0, p * b);  // piece c: (k, j) blocks of m at inside + p * at
    requests_.clear();
    for (std::size_t at = 0; at < b; at += piece) {
      const std::size_t m = std::min(piece, b - at);
      requests_.push_back(cross_->iall_gather(view<const T>(src + at, m), view<T>(across + H * at, H * m)));
    }
    std::size_t c = 0;
    for (std::size_t at = 0; at < b; at += piece, ++c) {
      const std::size_t m = std::min(piece, b - at);
      requests_[c].wait();
      local().all_gather(view<const T>(across + H * at, H * m), view<T>(inside + p * at, p * m));
      for (std::size_t k = 0; k < L; ++k)
        for (std::size_t j = 0; j < H; ++j)
          std::copy_n(inside + p * at + (k * H + j) * m, m,
                      out.data() + static_cast<std::size_t>(order_[j * L + k]) * b + at);
    }
  }
  /// reduce_scatter: each piece laid out (k, j), reduce_scatter inside (local rank k gets the
  /// host's sums of the H blocks of local rank k), then across (cross rank j gets block j).
  template <class In, class T, class Op>
  void reduce_scatter_across(view<In> in, view<T> out, const Op& op) {
    const std::size_t b = out.size(), p = size_t_size(), L = static_cast<std::size_t>(local_size()), H = p / L;
    const std::size_t piece = piece_of<T>(b);
    T* inside = scratch<T>(0, p * b);
    T* across = scratch<T>(1, H * b);
    requests_.clear();
    for (std::size_t at = 0; at < b; at += piece) {
      const std::size_t m = std::min(piece, b - at);
      T* w = inside + p * at;
      for (std::size_t k = 0; k < L; ++k)
        for (std::size_t j = 0; j < H; ++j)
          std::copy_n(in.data() + static_cast<std::size_t>(order_[j * L + k]) * b + at, m, w + (k * H + j) * m);
      local().reduce_scatter(view<const T>(w, p * m), view<T>(across + H * at, H * m), op);
      requests_.push_back(cross_->ireduce_scatter(view<const T>(across + H * at, H * m), view<T>(out.data() + at, m), op));
    }
    for (auto& r : requests_) r.wait();
  }

  /// all_reduce up the stages and back down.
  template <class T, class Op>
  void up_and_down(view<T> buf, const Op& op) {
    for (std::size_t s : path_) {
      if (s == top) on(s, [&](auto& c) { c.all_reduce(buf, op); });
      else on(s, [&](auto& c) { c.reduce(buf, 0, op); });
    }
    down([&](auto& c) { c.broadcast(buf, 0); });
  }

  /// Blocks of b elements gathered to the leaders up to the top, where `at_top(c, counts)` runs.
  /// `own`, for a rank that holds only its own block, is where it lies (h is null then).
  template <class T, class AtTop>
  void gather_up(T* h, std::size_t b, AtTop&& at_top, const T* own = nullptr) {
    for (std::size_t s : path_) {
      if (s == top) {
        on(s, [&](auto& c) { at_top(c, std::span<const std::size_t>(counts_of(s, b))); });
        break;
      }
      on(s, [&](auto& c) {
        const std::size_t first = group_start(s) * b;
        const T* mine = own ? own : h + start_of_me_at(s) * b;
        c.gather_v(view<const T>(mine, count_at(s) * b), view<T>(h ? h + first : nullptr, h ? group_count(s) * b : 0),
                   std::span<const std::size_t>(counts_of(s, b)), 0);
      });
    }
  }

  // ---- ranges ----------------------------------------------------------------------------

  std::size_t start_of_me_at(std::size_t s) const { return stages_[s].start[me_index()]; }
  std::size_t count_at(std::size_t s) const { return stages_[s].count[me_index()]; }
  std::size_t start_of_me() const { return start_of_me_at(top); }
  std::size_t count_of_me() const { return count_at(top); }
  const std::vector<int>& my_group(std::size_t s) const {
    return stages_[s].members_of[static_cast<std::size_t>(stages_[s].color[me_index()])];
  }
  /// The first position and the number of ranks this rank's group of stage s stands for.
  std::size_t group_start(std::size_t s) const { return stages_[s].start[static_cast<std::size_t>(my_group(s)[0])]; }
  std::size_t group_count(std::size_t s) const {
    std::size_t n = 0;
    for (int r : my_group(s)) n += stages_[s].count[static_cast<std::size_t>(r)];
    return n;
  }
  /// Per member of this rank's group of stage s: the elements it stands for.
  const std::vector<std::size_t>& counts_of(std::size_t s, std::size_t b) {
    counts_.clear();
    for (int r : my_group(s)) counts_.push_back(stages_[s].count[static_cast<std::size_t>(r)] * b);
    return counts_;
  }
  std::size_t me_index() const { return static_cast<std::size_t>(world_.rank()); }
  std::size_t size_t_size() const { return static_cast<std::size_t>(size()); }

  template <class In, class T>
  void place_own(view<In> in, T* h) const {
    T* at = h + pos_[me_index()] * in.size();
    if (static_cast<const void*>(in.data()) != static_cast<const void*>(at)) std::copy(in.begin(), in.end(), at);
  }
  /// Rank order to the hierarchy's order, and back, blocks of b.
  template <class T>
  void permute(const T* ranked, T* ordered, std::size_t b) const {
    for (std::size_t k = 0; k < order_.size(); ++k)
      std::copy_n(ranked + static_cast<std::size_t>(order_[k]) * b, b, ordered + k * b);
  }
  template <class T>
  void unpermute(const T* ordered, T* ranked, std::size_t b) const {
    for (std::size_t k = 0; k < order_.size(); ++k)
      std::copy_n(ordered + k * b, b, ranked + static_cast<std::size_t>(order_[k]) * b);
  }

  template <class T>
  T* scratch(std::size_t which, std::size_t n) {
    return reinterpret_cast<T*>(scratch_[which].reserve(n * sizeof(T)));
  }

  void check_root(int root, const char* call) const {
    if (root < 0 || root >= size())
      throw usage_error(std::string("hierarchy ") + call + ": root " + std::to_string(root) + " is outside 0.." +
                        std::to_string(size() - 1));
  }
  static void check_size(std::size_t got, std::size_t want, const char* name, const char* rule) {
    if (got != want)
      throw usage_error(std::string("hierarchy ") + name + " has " + std::to_string(got) + " elements; it must hold " +
                        rule + " = " + std::to_string(want));
  }

  world_communicator world_;
  template <std::size_t... I>
  static auto groups_type(std::index_sequence<I...>) -> std::tuple<std::optional<level_communicator<I>>...>;
  decltype(groups_type(std::make_index_sequence<inner_levels>{})) groups_;
  std::optional<world_communicator> top_, cross_;
  std::array<stage, inner_levels + 1> stages_;
  std::vector<std::size_t> path_;  // the stages this rank is a member of, innermost first
  std::vector<int> order_;         // the hierarchy's order: position -> world rank
  std::vector<std::size_t> pos_;   // world rank -> position
  std::vector<std::uint64_t> node_;
  bool identity_ = true, uniform_ = false;
  bool leads_ = false;  // leads a group on its path (or is at the top): holds others' data
  int host_ = 0, hosts_ = 1;
  std::string layout_;
  std::vector<std::size_t> counts_;
  std::vector<request> requests_;  // all_reduce's pieces in flight on the cross communicator
  std::array<detail::scratch_buffer, 3> scratch_;  // kept between calls; written before read
};

}  // namespace tutti
