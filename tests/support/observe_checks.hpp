// The hooks (on_start, on_end) and the counters (stats) of a communicator, as one body that the
// thread flavour (tests/group/observe.cpp) and the process flavours (tests/multiproc/
// shm_collectives.cpp, tcp_collectives.cpp) run on their world. It leaves no hook set.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <tutti/tutti.hpp>
#include <vector>

namespace tutti::test {

struct seen_event {
  std::string name, algorithm;
  std::uint64_t seq = 0;
  std::size_t bytes = 0;
  int peer = -1;
  bool posted = false;
  std::int64_t start_ns = 0, end_ns = 0;
};

inline seen_event copy_event(const op_event& e) {
  return {std::string(e.name), std::string(e.algorithm), e.fp ? e.fp->seq : 0, e.bytes, e.peer, e.posted,
          e.start_ns, e.end_ns};
}

inline std::uint64_t calls_of(const comm_stats& s, std::string_view name) {
  const op_totals* t = s.find(name);
  return t ? t->calls : 0;
}

template <class Comm>
void check_observe(Comm& comm) {
  using namespace std::chrono_literals;
  const int me = comm.rank(), p = comm.size();
  std::vector<seen_event> starts, ends;
  comm.on_start([&](const op_event& e) { starts.push_back(copy_event(e)); });
  comm.on_end([&](const op_event& e) {
    CHECK(e.error == nullptr);
    ends.push_back(copy_event(e));
  });
  const comm_stats before = comm.stats();

  std::vector<float> v(1000, 1.0f);
  comm.all_reduce(view(v));
  comm.broadcast(view(v), 0);
  comm.barrier();
  const bool pair = p >= 2 && me <= 1;
  if (pair) {
    if (me == 0) comm.send(view(v), 1, 7);
    else comm.recv(view(v), 0, 7);
  }
  auto r = comm.iall_reduce(view(v));
  r.wait();

  const std::vector<std::string> names = pair ? std::vector<std::string>{"all_reduce", "broadcast", "barrier",
                                                                          me == 0 ? "send" : "recv", "all_reduce"}
                                              : std::vector<std::string>{"all_reduce", "broadcast", "barrier", "all_reduce"};
  REQUIRE(starts.size() == names.size());
  REQUIRE(ends.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    INFO("rank " << me << " of " << p << ", operation " << i << " (" << names[i] << ")");
    CHECK(starts[i].name == names[i]);
    CHECK(ends[i].name == names[i]);
    CHECK(ends[i].seq == starts[i].seq);
    CHECK(starts[i].end_ns == 0);
    CHECK(ends[i].start_ns == starts[i].start_ns);
    CHECK(ends[i].end_ns >= ends[i].start_ns);
    CHECK(!ends[i].algorithm.empty());
    if (i > 0) CHECK(ends[i].start_ns >= ends[i - 1].end_ns);
  }
  if (p > 1) {  // a one-rank call is a copy, named but not scheduled
    CHECK(ends[0].bytes == v.size() * sizeof(float));
    CHECK(ends[1].seq == ends[0].seq + 1);
  }
  if (pair) {
    CHECK(ends[3].peer == 1 - me);
    CHECK(ends[3].algorithm == "p2p");
    CHECK(ends[3].bytes == v.size() * sizeof(float));
  }
  CHECK(!ends[names.size() - 2].posted);
  CHECK(ends.back().posted);  // iall_reduce ran on the progress engine

  // Removed hooks are not called; the counters go on.
  comm.on_start({});
  comm.on_end({});
  comm.barrier();
  CHECK(starts.size() == names.size());

  const comm_stats after = comm.stats();
  CHECK(after.rank == me);
  CHECK(after.size == p);
  CHECK(calls_of(after, "all_reduce") == calls_of(before, "all_reduce") + 2);
  CHECK(calls_of(after, "barrier") == calls_of(before, "barrier") + 2);
  CHECK(calls_of(after, "broadcast") == calls_of(before, "broadcast") + 1);
  if (pair) CHECK(calls_of(after, me == 0 ? "send" : "recv") == calls_of(before, me == 0 ? "send" : "recv") + 1);
  const op_totals* ar = after.find("all_reduce");
  REQUIRE(ar != nullptr);
  CHECK(ar->bytes - (before.find("all_reduce") ? before.find("all_reduce")->bytes : 0) == 2 * v.size() * sizeof(float));
  CHECK(after.waited.size() == static_cast<std::size_t>(p));
  CHECK(after.text().find("all_reduce") != std::string::npos);

  // A rank that comes late: every other rank waits (for it, or for a peer that waits for it);
  // the late one hardly waits. At two ranks the other names it its slowest peer.
  if (p > 1) {
    const int late = p - 1;
    const comm_stats w0 = comm.stats();
    if (me == late) std::this_thread::sleep_for(300ms);
    comm.all_reduce(view(v));
    const comm_stats w1 = comm.stats();
    std::int64_t most = 0, total = (w1.waited_for_all - w0.waited_for_all).count();
    int slowest = -1;
    for (int q = 0; q < p; ++q) {
      const auto d = (w1.waited[static_cast<std::size_t>(q)] - w0.waited[static_cast<std::size_t>(q)]).count();
      total += d;
      if (d > most) most = d, slowest = q;
    }
    INFO("rank " << me << " of " << p << ": " << w1.text());
    if (me != late) CHECK(total >= 200'000'000);
    else CHECK(total < 200'000'000);
    if (p == 2 && me != late) CHECK(slowest == late);
    if (p == 2 && me != late) CHECK(w1.slowest_peer == late);
  }
}

}  // namespace tutti::test
