/// \file
/// `tutti::mpi`'s point to point. A message is two MPI messages, the header and then the
/// payload (in pieces above `max_piece`), on its channel's tag pair (`tags`); `exchange` posts a
/// send and/or a receive, checks the header before it posts the payload's receive straight into
/// the destination, and when the call fails hands what it posted to `settle`, which returns only
/// once MPI is done with the call's buffers (or keeps what is still pending, and says so).
///
/// Members of `tutti::mpi`, defined here out of its class (mpi/transport.hpp, which includes
/// this file at its end).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/mpi/transport.hpp"
#include "tutti/transport/toolkit.hpp"

namespace tutti {

inline std::pair<int, int> mpi::tags(const header& h, const wait_context& w) const {
  using namespace detail::mpi_impl;
  if (h.fp.coll != collective::send_recv) return {tag_header, tag_payload};
  const long t = h.fp.root < 0 ? 0 : h.fp.root;
  const long top = (static_cast<long>(st_->tag_ub) - tag_p2p - 1) / 2;
  if (t > top)
    throw usage_error(toolkit::where(h, w.algorithm) + ": tag " +
                      std::to_string(t) + " exceeds " + std::to_string(top) +
                      ", the largest this MPI's tag range (MPI_TAG_UB) leaves for user tags");
  return {tag_p2p + 2 * static_cast<int>(t), tag_p2p + 2 * static_cast<int>(t) + 1};
}

inline void mpi::exchange(int to, const header* hs, const std::byte* sdata, int from, const header* hr,
                          std::byte* rdata, const wait_context& w) {
  using namespace detail::mpi_impl;
  using role = request_set::role;
  const header& h = hr ? *hr : *hs;
  auto at = [&] { return toolkit::where(h, w.algorithm) + " on rank " + std::to_string(rank_); };
  const auto tag_pair = tags(h, w);
  wire_header in{}, out{};  // before `rs`: the requests on them end before they go
  request_set rs;
  const std::size_t send_pieces = hs ? (hs->bytes + max_piece - 1) / max_piece : 0;
  const std::size_t recv_pieces = hr ? (hr->bytes + max_piece - 1) / max_piece : 0;
  rs.reserve(2 + send_pieces + recv_pieces);
  bool checked = hr == nullptr;
  bool header_in = false;  // the header arrived (and was checked, or refused)
  try {
    // Receive first: the header, whose check decides whether the payload is taken.
    if (hr)
      check(MPI_Irecv(&in, sizeof in, MPI_BYTE, from, tags(*hr, w).first, st_->comm, rs.add(from, role::header)),
            "MPI_Irecv", at);
    if (hs) {
      header x = *hs;
      x.fp.context = context_;
      out = toolkit::wire::frame::of(toolkit::wire::kind::message, x);
      const auto [th, tp_bound] = tags(*hs, w);
      const int tp = tp_bound;  // a lambda may not capture a structured binding before clang 16
      check(MPI_Isend(&out, sizeof out, MPI_BYTE, to, th, st_->comm, rs.add(to, role::send)), "MPI_Isend", at);
      pieces(hs->bytes, [&](std::size_t off, int n) {
        check(MPI_Isend(sdata + off, n, MPI_BYTE, to, tp, st_->comm, rs.add(to, role::send)), "MPI_Isend", at);
      });
    }
    const std::size_t first_other = hr ? 1 : 0;
    const auto started = std::chrono::steady_clock::now();
    unsigned polls = 0;
    bool told = false;
    std::string suspect;  // a waiting notice that shows a disagreement, unless the header comes
    drive(w, h, hr ? from : to, hr && hs && to != from ? to : -1, hr ? "to receive from" : "to deliver to", [&] {
      if (!checked && hr->fp.coll != collective::send_recv && ++polls % 64 == 0 &&
          std::chrono::steady_clock::now() - started > waiting_notice_after) {
        // Ranks that disagree about a call can each wait to receive from the other (two ranks
        // that each take the other for the root, or a cycle): say what this rank waits for, and
        // look at what the peer says. A notice arrives on its own tag, so the header it would
        // follow may still be on its way: believe it only if the header is still missing at
        // the next look.
        if (!suspect.empty()) throw mismatch_error(suspect);
        if (!told) tell_waiting(hr->fp);
        told = true;
        suspect = waiting_notice(from, *hr, w);
      }
      if (!checked) {
        int done = 0;
        MPI_Status status;
        check(MPI_Test(&rs[0], &done, &status), "MPI_Test", at);
        if (done) {
          header_in = true;
          header want = *hr;
          want.fp.context = context_;
          toolkit::check_header(want, rank_, in.head(), from, w.algorithm);
          checked = true;
          const int tp = tags(*hr, w).second;
          pieces(hr->bytes, [&](std::size_t off, int n) {
            check(MPI_Irecv(rdata + off, n, MPI_BYTE, from, tp, st_->comm, rs.add(from, role::payload)), "MPI_Irecv",
                  at);
          });
        }
      }
      const bool rest = rs.test(first_other, at);  // the sends, and the payload once posted
      return checked && rest;
    });
  } catch (...) {
    // A refused header's payload is still coming: take it (see `settle`).
    const std::uint64_t refused = header_in && !checked ? in.bytes : 0;
    if (const std::size_t left = settle(rs, w, tag_pair, in, refused ? from : -1, refused))
      rethrow_noting(" [and " + std::to_string(left) + " of its MPI requests (sends or receives of the payload) "
                     "could not be completed within " + std::to_string(settle_within.count()) +
                     " s after the failure: MPI may still read or write this call's buffers; end the job rather "
                     "than carry on]");
    throw;
  }
}

inline std::size_t mpi::settle(detail::mpi_impl::request_set& rs, const wait_context& w, std::pair<int, int> tag_pair,
                               const detail::mpi_impl::wire_header& in, int refused_from, std::uint64_t refused_bytes) {
  using namespace detail::mpi_impl;
  using role = request_set::role;
  using clock = std::chrono::steady_clock;
  if (finalized()) return 0;
  auto drain = [&](int peer, std::uint64_t bytes) {
    pieces(bytes, [&](std::size_t, int) {
      MPI_Irecv(nullptr, 0, MPI_BYTE, peer, tag_pair.second, st_->comm, rs.add(peer, role::payload));
    });
  };
  if (refused_from >= 0) drain(refused_from, refused_bytes);
  if (rs.size() > 0 && rs.at(0).r == role::header && rs[0] != MPI_REQUEST_NULL) MPI_Cancel(&rs[0]);
  const auto start = clock::now();
  const std::chrono::milliseconds bound = settle_bound(w);
  int cancelled_from = -1;  // the peer whose header this rank no longer waits for
  for (unsigned round = 0;; ++round) {
    bool left = false;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      auto& e = rs.at(i);
      if (e.req == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Status status{};
      if (MPI_Test(&e.req, &done, &status) != MPI_SUCCESS) {  // ended in error (a drain's truncation)
        e.req = MPI_REQUEST_NULL;
        continue;
      }
      if (done) {
        int cancelled = 0;
        if (e.r != role::header || MPI_Test_cancelled(&status, &cancelled) != MPI_SUCCESS) continue;
        if (cancelled) cancelled_from = e.peer;
        else drain(e.peer, in.bytes);  // matched before the cancel: its payload comes (`e` may move)
        continue;
      }
      if (e.r == role::send && round % 16 == 0 && peer_failed(e.peer)) {
        st_->kept.push_back(e.req);  // never taken: see above
        e.req = MPI_REQUEST_NULL;
        continue;
      }
      left = true;
    }
    if (!left) {
      if (!st_->kept.empty()) st_->broken = true;  // so its MPI handle is kept too
      return 0;
    }
    if (round % 16 == 0) {  // take the headers of the peer it gave up on, and of those it sends to
      std::vector<int> peers;
      if (cancelled_from >= 0) peers.push_back(cancelled_from);
      for (std::size_t i = 0; i < rs.size(); ++i)
        if (rs.at(i).r == role::send && rs[i] != MPI_REQUEST_NULL) peers.push_back(rs.at(i).peer);
      std::sort(peers.begin(), peers.end());
      peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
      for (const int peer : peers) {
        int flag = 0;
        MPI_Status status;
        if (MPI_Iprobe(peer, tag_pair.first, st_->comm, &flag, &status) != MPI_SUCCESS || !flag) continue;
        wire_header theirs{};
        if (MPI_Recv(&theirs, sizeof theirs, MPI_BYTE, peer, tag_pair.first, st_->comm, MPI_STATUS_IGNORE) ==
            MPI_SUCCESS)
          drain(peer, theirs.bytes);
      }
    }
    const auto now = clock::now();
    if (now - start > bound) break;
    if (now - start > std::chrono::milliseconds(20)) std::this_thread::sleep_for(std::chrono::microseconds(100));
    else std::this_thread::yield();
  }
  std::size_t kept = 0;
  for (std::size_t i = 0; i < rs.size(); ++i)
    if (rs[i] != MPI_REQUEST_NULL) {
      st_->kept.push_back(rs[i]);
      rs[i] = MPI_REQUEST_NULL;
      ++kept;
    }
  st_->broken = true;  // so its MPI handle is kept too
  return kept;
}

}  // namespace tutti
