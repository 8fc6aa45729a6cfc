/// \file
/// How a `tutti::mpi` call waits, and what it hears meanwhile. `drive` polls the call's requests
/// under the deadline (spins, yields, then sleeps in short steps) and names the peer when it
/// times out. Failure notices: `fail` tells the group's other ranks why this one failed (the
/// context, then the text, on `tag_failure`); `check_notice` raises `peer_lost` when the rank
/// waited for sent one, and `peer_failed` says whether a rank did (for `settle`). Waiting
/// notices: a receive still without its header tells the peers what it waits in
/// (`tell_waiting`) and reads what the peer it waits for says (`waiting_notice`), so ranks that
/// wait for each other raise `mismatch_error`.
///
/// Members of `tutti::mpi`, defined here out of its class (mpi/transport.hpp, which includes
/// this file at its end).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/mpi/transport.hpp"
#include "tutti/transport/toolkit.hpp"

namespace tutti {

inline void mpi::fail(std::string_view what) noexcept {
  using namespace detail::mpi_impl;
  if (finalized()) return;
  st_->broken = true;
  try {
    // The communicator's context, then the text: a receiver drops notices of another context.
    auto text = std::make_unique<std::string>(sizeof context_, '\0');
    std::memcpy(text->data(), &context_, sizeof context_);
    text->append(toolkit::notice_text(what, max_notice));
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request req = MPI_REQUEST_NULL;
      if (MPI_Isend(text->data(), static_cast<int>(text->size()), MPI_CHAR, r, tag_failure, st_->comm, &req) ==
          MPI_SUCCESS)
        MPI_Request_free(&req);  // completes on its own; the text lives as long as the communicator
    }
    st_->notices.push_back(std::move(text));
  } catch (...) {
  }
}

inline bool mpi::peer_failed(int peer) {
  using namespace detail::mpi_impl;
  auto& lost = st_->lost;
  if (std::find(lost.begin(), lost.end(), peer) != lost.end()) return true;
  for (int flag = 1;;) {
    MPI_Status status;
    if (MPI_Iprobe(peer, tag_failure, st_->comm, &flag, &status) != MPI_SUCCESS || !flag) return false;
    int n = 0;
    MPI_Get_count(&status, MPI_CHAR, &n);
    std::string text(static_cast<std::size_t>(std::max(n, 0)), '\0');
    if (MPI_Recv(text.data(), n, MPI_CHAR, peer, tag_failure, st_->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    std::uint64_t context = ~context_;
    if (text.size() >= sizeof context) std::memcpy(&context, text.data(), sizeof context);
    if (context == context_) {
      lost.push_back(peer);
      return true;
    }
  }
}

inline void mpi::tell_waiting(fingerprint fp) {
  using namespace detail::mpi_impl;
  fp.context = context_;
  std::uint64_t words[fp_words];
  encode(fp, words);
  if (std::memcmp(words, st_->told, sizeof words) == 0) return;
  std::memcpy(st_->told, words, sizeof words);
  auto& pending = st_->waiting;
  std::erase_if(pending, [](auto& e) {
    int done = 0;
    return MPI_Test(&e.first, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done;
  });
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto buf = std::make_unique<std::uint64_t[]>(fp_words);
    std::memcpy(buf.get(), words, sizeof words);
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Isend(buf.get(), fp_words, MPI_UINT64_T, r, tag_waiting, st_->comm, &req) == MPI_SUCCESS)
      pending.emplace_back(req, std::move(buf));
  }
}

inline std::string mpi::waiting_notice(int peer, const header& want, const wait_context& w) {
  using namespace detail::mpi_impl;
  auto at = [&] { return toolkit::where(want, w.algorithm); };
  fingerprint mine = want.fp;
  mine.context = context_;
  for (int flag = 1;;) {
    MPI_Status st;
    check(MPI_Iprobe(peer, tag_waiting, st_->comm, &flag, &st), "MPI_Iprobe", at);
    if (!flag) return {};
    std::uint64_t words[fp_words];
    check(MPI_Recv(words, fp_words, MPI_UINT64_T, peer, tag_waiting, st_->comm, MPI_STATUS_IGNORE), "MPI_Recv", at);
    const fingerprint theirs = decode(words);
    if (toolkit::left_behind(mine, theirs))
      return at() + ": " + detail::describe_difference(mine, rank_, theirs, peer) + " (each waits for the other: rank " +
             std::to_string(peer) + " waits in " + std::string(collective_name(theirs.coll)) + " #" +
             std::to_string(theirs.seq) + ")";
  }
}

template <class Ready>
inline void mpi::drive(const wait_context& w, const header& h, int peer, int peer2, const char* doing, Ready ready) {
  const bool over = st_->oversubscribed;
  const toolkit::wait_policy policy{over ? 16 : 0, std::chrono::microseconds(over ? 0 : 50),
                                    std::chrono::milliseconds(20), std::chrono::milliseconds(1), 16};
  unsigned sleeps = 0;
  toolkit::wait_until(
      w, {h, rank_, doing, peer}, policy, ready,
      [&](auto) {
        if (peer != no_notices) check_notice(peer, h, w);
        if (peer2 >= 0) check_notice(peer2, h, w);
      },
      [&](auto until) {
        const auto left = until - std::chrono::steady_clock::now();
        const std::chrono::nanoseconds step = std::chrono::microseconds(sleeps++ < 4096 ? 100 : 1000);
        if (left.count() > 0) std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(step, left));
      },
      [&](auto) -> std::chrono::steady_clock::time_point {
        const std::string me = "rank " + std::to_string(rank_);
        if (peer >= 0)
          toolkit::time_out(toolkit::timeout_text(h, w.algorithm, me, w.timeout, doing, "rank " + std::to_string(peer)));
        if (peer == -1)
          toolkit::time_out(toolkit::timeout_text(h, w.algorithm, me, w.timeout, std::string("in ") + doing,
                                                  "for the other ranks"));
        toolkit::time_out(toolkit::timeout_text(h, w.algorithm, me, w.timeout, doing, "the other ranks"));
      });
}

inline void mpi::check_notice(int peer, const header& h, const wait_context& w) {
  using namespace detail::mpi_impl;
  int flag = 0;
  MPI_Status status;
  auto at = [&] { return toolkit::where(h, w.algorithm); };
  check(MPI_Iprobe(peer >= 0 ? peer : MPI_ANY_SOURCE, tag_failure, st_->comm, &flag, &status), "MPI_Iprobe", at);
  if (!flag) return;
  int n = 0;
  MPI_Get_count(&status, MPI_CHAR, &n);
  std::string text(static_cast<std::size_t>(std::max(n, 0)), '\0');
  check(MPI_Recv(text.data(), n, MPI_CHAR, status.MPI_SOURCE, tag_failure, st_->comm, MPI_STATUS_IGNORE),
        "MPI_Recv", at);
  std::uint64_t context = ~context_;
  if (text.size() >= sizeof context) std::memcpy(&context, text.data(), sizeof context);
  if (context != context_) return;  // from an earlier communicator that MPI gave the same id
  text.erase(0, sizeof context);
  st_->lost.push_back(status.MPI_SOURCE);  // for `settle`: that rank takes none of our messages now
  toolkit::raise_notice(text, detail::mpi_impl::job_names{st_->comm}, status.MPI_SOURCE,
                        at() + " on rank " + std::to_string(rank_));
}

}  // namespace tutti
