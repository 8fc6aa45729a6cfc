// tuttirun's hang report (tools/tuttirun/hang_report.hpp) from made-up flight records: who is in
// the oldest call, who never entered it and why, calls made differently, and the cause line.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tuttirun/hang_report.hpp"

using namespace tuttirun;
using tutti::detail::flight_state;

namespace {

constexpr std::int64_t s = 1'000'000'000;  // one second in ns
constexpr std::int64_t now = 1000 * s;

flight_op op(tutti::collective c, std::uint64_t seq, flight_state st, std::int64_t start, std::uint64_t count = 1000) {
  flight_op o;
  o.fp.coll = c;
  o.fp.seq = seq;
  o.fp.count = count;
  o.fp.dtype = tutti::dtype_of<float>().id;
  o.fp.elem_size = 4;
  o.algorithm = "ring";
  o.start_ns = start;
  o.end_ns = st == flight_state::running ? 0 : start + 1000;
  o.state = st;
  return o;
}

flight_process rank_with(int r, int size, std::vector<flight_op> ops, std::string status = "running") {
  flight_process p;
  p.job_rank = r;
  p.pid = 100 + r;
  p.status = std::move(status);
  p.source = "live";
  p.has_records = true;
  flight_comm c;
  c.rank = r;
  c.size = size;
  c.ops = std::move(ops);
  c.total = c.ops.size();
  p.comms.push_back(c);
  return p;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("tuttirun hang report: names the rank that never entered the call the others wait in") {
  using tutti::collective;
  std::vector<flight_process> procs;
  for (int r : {0, 1, 3})
    procs.push_back(rank_with(r, 4, {op(collective::barrier, 2, flight_state::done, now - 20 * s),
                                     op(collective::all_reduce, 3, flight_state::running, now - 12 * s)}));
  procs.push_back(rank_with(2, 4, {op(collective::barrier, 2, flight_state::done, now - 20 * s)}, "stopped by SIGSTOP"));
  const std::string text = hang_report(procs, now);
  INFO(text);
  CHECK(has(text, "communicator 0 (4 ranks):"));
  CHECK(has(text, "oldest call some rank is in: all_reduce(ring) #3 count=1000"));
  CHECK(has(text, "in it (up to 12.0 s): rank 0, rank 1, rank 3"));
  CHECK(has(text, "never entered it: rank 2 [stopped by SIGSTOP]: last finished barrier(ring) #2"));
  CHECK(has(text, "20.0 s ago; in its own code since"));
  CHECK(has(text, "cause: communicator 0: rank 2 [stopped by SIGSTOP] has not entered all_reduce(ring) #3"));
}

TEST_CASE("tuttirun hang report: calls made differently are shown side by side") {
  using tutti::collective;
  std::vector<flight_process> procs;
  for (int r = 0; r < 3; ++r)
    procs.push_back(rank_with(r, 3, {op(collective::all_reduce, 5, flight_state::failed, now - s, r == 1 ? 999 : 1000)}));
  const std::string text = hang_report(procs, now);
  INFO(text);
  CHECK(has(text, "the ranks called it differently:"));
  CHECK(has(text, "rank 1: all_reduce(ring) #5 count=999"));
  CHECK(has(text, "rank 0: all_reduce(ring) #5 count=1000"));
  CHECK(has(text, "cause: communicator 0: the ranks called #5 with different arguments"));
}

TEST_CASE("tuttirun hang report: the call ranks failed in comes before an earlier one a slow rank is still in") {
  // Ranks 2 and 3 found their counts differ in all_reduce #3 and failed; rank 1 has not yet left
  // barrier #2 (a loaded machine), which is no hang.
  using tutti::collective;
  std::vector<flight_process> procs;
  procs.push_back(rank_with(0, 4, {op(collective::barrier, 2, flight_state::done, now - 2 * s),
                                   op(collective::all_reduce, 3, flight_state::running, now - s)}));
  procs.push_back(rank_with(1, 4, {op(collective::barrier, 2, flight_state::running, now - 2 * s)}));
  for (int r : {2, 3})
    procs.push_back(rank_with(r, 4, {op(collective::barrier, 2, flight_state::done, now - 2 * s),
                                     op(collective::all_reduce, 3, flight_state::failed, now - s, r == 2 ? 999 : 1000)}));
  const std::string text = hang_report(procs, now);
  INFO(text);
  CHECK(has(text, "oldest call some rank failed in: all_reduce(ring) #3"));
  CHECK(has(text, "rank 2: all_reduce(ring) #3 count=999"));
  CHECK(has(text, "rank 3: all_reduce(ring) #3 count=1000"));
  CHECK(has(text, "never entered it: rank 1: in barrier(ring) #2"));
  CHECK(has(text, "cause: communicator 0: the ranks called #3 with different arguments"));
}

TEST_CASE("tuttirun hang report: a rank blocked in another communicator, and a rank without records") {
  using tutti::collective;
  std::vector<flight_process> procs;
  procs.push_back(rank_with(0, 3, {op(collective::broadcast, 7, flight_state::running, now - 5 * s)}));
  flight_process one = rank_with(1, 3, {op(collective::broadcast, 6, flight_state::done, now - 9 * s)});
  flight_comm group;
  group.rank = 0;
  group.size = 2;
  group.context = 42;
  group.ops = {op(collective::all_gather, 0, flight_state::running, now - 4 * s)};
  one.comms.push_back(group);
  procs.push_back(one);
  flight_process dead;
  dead.job_rank = 2;
  dead.pid = 102;
  dead.status = "was killed by signal 9 (SIGKILL)";
  dead.source = "exited without saving its records";
  procs.push_back(dead);
  const std::string text = hang_report(procs, now);
  INFO(text);
  CHECK(has(text, "never entered it: rank 1: blocked in communicator 42: all_gather(ring) #0"));
  CHECK(has(text, "no record: rank 2 [was killed by signal 9 (SIGKILL); exited without saving its records]"));
  CHECK(has(text, "cause: communicator 0: rank 1 has not entered broadcast(ring) #7"));
  CHECK(has(text, "cause: communicator 0: rank 2 [was killed by signal 9 (SIGKILL); exited without saving its records] left no records"));
  // The group itself: one member, in its call alone; the other never made it.
  CHECK(has(text, "communicator 42 (2 ranks):"));
}

TEST_CASE("tuttirun hang report: nobody in a call") {
  using tutti::collective;
  const std::vector<flight_process> procs = {rank_with(0, 2, {op(collective::barrier, 0, flight_state::done, now - s)}),
                                             rank_with(1, 2, {op(collective::barrier, 0, flight_state::done, now - s)})};
  CHECK(hang_report(procs, now) == "no rank is in a tutti call\n");
}

TEST_CASE("tuttirun hang report: a grown world beside the old one is a communicator of its own") {
  using tutti::collective;
  // Both worlds have context 0; the old one (2 ranks) is done, the grown one (3) waits for rank 2.
  std::vector<flight_process> procs;
  for (int r : {0, 1}) {
    flight_process p = rank_with(r, 2, {op(collective::barrier, 9, flight_state::done, now - 30 * s)});
    flight_comm grown;
    grown.rank = r;
    grown.size = 3;
    grown.ops = {op(collective::all_reduce, 0, flight_state::running, now - 6 * s)};
    p.comms.push_back(grown);
    procs.push_back(p);
  }
  procs.push_back(rank_with(2, 3, {}));
  const std::string text = hang_report(procs, now);
  INFO(text);
  CHECK(!has(text, "communicator 0 (2 ranks)"));
  CHECK(has(text, "communicator 0 (3 ranks):"));
  CHECK(has(text, "in it (up to 6.0 s): rank 0, rank 1"));
  CHECK(has(text, "never entered it: rank 2: no operation on this communicator yet"));
}
