/// \file
/// The conformance suite's sixth part: point-to-point with matching of its own, for a transport
/// that models `matched_p2p` (the part notes that it skipped any other):
/// - the tutorial's ring: every rank posts `irecv` from its left, then `isend` to its right,
///   then waits, at an eager and a rendezvous size;
/// - 64 sends and 64 receives per rank outstanding at once, to random peers with random tags,
///   eager and rendezvous sizes, posted in a random order: each receive of one source and tag
///   gets that pair's messages in the order sent (MPI's non-overtaking rule);
/// - `any_source` and `any_tag`: every sender's messages arrive, each sender's in the order
///   sent, with `recv_status` saying the source, tag and count; a specific source still takes
///   only that source's message;
/// - a rendezvous `isend` waited for after a collective: the receive completes while the sender
///   is in the collective (the receiver's `recv` comes before its part of it);
/// - a message shorter than the receive buffer is received and its count reported;
/// - a receive of another element type, or of a message longer than its buffer, raises
///   `mismatch_error` naming both ranks and both values; a receive from a silent peer raises
///   `timeout_error` naming it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tutti/core/p2p.hpp"
#include "tutti/core/view.hpp"
#include "tutti/group/request.hpp"
#include "tutti/testing/outcomes.hpp"
#include "tutti/testing/report.hpp"
#include "tutti/transport/capabilities.hpp"

namespace tutti::testing {

namespace p2p_detail {

/// Floats in a message larger than any eager buffer tutti's transports keep (64 KiB).
inline constexpr std::size_t rendezvous_floats = (std::size_t{64} << 10) / sizeof(float) + 1000;

}  // namespace p2p_detail

/// The ring: irecv from the left, isend to the right, then wait.
template <class Comm>
void check_p2p_ring(Comm& comm, report& rep) {
  const int n = comm.size(), r = comm.rank(), left = (r + n - 1) % n, right = (r + 1) % n;
  for (std::size_t m : {std::size_t{1000}, p2p_detail::rendezvous_floats}) {
    const std::string label = "p2p ring of " + std::to_string(m) + " floats on " + std::to_string(n) + " ranks";
    std::vector<float> out(m), in(m, -1.0f);
    for (std::size_t i = 0; i < m; ++i) out[i] = static_cast<float>(r * 1000 + static_cast<int>(i % 1000));
    auto rr = comm.irecv(view(in), left, 3);
    auto rs = comm.isend(view(out), right, 3);
    rr.wait();
    rs.wait();
    const recv_status st = rr.status();
    rep.check(st.source == left && st.tag == 3 && st.count == m, label, r,
              "status: source " + std::to_string(st.source) + ", tag " + std::to_string(st.tag) + ", count " +
                  std::to_string(st.count));
    bool same = true;
    for (std::size_t i = 0; i < m; ++i) same = same && in[i] == static_cast<float>(left * 1000 + static_cast<int>(i % 1000));
    rep.check(same, label, r, "the message from the left differs from what it sent");
  }
}

/// 64 sends and 64 receives per rank (on average) outstanding, in a random order.
template <class Comm>
void check_p2p_outstanding(Comm& comm, report& rep, unsigned seed = 1234) {
  const int n = comm.size(), me = comm.rank();
  const std::string label = "p2p: 64 outstanding in random order on " + std::to_string(n) + " ranks";
  struct msg {
    int from, to, tag;
    std::size_t floats;
  };
  std::mt19937 rng(seed + static_cast<unsigned>(n));  // the same plan on every rank
  std::vector<msg> plan;
  for (int from = 0; from < n; ++from)
    for (int i = 0; i < 64; ++i) {
      int to = static_cast<int>(rng() % static_cast<unsigned>(n - 1));
      if (to >= from) ++to;
      const std::size_t floats = rng() % 3 == 0 ? p2p_detail::rendezvous_floats + rng() % 100 : 1 + rng() % 64;
      plan.push_back({from, to, static_cast<int>(rng() % 4), floats});
    }
  // This rank's sends and receives, posted in a random order of its own. A send's first element
  // is its place among this rank's messages of that (destination, tag), counted when posted; its
  // other elements are the sender's rank.
  std::vector<const msg*> sends, recvs;
  for (const msg& m : plan) {
    if (m.from == me) sends.push_back(&m);
    if (m.to == me) recvs.push_back(&m);
  }
  // Receives of one (source, tag) match in posting order, so each gets the k-th message of its
  // pair, whichever that is: room for the pair's largest.
  std::map<std::pair<int, int>, std::size_t> largest;
  for (const msg* m : recvs) largest[{m->from, m->tag}] = std::max(largest[{m->from, m->tag}], m->floats);
  std::vector<std::vector<float>> outs, ins;
  for (const msg* m : sends) outs.emplace_back(m->floats, static_cast<float>(me));
  for (const msg* m : recvs) ins.emplace_back(largest[{m->from, m->tag}], -1.0f);
  std::vector<std::pair<bool, std::size_t>> order;
  for (std::size_t i = 0; i < sends.size(); ++i) order.push_back({true, i});
  for (std::size_t i = 0; i < recvs.size(); ++i) order.push_back({false, i});
  std::mt19937 shuffle_rng(seed * 7 + static_cast<unsigned>(me));
  std::shuffle(order.begin(), order.end(), shuffle_rng);
  std::map<std::pair<int, int>, int> sent;
  std::vector<request> reqs;
  std::vector<std::size_t> recv_at;  // order of posting -> index into recvs
  std::vector<std::size_t> req_of_recv;
  for (const auto& [is_send, i] : order) {
    if (is_send) {
      outs[i][0] = static_cast<float>(sent[{sends[i]->to, sends[i]->tag}]++);
      reqs.push_back(comm.isend(view(outs[i]), sends[i]->to, sends[i]->tag));
    } else {
      recv_at.push_back(i);
      req_of_recv.push_back(reqs.size());
      reqs.push_back(comm.irecv(view(ins[i]), recvs[i]->from, recvs[i]->tag));
    }
  }
  std::vector<recv_status> status(reqs.size());
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].wait();
    status[i] = reqs[i].status();
  }
  std::map<std::pair<int, int>, int> next;
  for (std::size_t k = 0; k < recv_at.size(); ++k) {
    const msg& m = *recvs[recv_at[k]];
    const recv_status& st = status[req_of_recv[k]];
    const std::vector<float>& got = ins[recv_at[k]];
    const int want = next[{m.from, m.tag}]++;
    const bool ok = st.source == m.from && st.tag == m.tag && st.count >= 1 && st.count <= got.size() &&
                    got[0] == static_cast<float>(want) && (st.count == 1 || got[st.count - 1] == static_cast<float>(m.from));
    rep.check(ok, label, me,
              "receive from rank " + std::to_string(m.from) + " with tag " + std::to_string(m.tag) + " got message #" +
                  std::to_string(static_cast<int>(got[0])) + " of that pair where #" + std::to_string(want) +
                  " was due (status: source " + std::to_string(st.source) + ", tag " + std::to_string(st.tag) +
                  ", count " + std::to_string(st.count) + ")");
  }
  comm.barrier();
}

/// `any_source` and `any_tag`: rank 0 takes every other rank's 40 messages in any order.
template <class Comm>
void check_p2p_any_source(Comm& comm, report& rep) {
  const int n = comm.size(), me = comm.rank();
  const std::string label = "p2p: any_source and any_tag on " + std::to_string(n) + " ranks";
  constexpr int per_sender = 40;
  if (me == 0) {
    std::vector<int> next(static_cast<std::size_t>(n), 0);
    std::vector<std::int64_t> got(3, -1);
    for (int i = 0; i < per_sender * (n - 1); ++i) {
      const recv_status st = comm.recv(view(got), any_source, any_tag);
      const bool known = st.source >= 1 && st.source < n;
      const bool ok = known && st.tag == 100 + st.source && st.count == static_cast<std::size_t>(1 + got[0] % 3) &&
                      got[0] == next[static_cast<std::size_t>(st.source)]++;
      rep.check(ok, label, me,
                "message " + std::to_string(got[0]) + " from rank " + std::to_string(st.source) + " with tag " +
                    std::to_string(st.tag) + " and count " + std::to_string(st.count) + " is not the one due");
    }
  } else {
    for (std::int64_t k = 0; k < per_sender; ++k) {
      std::vector<std::int64_t> v(static_cast<std::size_t>(1 + k % 3), k);
      comm.send(view(v), 0, 100 + me);
    }
  }
  comm.barrier();
  // A specific source takes only that source: the last rank sends after the others' messages
  // have arrived, and rank 0 asks for it first.
  std::vector<std::int64_t> one(1, me);
  if (me == 0) {
    comm.barrier();
    const recv_status st = comm.recv(view(one), n - 1, any_tag);
    rep.check(st.source == n - 1 && st.tag == 7 && one[0] == n - 1, label, me,
              "a receive from rank " + std::to_string(n - 1) + " got rank " + std::to_string(st.source) + "'s message");
    for (int s = 1; s < n - 1; ++s) (void)comm.recv(view(one), any_source, 7);
  } else if (me < n - 1) {
    comm.send(view(one), 0, 7);
    comm.barrier();
  } else {
    comm.barrier();
    comm.send(view(one), 0, 7);
  }
  comm.barrier();
}

/// A message shorter than the receive buffer: received, its count reported, the rest untouched.
template <class Comm>
void check_p2p_shorter(Comm& comm, report& rep) {
  const int me = comm.rank();
  const std::string label = "p2p: a shorter message on " + std::to_string(comm.size()) + " ranks";
  if (me == 0) {
    std::vector<float> three(3, 2.0f);
    comm.send(view(three), 1, 1);
  } else if (me == 1) {
    std::vector<float> five(5, -1.0f);
    const recv_status st = comm.recv(view(five), 0, 1);
    rep.check(st.count == 3 && five[2] == 2.0f && five[3] == -1.0f, label, me,
              "count " + std::to_string(st.count) + ", element 2 = " + std::to_string(five[2]) + ", element 3 = " +
                  std::to_string(five[3]));
  }
  comm.barrier();
}

/// Rank 0 posts a rendezvous `isend` to rank 1, then a barrier, then waits for it; rank 1 receives
/// before its barrier: the message must move while rank 0 is in the collective.
template <class Comm>
void check_p2p_beside_collective(Comm& comm, report& rep) {
  const int me = comm.rank();
  const std::string label = "p2p: a rendezvous isend across a barrier on " + std::to_string(comm.size()) + " ranks";
  std::vector<float> v(p2p_detail::rendezvous_floats, me == 0 ? 7.0f : -1.0f);
  if (me == 0) {
    auto s = comm.isend(view(v), 1, 6);
    comm.barrier();
    s.wait();
  } else {
    if (me == 1) comm.recv(view(v), 0, 6);
    comm.barrier();
    if (me == 1)
      rep.check(v.front() == 7.0f && v.back() == 7.0f, label, me,
                "received " + std::to_string(v.front()) + " ... " + std::to_string(v.back()) + ", not 7");
  }
}

/// The receive's errors: another element type, a longer message, a silent peer.
template <class Runner>
void check_p2p_errors(Runner& run, report& rep, std::chrono::milliseconds silent_deadline) {
  for (int variant = 0; variant < 3; ++variant) {
    const char* what = variant == 0 ? "float sent, int32 expected" : variant == 1 ? "count 6 sent, room for 5" : "silent peer";
    const std::string label = "p2p errors on " + std::to_string(run.size()) + " ranks: " + what;
    // Rank 1 receives (from rank 0, which sends or, for the silent case, waits in the barrier);
    // a failed posted receive leaves the communicator usable, so every rank then meets in a
    // barrier.
    auto body = [&](auto& comm) {
      outcome o;
      comm.set_timeout(variant == 2 && comm.rank() == 1 ? silent_deadline : run.deadline());
      if (comm.rank() == 0 && variant < 2) {
        std::vector<float> v(6, 1.0f);
        auto s = comm.isend(view(v), 1, 4);
        try {
          s.wait();  // completes (eager) or fails with the receive
        } catch (...) {
        }
      } else if (comm.rank() == 1) {
        try {
          if (variant == 0) {
            std::vector<std::int32_t> v(6);
            auto r = comm.irecv(view(v), 0, 4);
            r.wait();
          } else {
            std::vector<float> v(5);
            auto r = comm.irecv(view(v), 0, 4);
            r.wait();
          }
        } catch (...) {
          o.k = classify(std::current_exception(), o.what);
        }
      }
      comm.set_timeout(run.deadline());
      comm.barrier();
      return o;
    };
    const auto out = run.run(body, label);
    if (!run.judges()) continue;
    const outcome& receiver = out[1];
    const kind want = variant == 2 ? kind::timeout : kind::mismatch;
    rep.check(receiver.k == want, label, 1, "the receiver raised " + kind_name(receiver.k) + ": " + receiver.what);
    const auto named = ranks_named(receiver.what);
    rep.check(named.count(0) == 1, label, 1, "its message does not name rank 0: " + receiver.what);
    if (variant == 0)
      rep.check(contains(receiver.what, "dtype=float") && contains(receiver.what, "dtype=int32"), label, 1,
                "its message does not name both element types: " + receiver.what);
    if (variant == 1)
      rep.check(contains(receiver.what, "count=6") && contains(receiver.what, "count=5"), label, 1,
                "its message does not name both counts: " + receiver.what);
  }
}

/// Part 6 (needs two ranks or more, and a transport that models `matched_p2p`).
template <class Runner>
void check_point_to_point(Runner& run, report& rep, std::chrono::milliseconds silent_deadline) {
  if (run.size() < 2) return;
  if constexpr (!matched_p2p<typename Runner::transport_type>) {
    rep.note("point-to-point matching: skipped, the transport does not model matched_p2p");
  } else {
    auto body = [&](auto& comm, report& r) {
      comm.set_timeout(std::chrono::seconds(120));
      check_p2p_ring(comm, r);
      check_p2p_outstanding(comm, r);
      check_p2p_any_source(comm, r);
      check_p2p_shorter(comm, r);
      check_p2p_beside_collective(comm, r);
    };
    run.each(body, rep, "point-to-point on " + std::to_string(run.size()) + " ranks");
    check_p2p_errors(run, rep, silent_deadline);
  }
}

}  // namespace tutti::testing
