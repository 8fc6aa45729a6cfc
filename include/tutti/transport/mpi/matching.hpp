/// \file
/// Point-to-point matched by source and tag over MPI (`matched_p2p`): MPI's own matching, on a
/// communicator of its own (`comm_state::p2p`, a duplicate, so that `any_tag` never takes the
/// transport's frames and notices). A message is one MPI message: a 16-byte header (the dtype and
/// the count) and the payload, sent and received as one struct datatype over the two, so no byte
/// is copied. A receive is an `MPI_Irecv` posted at once (source or `MPI_ANY_SOURCE`, tag or
/// `MPI_ANY_TAG`) for the header and the whole buffer, so MPI's rules decide which message it
/// takes and MPI progresses it; a message longer than the buffer ends it with MPI_ERR_TRUNCATE
/// (the header came whole: the error names both counts). MPI decides eager and rendezvous.
///
/// Members of `tutti::mpi`, defined here out of its class (mpi/transport.hpp, which includes
/// this file at its end).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/detail/operation.hpp"
#include "tutti/transport/mpi/transport.hpp"
#include "tutti/transport/toolkit.hpp"

namespace tutti {

namespace detail::mpi_impl {

/// What travels before a message's payload.
struct p2p_header {
  std::uint32_t dtype = 0, elem_size = 0;
  std::uint64_t count = 0;
};
static_assert(sizeof(p2p_header) == 16);

/// A posted send or receive.
struct p2p_op {
  bool send = false;
  int peer = 0, tag = 0;  // a receive's may be any_source / any_tag
  dtype type;
  std::size_t count = 0, bytes = 0;  // a receive's: its buffer's
  std::byte* data = nullptr;
  p2p_header head;  // a send's, or what a receive got
  MPI_Request req = MPI_REQUEST_NULL;
  int source = -1, got_tag = -1;  // a receive: the message's
  std::chrono::steady_clock::time_point posted = std::chrono::steady_clock::now();
};

/// The datatype of one message: the header at `head`, then `bytes` at `data` (absolute
/// addresses, used with MPI_BOTTOM). The caller frees it once the operation is posted.
inline MPI_Datatype message_type(p2p_header* head, std::byte* data, std::size_t bytes, const std::string& where) {
  int lens[2] = {static_cast<int>(sizeof(p2p_header)), static_cast<int>(bytes)};
  MPI_Aint at[2];
  check(MPI_Get_address(head, &at[0]), "MPI_Get_address", where);
  check(MPI_Get_address(data ? static_cast<void*>(data) : static_cast<void*>(head), &at[1]), "MPI_Get_address", where);
  MPI_Datatype types[2] = {MPI_BYTE, MPI_BYTE};
  MPI_Datatype t = MPI_DATATYPE_NULL;
  check(MPI_Type_create_struct(bytes ? 2 : 1, lens, at, types, &t), "MPI_Type_create_struct", where);
  check(MPI_Type_commit(&t), "MPI_Type_commit", where);
  return t;
}

}  // namespace detail::mpi_impl

inline std::shared_ptr<detail::operation_state> mpi::post_send(const p2p_post& p) { return post_p2p(p, true); }

inline std::shared_ptr<detail::operation_state> mpi::post_recv(const p2p_post& p) { return post_p2p(p, false); }

inline std::shared_ptr<detail::operation_state> mpi::post_p2p(const p2p_post& p, bool send) {
  using namespace detail::mpi_impl;
  auto e = std::make_shared<p2p_op>();
  e->send = send;
  e->peer = p.peer;
  e->tag = p.tag;
  e->type = p.type;
  e->count = p.count;
  e->bytes = p.bytes;
  e->data = p.data;
  if (send) e->head = {p.type.id, p.type.size, p.count};
  check_p2p_post(*e);
  const std::string where = p2p_where(*e);
  MPI_Datatype t = message_type(&e->head, p.data, p.bytes, where);
  const int rc = send ? MPI_Isend(MPI_BOTTOM, 1, t, p.peer, p.tag, st_->p2p, &e->req)
                      : MPI_Irecv(MPI_BOTTOM, 1, t, p.peer == any_source ? MPI_ANY_SOURCE : p.peer,
                                  p.tag == any_tag ? MPI_ANY_TAG : p.tag, st_->p2p, &e->req);
  MPI_Type_free(&t);
  check(rc, send ? "MPI_Isend" : "MPI_Irecv", where);
  return p2p_state(e, p);
}

inline void mpi::check_p2p_post(const detail::mpi_impl::p2p_op& e) const {
  if (e.tag != any_tag && e.tag > st_->tag_ub)
    throw usage_error(p2p_where(e) + ": tag " + std::to_string(e.tag) + " is above this MPI's largest, " +
                      std::to_string(st_->tag_ub) + " (MPI_TAG_UB)");
  if (e.bytes > static_cast<std::size_t>(INT_MAX) - sizeof(detail::mpi_impl::p2p_header))
    throw usage_error(p2p_where(e) + ": a message of " + std::to_string(e.bytes) +
                      " bytes; over MPI, point-to-point messages are at most 2 GiB - 16 bytes");
}

inline std::string mpi::p2p_where(const detail::mpi_impl::p2p_op&) const {
  return "send/recv(p2p) on rank " + std::to_string(rank_);
}

inline std::shared_ptr<detail::operation_state> mpi::p2p_state(const std::shared_ptr<detail::mpi_impl::p2p_op>& e,
                                                               const p2p_post& p) {
  using namespace detail::mpi_impl;
  using clock = std::chrono::steady_clock;
  {
    std::lock_guard lk(st_->p2p_mu);
    st_->p2p_live.push_back(e);
  }
  auto s = std::make_shared<detail::operation_state>();
  // Only the request's holder polls it: it tests its MPI request and completes its state.
  s->poll = [t = *this, e, timeout = p.timeout, aborted = p.aborted, deadline = clock::time_point{}](
                detail::operation_state& st) mutable {
    const auto now = clock::now();
    if (deadline == clock::time_point{}) deadline = now + timeout;
    std::exception_ptr why;
    bool done = false;
    try {
      int flag = 0;
      MPI_Status status;
      const int rc = MPI_Test(&e->req, &flag, &status);
      int cls = rc;
      if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
      if (!e->send && cls == MPI_ERR_TRUNCATE) {  // the header came whole: the mismatch names both counts
        flag = 1;
      } else {
        check(rc, "MPI_Test", t.p2p_where(*e));
      }
      done = flag != 0;
      if (done && !e->send) {
        e->source = status.MPI_SOURCE;
        e->got_tag = status.MPI_TAG;
        why = t.p2p_received(*e, st);
      }
      if (!done && aborted && aborted->load(std::memory_order_acquire))
        throw error(errc::aborted, t.p2p_where(*e) + ": the communicator was aborted (communicator::abort)");
      if (!done && now >= deadline) {
        throw timeout_error(toolkit::timeout_text(toolkit::p2p_header(e->type, e->count, e->tag, e->bytes), "p2p", "rank " + std::to_string(t.rank_), timeout,
                                                  e->send ? "to take delivery from" : "to receive from",
                                                  e->peer == any_source ? "any rank" : "rank " + std::to_string(e->peer)));
      }
    } catch (...) {
      why = std::current_exception();
    }
    if (!done && !why) return;
    if (!done && !e->send) {  // a receive given up: cancelled, unless its message came meanwhile
      MPI_Cancel(&e->req);
      MPI_Status status;
      MPI_Wait(&e->req, &status);
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      if (!cancelled) {
        done = true;
        e->source = status.MPI_SOURCE;
        e->got_tag = status.MPI_TAG;
        why = t.p2p_received(*e, st);
      }
    }
    {
      std::lock_guard lk(t.st_->p2p_mu);
      auto& live = t.st_->p2p_live;
      live.erase(std::remove(live.begin(), live.end(), e), live.end());
      // A send given up: MPI may still read its bytes; the request is kept, never freed.
      if (!done && e->req != MPI_REQUEST_NULL) t.st_->kept.push_back(e->req);
    }
    detail::complete(st, why);
  };
  return s;
}

inline std::exception_ptr mpi::p2p_received(const detail::mpi_impl::p2p_op& e, detail::operation_state& st) const {
  const dtype sent{e.head.dtype, e.head.elem_size};
  const std::string wrong = toolkit::p2p_mismatch(e.source, rank_, e.got_tag, sent, e.head.count, e.type, e.count);
  if (!wrong.empty()) return std::make_exception_ptr(mismatch_error(wrong));
  st.status = recv_status{e.source, e.got_tag, static_cast<std::size_t>(e.head.count)};
  return nullptr;
}

inline std::vector<std::string> mpi::pending_p2p() const {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> out;
  std::lock_guard lk(st_->p2p_mu);
  for (const auto& e : st_->p2p_live)
    out.push_back(toolkit::p2p_pending_line(e->send, e->peer == any_source ? "any rank" : "rank " + std::to_string(e->peer),
                                            e->tag, e->bytes, now - e->posted));
  return out;
}

}  // namespace tutti
