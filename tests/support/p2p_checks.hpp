// Point-to-point checks beyond the conformance part (include/tutti/testing/p2p.hpp) that need
// real processes and a transport's own timing, shared by the shm and tcp process tests.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <tutti/tutti.hpp>
#include <vector>

namespace tutti::test {

/// Rank 0's first send of a message too large to go eagerly times out before rank 1 receives;
/// rank 1's receive, posted later, must get the second send, not wait for the first one's data.
template <class Comm>
void check_given_up_rendezvous(Comm& comm) {
  const int me = comm.rank();
  std::vector<float> v(100000, me == 0 ? 1.0f : -1.0f);
  comm.barrier();
  if (me == 0) {
    comm.set_timeout(std::chrono::milliseconds(200));
    auto first = comm.isend(view(v), 1, 8);
    CHECK_THROWS_AS(first.wait(), timeout_error);
    comm.set_timeout(std::chrono::seconds(60));
    std::fill(v.begin(), v.end(), 2.0f);
    comm.send(view(v), 1, 8);
  } else if (me == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    const recv_status st = comm.recv(view(v), 0, 8);
    CHECK(st.count == v.size());
    CHECK(v.front() == 2.0f);
    CHECK(v.back() == 2.0f);
  }
  comm.barrier();
}

/// Rank 1 gives up a receive (its deadline) after it cleared rank 0's rendezvous message, while
/// rank 0 does not drive its send: rank 0's send then fails saying so, rather than writing the
/// message to no one and reporting success, and the next message of that tag is received whole.
template <class Comm>
void check_given_up_receive(Comm& comm) {
  const int me = comm.rank();
  std::vector<float> v(100000, me == 0 ? 1.0f : -1.0f);
  comm.barrier();
  if (me == 0) {
    auto first = comm.isend(view(v), 1, 9);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    std::string what = "no error";
    try {
      first.wait();
    } catch (const error& e) {
      what = e.what();
    }
    CAPTURE(what);
    CHECK(what.find("gave its receive up") != std::string::npos);
    std::fill(v.begin(), v.end(), 2.0f);
    comm.send(view(v), 1, 9);
  } else if (me == 1) {
    comm.set_timeout(std::chrono::milliseconds(200));
    auto r = comm.irecv(view(v), 0, 9);
    CHECK_THROWS_AS(r.wait(), timeout_error);
    comm.set_timeout(std::chrono::seconds(60));
    const recv_status st = comm.recv(view(v), 0, 9);
    CHECK(st.count == v.size());
    CHECK(v.front() == 2.0f);
    CHECK(v.back() == 2.0f);
  }
  comm.barrier();
}

/// Point-to-point within groups of their own (the even and the odd ranks), each a ring of
/// isend right and recv left, beside the world's.
template <class Comm>
void check_group_p2p(Comm& comm) {
  auto group = *comm.split(comm.rank() % 2, comm.rank());
  const int me = group.rank(), n = group.size();
  if (n == 1) {
    comm.barrier();
    return;
  }
  std::vector<int> out(70000, comm.rank()), in(70000, -1);  // past the eager sizes
  auto s = group.isend(view(out), (me + 1) % n, 3);
  const recv_status st = group.recv(view(in), (me + n - 1) % n, 3);
  s.wait();
  const int left_world = (comm.rank() % 2) + 2 * ((me + n - 1) % n);
  CHECK(st.source == (me + n - 1) % n);
  CHECK(in.front() == left_world);
  CHECK(in.back() == left_world);
  comm.barrier();
}

}  // namespace tutti::test
