/// \file
/// What the copies of a `tutti::mpi` transport share (`comm_state`: the MPI communicator, its tag
/// bound, the notices being sent, the requests a failed call gave up on) and how it ends: a
/// communicator in good order drops the notices nobody read and is freed; a broken one is kept,
/// never freed, with the buffers MPI may still read (`keep_until_exit`). And the requests of one
/// blocking call (`request_set`), which a failed call hands to `mpi::settle`.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tutti/transport/mpi/errors.hpp"
#include "tutti/transport/mpi/protocol.hpp"

namespace tutti::detail::mpi_impl {

/// Buffers of waiting notices that a broken communicator gave up on while MPI may still read
/// them: they live as long as the process, reachable from here (so leak checkers, rightly, do not
/// call them leaks).
template <class T>
void keep_until_exit(std::unique_ptr<T[]> buf) {
  static std::mutex m;
  static auto* kept = new std::vector<std::unique_ptr<T[]>>;
  std::lock_guard lock(m);
  kept->push_back(std::move(buf));
}

struct p2p_op;  // mpi/matching.hpp

/// One transport's communicator and what its copies share.
struct comm_state {
  MPI_Comm comm = MPI_COMM_NULL;
  /// Point-to-point matched by source and tag (mpi/matching.hpp): a duplicate of `comm` of its
  /// own, so that MPI_ANY_TAG never takes the transport's frames and notices; under `p2p_mu`,
  /// every operation pending (for the flight record).
  MPI_Comm p2p = MPI_COMM_NULL;
  std::mutex p2p_mu;
  std::vector<std::shared_ptr<p2p_op>> p2p_live;
  int tag_ub = 32767;
  bool oversubscribed = false;  // more ranks on this host than cores
  bool broken = false;           // a collective failed on it (`fail` was called)
  std::vector<std::unique_ptr<std::string>> notices;  // failure notices being sent (kept alive)
  /// Waiting notices being sent: each buffer lives until its send completes.
  std::vector<std::pair<MPI_Request, std::unique_ptr<std::uint64_t[]>>> waiting;
  std::uint64_t told[fp_words] = {};  // the fingerprint this rank last sent waiting notices for
  std::vector<int> lost;        // ranks whose failure notice this rank has read
  /// Requests a failed call gave up on (`mpi::settle`, `mpi::complete`): never freed, and their
  /// communicator is marked broken, so that it is never freed either.
  std::vector<MPI_Request> kept;

  comm_state() = default;
  comm_state(const comm_state&) = delete;
  comm_state& operator=(const comm_state&) = delete;
  ~comm_state() {
    if (comm == MPI_COMM_NULL || finalized()) return;
    // A communicator that failed may still have messages in flight to and from it. Freed, its
    // context id could go to a later communicator, which would then match them (seen: a stale
    // failure notice raising peer_lost in the next communicator): keep it instead.
    if (broken) {
      for (auto& [req, buf] : waiting) {
        MPI_Request_free(&req);
        keep_until_exit(std::move(buf));  // MPI may still read it
      }
      return;
    }
    for (int tag : {tag_failure, tag_waiting})
      for (int flag = 1; flag;) {  // notices nobody waited for
        MPI_Status st;
        // The status is written only when a message is there (flag): read nothing from it else.
        if (MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &flag, &st) != MPI_SUCCESS || !flag) break;
        int n = 0;
        if (MPI_Get_count(&st, MPI_CHAR, &n) != MPI_SUCCESS || n < 0 || n > (1 << 20)) break;  // notices are < 4 KiB
        std::string drop(static_cast<std::size_t>(n), '\0');
        MPI_Recv(drop.data(), n, MPI_CHAR, st.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE);
      }
    for (auto& [req, buf] : waiting) MPI_Wait(&req, MPI_STATUS_IGNORE);  // 48 bytes: sent eagerly
    if (p2p != MPI_COMM_NULL) MPI_Comm_free(&p2p);  // (operations still pending complete first)
    MPI_Comm_free(&comm);  // local in practice; our own notices were sent eagerly
  }
};

/// The requests of one blocking call, each with the rank at its other end and its role. A call
/// that fails hands them to `mpi::settle` before the error leaves it; one that returns has
/// completed them all. (Nothing is freed here: an active request freed is one MPI completes
/// later, into or out of buffers the caller has freed by then.)
class request_set {
 public:
  enum class role : std::uint8_t { header, payload, send };  // header: the receive of a header
  struct entry {
    MPI_Request req;
    int peer;
    role r;
  };
  request_set() = default;
  request_set(const request_set&) = delete;
  request_set& operator=(const request_set&) = delete;
  /// Room for n requests (each `add` returns a pointer MPI writes the handle through).
  void reserve(std::size_t n) { reqs_.reserve(n); }
  MPI_Request* add(int peer, role r) {
    reqs_.push_back({MPI_REQUEST_NULL, peer, r});
    return &reqs_.back().req;
  }
  std::size_t size() const { return reqs_.size(); }
  MPI_Request& operator[](std::size_t i) { return reqs_[i].req; }
  entry& at(std::size_t i) { return reqs_[i]; }

  /// Tests requests [from, size()); true when all are complete.
  template <class Where>
  bool test(std::size_t from, const Where& where) {
    for (std::size_t i = from; i < reqs_.size(); ++i) {
      if (reqs_[i].req == MPI_REQUEST_NULL) continue;
      int done = 0;
      check(MPI_Test(&reqs_[i].req, &done, MPI_STATUS_IGNORE), "MPI_Test", where);
      if (!done) return false;
    }
    return true;
  }

 private:
  std::vector<entry> reqs_;
};

}  // namespace tutti::detail::mpi_impl
