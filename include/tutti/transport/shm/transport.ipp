/// \file
/// Definitions for tutti/transport/shm/transport.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <sys/uio.h>

#include <bit>
#include <cerrno>
#include <cstdio>

#include "tutti/transport/shm/grow.hpp"
#include "tutti/transport/shm/shrink.hpp"
#include "tutti/transport/shm/startup.hpp"
#include "tutti/transport/shm/transport.hpp"

namespace tutti {

TUTTI_DECL shm shm::from_env() {
  const config cfg = config::from_env();
  const char* join = detail::getenv_nonempty("TUTTI_JOIN");
  if (join && std::string_view(join) != "0") {
    if (std::string_view(join) != "1") throw config_error("TUTTI_JOIN='" + std::string(join) + "': use 1 (join a running job) or 0");
    std::string base;
    if (const char* id = detail::getenv_nonempty("TUTTI_JOB_ID")) base = id;
    else if (const auto port = detail::env_int("MASTER_PORT", 1, 65535)) base = "port" + std::to_string(*port);
    else throw config_error("TUTTI_JOIN=1: a joiner needs the running job's TUTTI_JOB_ID or MASTER_PORT to find it");
    const std::string token = job_token();
    const auto j = detail::shm_impl::ask_to_join(base, token, cfg.timeout);
    shm t = create(j.rank, j.world, j.job_id, j.opt, cfg.timeout);
    t.seg_->base_job_id = base;
    t.seg_->token = token;
    detail::log(log_level::info, cfg, j.rank, "shm: joined job '" + base + "' as rank " + std::to_string(j.rank) + " of " +
                                                   std::to_string(j.world));
    return t;
  }
  return create(job_env::from_env(), cfg);
}

TUTTI_COLD TUTTI_DECL shm shm::create(const job_env& job, const config& cfg) {
  if (job.local_world_size != job.world_size)
    throw config_error("tutti::shm needs every rank on one host, but the environment (" + job.source + ") says " +
                       std::to_string(job.local_world_size) + " of " + std::to_string(job.world_size) +
                       " ranks run here; use tutti::tcp or a hierarchy across hosts");
  shm t = create(job.rank, job.world_size, job.job_id, shm_options::from_env(job.world_size), cfg.timeout);
  t.seg_->base_job_id = job.job_id;
  t.seg_->token = job_token();
  detail::log(log_level::info, cfg, job.rank, "shm: " + t.seg_->single_copy_note);
  return t;
}

TUTTI_COLD TUTTI_DECL shm shm::create(int rank, int world_size, const std::string& job_id, shm_options opt,
                                      std::chrono::milliseconds timeout) {
  shm t;
  t.seg_ = detail::shm_impl::map_segment(rank, world_size, job_id, opt, timeout);
  t.group_ = toolkit::group_map(world_size, rank);
  t.p2p_ = std::make_shared<detail::shm_impl::p2p_engine>(t.group_);
  detail::shm_impl::publish_waiting(*t.seg_, t.group_, nullptr);
  return t;
}

TUTTI_DECL shm shm::sub(std::span<const int> members, std::uint64_t context) const {
  const toolkit::group_map g = group_.sub(members, context);
  shm_options o = seg_->lay.opt;
  o.window_bytes = 8192;
  o.arena_bytes = 0;
  o.single_copy = shm_options::mode::never;
  char id[24];
  std::snprintf(id, sizeof id, ".g%016llx", static_cast<unsigned long long>(context));
  shm t;
  t.seg_ = detail::shm_impl::map_segment(g.rank(), g.size(), seg_->job_id + id, o, seg_->timeout);
  t.group_ = g.own_links();
  t.p2p_ = std::make_shared<detail::shm_impl::p2p_engine>(t.group_);
  detail::shm_impl::publish_waiting(*t.seg_, t.group_, nullptr);
  return t;
}

TUTTI_DECL void shm::sendrecv_with(int to, const header& hs, const std::byte* sdata, int from, const header& hr,
                                   byte_consumer consume, const wait_context& w) {
  using namespace detail::shm_impl;
  outgoing out{to, hs, sdata};
  incoming in{from, hr, consume};
  bool sent = false, received = false;
  while (true) {
    if (!sent) sent = progress(*seg_, group_, out);
    if (!received) received = progress(*seg_, group_, in, w);
    if (sent && received) return;
    wait_for(w, received ? hs : hr, received ? to : from, sent ? -1 : to,
             received ? "to make room at" : "to receive from",
             sent ? wait_kind::recv : received ? wait_kind::send : wait_kind::duplex, [&] {
               return (!sent && room_changed(*seg_, group_, out)) || (!received && data_arrived(*seg_, group_, in));
             });
  }
}

TUTTI_DECL void shm::wait_phase(int r, std::uint64_t g, const fingerprint& fp, bool compare, const wait_context& w) {
  using namespace detail::shm_impl;
  auto& c = seg_->ctl(group_.world(r));
  if (!has_posted(c, g))  // without compare: liveness and deadline only, said as this call
    wait_for(w, header{fp, 0}, r, -1, "to reach the same step as", wait_kind::phase, [&] { return has_posted(c, g); },
             compare);
  if (!compare) return;
  if (const auto theirs = posted_fp(c, g); theirs && *theirs != fp)
    toolkit::throw_left_behind({fp, 0}, w.algorithm, fp, rank(), *theirs, r);
  check_ring(*seg_, group_, r, fp, w);
}

TUTTI_DECL void shm::check_posted(std::uint64_t g, const fingerprint& fp, const wait_context& w) const {
  using namespace detail::shm_impl;
  const auto mine = g > 0 && seg_->compared_all != g ? posted_fp(seg_->ctl(seg_->world_rank), g) : std::nullopt;
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    if (mine)
      if (const auto theirs = posted_fp(seg_->ctl(group_.world(r)), g); theirs && *theirs != *mine)
        throw fingerprint_mismatch(std::string(collective_name(mine->coll)) + "(" + std::string(w.algorithm) + ") #" +
                                       std::to_string(mine->seq) + ": " +
                                       detail::describe_difference(*mine, rank(), *theirs, r) + " (seen when rank " +
                                       std::to_string(rank()) + " began its next step on the windows)",
                                   *mine, rank(), *theirs, r);
    check_ring(*seg_, group_, r, fp, w);
  }
}

TUTTI_COLD TUTTI_DECL shm shm::shrink(std::chrono::milliseconds timeout, std::vector<int>* kept) const {
  if (group_.context() != 0) throw usage_error("shm shrink: call it on the world communicator, not on a group");
  auto& seg = *seg_;
  const auto s = detail::shm_impl::agree_survivors(seg, timeout);
  const auto bit = [](int r) { return std::uint64_t{1} << r; };
  if (kept) {
    kept->clear();
    for (int r = 0; r < seg.lay.p; ++r)
      if (s.members & bit(r)) kept->push_back(r);
  }
  const int new_rank = std::popcount(s.members & (bit(seg.world_rank) - 1));
  const int new_size = std::popcount(s.members);
  return successor(create(new_rank, new_size, seg.job_id + ".shrink" + std::to_string(s.generation), seg.lay.opt, timeout));
}

TUTTI_COLD TUTTI_DECL shm shm::grow(int joiners, std::chrono::milliseconds timeout) const {
  if (group_.context() != 0) throw usage_error("shm grow: call it on the world communicator, not on a group");
  auto& seg = *seg_;
  const std::string job = seg.job_id + ".grow" + std::to_string(++seg.grows);
  if (seg.world_rank == 0)
    detail::shm_impl::take_joiners(seg.base_job_id, seg.token, seg.lay.p, joiners, job, seg.lay.opt, timeout);
  return successor(create(seg.world_rank, seg.lay.p + joiners, job, seg.lay.opt, timeout));
}

TUTTI_DECL void shm::fail(std::string_view what) noexcept {
  try {
    seg_->write_failure(toolkit::notice_text(what, detail::shm_impl::notice_text_bytes));
  } catch (...) {
    seg_->write_failure("failed (the reason did not fit in memory)");
  }
  for (int r : group_.members())
    if (r != seg_->world_rank) seg_->ring_bell(r);
}

TUTTI_DECL void shm::note(std::string_view what) noexcept {
  try {
    seg_->write_note(toolkit::notice_text(what, detail::shm_impl::notice_text_bytes));
  } catch (...) {
  }
}

TUTTI_DECL void shm::read_remote(int r, std::uint64_t address, std::size_t bytes, std::byte* dst) {
  std::size_t done = 0;
  while (done < bytes) {
    iovec local{dst + done, bytes - done}, peer{reinterpret_cast<void*>(address + done), bytes - done};
    const ssize_t n = ::process_vm_readv(seg_->pids[static_cast<std::size_t>(group_.world(r))], &local, 1, &peer, 1, 0);
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      if (std::string why = seg_->gone(group_.world(r)); !why.empty() || e == ESRCH) {
        if (auto notice = seg_->failure_notice(group_.world(r)))
          toolkit::raise_notice(*notice, group_, r, "shm: reading the input of " + group_.name(r) + " on " + group_.name(rank()));
        toolkit::throw_lost("shm: " + group_.name(r) + " " + (why.empty() ? "exited" : why) + " while " +
                                group_.name(rank()) + " read its input",
                            group_.job_rank(r));
      }
      throw error(errc::aborted, "shm: process_vm_readv of " + std::to_string(bytes) + " bytes from rank " +
                                     std::to_string(r) + " failed: " + detail::errno_text(e));
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace tutti
