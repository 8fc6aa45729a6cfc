// The three programs of examples/point_to_point.cpp, each a function over any communicator whose
// transport matches point-to-point itself (tutti::matched_p2p: inproc, shm, mpi), so that the tests
// run them over processes too (tests/multiproc/mpi_collectives.cpp, shm_collectives.cpp). Each prints one line per
// rank and counts a wrong result in `tutti_examples::wrong`.
#pragma once

#include <tutti/tutti.hpp>

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

namespace tutti_examples {

inline std::mutex print_mu;
inline std::atomic<int> wrong{0};

inline void report(int rank, const char* what, bool ok, const char* detail) {
  std::lock_guard lk(print_mu);
  std::printf("[rank %d] %s: %s%s\n", rank, what, detail, ok ? "" : "  WRONG");
  std::fflush(stdout);
  if (!ok) ++wrong;
}

// 1. The tutorial's ring all-reduce, step for step.
template <class Comm>
void ring_all_reduce(Comm& comm, const std::vector<float>& send, std::vector<float>& recv) {
  const int rank = comm.rank(), size = comm.size();
  std::vector<float> send_buff = send, recv_buff = send, accum = send;
  const int left = (rank - 1 + size) % size, right = (rank + 1) % size;
  for (int i = 0; i < size - 1; ++i) {
    std::vector<float>& out = i % 2 == 0 ? send_buff : recv_buff;
    std::vector<float>& in = i % 2 == 0 ? recv_buff : send_buff;
    tutti::request send_req = comm.isend(tutti::view(out), right);
    comm.recv(tutti::view(in), left);
    for (std::size_t k = 0; k < accum.size(); ++k) accum[k] += in[k];
    send_req.wait();
  }
  recv = accum;
}

template <class Comm>
void ring_example(Comm& comm) {
  const int n = comm.size();
  std::vector<float> mine(4, static_cast<float>(comm.rank() + 1)), all(4);
  ring_all_reduce(comm, mine, all);
  char text[160];
  std::snprintf(text, sizeof text, "ring all-reduce of rank + 1 = [%g %g %g %g]", all[0], all[1], all[2], all[3]);
  report(comm.rank(), "ring", all == std::vector<float>(4, static_cast<float>(n * (n + 1) / 2)), text);
}

// 2. A halo exchange: the tile's edge values go to the 4 neighbours of a periodic px x py grid.
template <class Comm>
void halo_exchange(Comm& comm, int px, int py) {
  const int me = comm.rank(), x = me % px, y = me / px;
  auto at = [&](int i, int j) { return ((j + py) % py) * px + (i + px) % px; };
  enum dir { north, south, east, west };
  const std::array<int, 4> to{at(x, y - 1), at(x, y + 1), at(x + 1, y), at(x - 1, y)};
  // What this rank sends each way: its rank and the direction; a message travelling north
  // arrives at the northern neighbour from its south.
  std::array<std::vector<int>, 4> out, in;
  std::vector<tutti::request> reqs;
  for (int d = 0; d < 4; ++d) {
    out[d] = {me, d};
    in[d] = {-1, -1};
  }
  const std::array<int, 4> opposite{south, north, west, east};
  for (int d = 0; d < 4; ++d) reqs.push_back(comm.irecv(tutti::view(in[d]), to[d], opposite[d]));
  for (int d = 0; d < 4; ++d) reqs.push_back(comm.isend(tutti::view(out[d]), to[d], d));
  tutti::wait_all(reqs);
  bool ok = true;
  for (int d = 0; d < 4; ++d) ok = ok && in[d][0] == to[d] && in[d][1] == opposite[d];
  char text[160];
  std::snprintf(text, sizeof text, "at (%d, %d): north %d, south %d, east %d, west %d", x, y, in[north][0],
                in[south][0], in[east][0], in[west][0]);
  report(me, "halo", ok, text);
}

// 3. Rank 0 squares numbers for the workers until each has sent "done".
template <class Comm>
void manager_workers(Comm& comm) {
  constexpr int ask = 1, answer = 2, done = 3;
  if (comm.rank() == 0) {
    int working = comm.size() - 1, served = 0;
    std::vector<long> q(1);
    while (working > 0) {
      const tutti::recv_status st = comm.recv(tutti::view(q), tutti::any_source, tutti::any_tag);
      if (st.tag == done) {
        --working;
        continue;
      }
      std::vector<long> a{q[0] * q[0]};
      comm.send(tutti::view(a), st.source, answer);
      ++served;
    }
    char text[160];
    std::snprintf(text, sizeof text, "served %d requests", served);
    report(0, "manager", served == 3 * (comm.size() - 1), text);
  } else {
    long sum = 0;
    for (long i = 1; i <= 3; ++i) {
      std::vector<long> q{comm.rank() * 10 + i}, a(1);
      comm.send(tutti::view(q), 0, ask);
      comm.recv(tutti::view(a), 0, answer);
      sum += a[0];
    }
    std::vector<long> bye(1);
    comm.send(tutti::view(bye), 0, done);
    long want = 0;
    for (long i = 1; i <= 3; ++i) want += (comm.rank() * 10 + i) * (comm.rank() * 10 + i);
    char text[160];
    std::snprintf(text, sizeof text, "sum of the squares it was sent: %ld", sum);
    report(comm.rank(), "worker", sum == want, text);
  }
}

// The three in a row, as the multi-process tests run them (the halo on a 2 x 2 grid, at 4 ranks):
// true when every result on this rank was right.
template <class Comm>
bool run_all(Comm& comm) {
  const int before = wrong;
  ring_example(comm);
  if (comm.size() == 4) halo_exchange(comm, 2, 2);  // north and south are one rank
  manager_workers(comm);
  return wrong == before;
}

}  // namespace tutti_examples
