/// \file
/// `tutti::hierarchy<Intra, Inter>`: one job across hosts, composed at compile time of a transport
/// between the ranks of one host (`Intra`, e.g. `tutti::shm`) and one between hosts (`Inter`,
/// e.g. `tutti::tcp`).
///
/// It holds three communicators: `local()` (the ranks of this host, over Intra), `world()` (every
/// rank, over Inter) and `cross()` (the ranks with this rank's local rank, one per host; a
/// sub-group of world). all_reduce is hierarchical:
///
///   1. reduce_scatter inside the host: local rank k gets block k of the host's sum;
///   2. all_reduce of block k across hosts, among the ranks with local rank k (all L of them at
///      once, so every inter-host link carries 1/L of the message);
///   3. all_gather inside the host.
///
/// The last n mod L elements take a flat all_reduce over world. Every element is reduced in the
/// same order on every rank, so results are bitwise identical everywhere. Other collectives go
/// through `world()` (or `local()` / `cross()`, for whoever wants to compose their own).
///
/// Ranks must be numbered host by host: rank = host · L + local rank, with the same L on every
/// host, as `tuttirun --nnodes` and torchrun do; anything else is a `config_error` naming the rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/view.hpp"
#include "tutti/group/communicator.hpp"
#include "tutti/op/ops.hpp"

namespace tutti {

template <transport Intra, transport Inter>
class hierarchy {
 public:
  using local_communicator = communicator<Intra>;
  using world_communicator = communicator<Inter>;

  /// Joins the job the environment describes: `Inter::from_env()` for every rank, and
  /// `Intra::create(job, config)` for this host's ranks (the job id gets the host's number, so
  /// hosts that share a kernel, as in tests, do not collide).
  static hierarchy from_env()
    requires requires(const job_env& j, const config& c) {
      Inter::from_env();
      Intra::create(j, c);
    }
  {
    const job_env job = job_env::from_env();
    const config cfg = config::from_env();
    check_layout(job);
    job_env here = job;
    here.rank = job.local_rank;
    here.world_size = job.local_world_size;
    here.job_id = job.job_id + ".host" + std::to_string(job.rank / job.local_world_size);
    world_communicator world(Inter::from_env());
    local_communicator local(Intra::create(here, cfg));
    return hierarchy(std::move(local), std::move(world));
  }

  /// Composes two connected communicators: `local` of this host's ranks, `world` of all.
  hierarchy(local_communicator local, world_communicator world)
      : local_(std::move(local)), world_(std::move(world)), cross_(make_cross(local_, world_)) {}

  int rank() const noexcept { return world_.rank(); }
  int size() const noexcept { return world_.size(); }
  int local_rank() const noexcept { return local_.rank(); }
  int local_size() const noexcept { return local_.size(); }
  int host() const noexcept { return cross_.rank(); }
  int hosts() const noexcept { return cross_.size(); }

  local_communicator& local() noexcept { return local_; }
  world_communicator& world() noexcept { return world_; }
  world_communicator& cross() noexcept { return cross_; }

  /// Hierarchical all_reduce (see the file comment), in place.
  template <class T, class Op = op::sum>
  void all_reduce(view<T> buf, const Op& op = {}) {
    const std::size_t L = static_cast<std::size_t>(local_.size()), n = buf.size();
    const std::size_t blk = n / L, body = blk * L;
    if (blk > 0) {
      block_.resize(blk * sizeof(T));
      view<T> mine(reinterpret_cast<T*>(block_.data()), blk);
      local_.reduce_scatter(view<const T>(buf.data(), body), mine, op);
      cross_.all_reduce(mine, op);
      local_.all_gather(view<const T>(mine), view<T>(buf.data(), body));
    }
    if (body < n) world_.all_reduce(view<T>(buf.data() + body, n - body), op);
  }

  /// Everything else runs flat over `world()`.
  template <class T>
  void broadcast(view<T> buf, int root) { world_.broadcast(buf, root); }
  template <class T, class Op = op::sum>
  void reduce(view<T> buf, int root, const Op& op = {}) { world_.reduce(buf, root, op); }
  template <class In, class T>
  void all_gather(view<In> in, view<T> out) { world_.all_gather(in, out); }
  template <class In, class T, class Op = op::sum>
  void reduce_scatter(view<In> in, view<T> out, const Op& op = {}) { world_.reduce_scatter(in, out, op); }
  void barrier() { world_.barrier(); }

 private:
  static void check_layout(const job_env& job) {
    if (job.local_world_size < 1 || job.world_size % job.local_world_size != 0)
      throw config_error("hierarchy: WORLD_SIZE=" + std::to_string(job.world_size) +
                         " is not a multiple of LOCAL_WORLD_SIZE=" + std::to_string(job.local_world_size) +
                         " (every host must run the same number of ranks)");
    if (job.rank % job.local_world_size != job.local_rank)
      throw config_error("hierarchy: rank " + std::to_string(job.rank) + " has LOCAL_RANK=" +
                         std::to_string(job.local_rank) + ", but ranks must be numbered host by host (rank = host * " +
                         std::to_string(job.local_world_size) + " + local rank)");
  }

  /// The ranks with this rank's local rank, ordered by host; checks the layout across ranks.
  static world_communicator make_cross(local_communicator& local, world_communicator& world) {
    // Every rank's (local rank, local size): the layout must be host by host and uniform.
    const int me[2] = {local.rank(), local.size()};
    std::vector<int> all(2 * static_cast<std::size_t>(world.size()));
    world.all_gather(view<const int>(me, 2), view<int>(all));
    const int L = me[1];
    for (int r = 0; r < world.size(); ++r) {
      const int lr = all[2 * static_cast<std::size_t>(r)], ls = all[2 * static_cast<std::size_t>(r) + 1];
      if (ls != L || lr != r % L)
        throw config_error("hierarchy: rank " + std::to_string(r) + " is local rank " + std::to_string(lr) + " of " +
                           std::to_string(ls) + " on its host, but rank " + std::to_string(world.rank()) +
                           " expects local rank " + std::to_string(r % L) + " of " + std::to_string(L) +
                           " (ranks must be numbered host by host, the same number on every host)");
    }
    auto cross = world.split(local.rank(), world.rank() / L);
    if (!cross) throw error(errc::aborted, "hierarchy: this rank is in no cross-host group");
    return std::move(*cross);
  }

  local_communicator local_;
  world_communicator world_;
  world_communicator cross_;
  std::vector<std::byte> block_;  // this rank's block of an all_reduce, reused across calls
};

}  // namespace tutti
