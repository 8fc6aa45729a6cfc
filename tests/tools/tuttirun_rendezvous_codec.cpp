// The lines of tuttirun's restart rendezvous (tools/tuttirun/rendezvous_codec.hpp): each message
// written as older tuttiruns read it, read back as written, and lines that are not messages
// (cut short, garbage, another protocol) refused.
#include <doctest/doctest.h>

#include <cstddef>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tuttirun/rendezvous_codec.hpp"

using namespace tuttirun;

namespace {

failure_report rank_failure() {
  failure_report r;
  r.attempt = 1, r.node = 0, r.rank = 3, r.local_rank = 3, r.pid = 4242, r.exit_code = 7;
  r.unix_ms = 1700000000123, r.no_restart = false;
  r.what = "exited with status 7";
  r.last_line = "boom: peer_lost (rank 2)";
  return r;
}

// Not a rank's failure: a signal to tuttirun on node 2, after which no attempt follows.
failure_report signal_failure() {
  failure_report r;
  r.attempt = 4, r.node = 2, r.rank = -1, r.local_rank = -1, r.pid = -1, r.exit_code = 130;
  r.unix_ms = 5, r.no_restart = true;
  r.what = "tuttirun on node 2 received SIGINT";
  r.last_line = "";
  return r;
}

// A rank whose last words blame rank 3 (failure_role::victim).
failure_report victim_failure() {
  failure_report r;
  r.attempt = 1, r.node = 1, r.rank = 2, r.local_rank = 0, r.pid = 4243, r.exit_code = 134;
  r.unix_ms = 1700000000100, r.role = failure_role::victim, r.victim_of = 3;
  r.what = "was killed by signal 6 (SIGABRT)";
  r.last_line = "  what():  rank 3 failed, so ...";
  return r;
}

// A process with two communicators: one with a running all_reduce after a barrier, one empty;
// numbers at the ends of their ranges.
flight_process busy_process() {
  flight_process p;
  p.job_rank = 2, p.pid = 31337, p.has_records = true;
  p.status = "stopped by SIGSTOP", p.source = "live";
  flight_comm world;
  world.rank = 2, world.size = 4, world.context = 0, world.total = 3, world.waiting = 1;
  flight_op barrier;
  barrier.fp.coll = tutti::collective::barrier, barrier.fp.seq = 2, barrier.fp.root = -1;
  barrier.algorithm = "recursive_doubling";
  barrier.start_ns = 1700000000000000000, barrier.end_ns = 1700000000000001000;
  barrier.state = tutti::detail::flight_state::done;
  flight_op reduce;
  reduce.fp.context = ~std::uint64_t{0}, reduce.fp.seq = 3, reduce.fp.count = 1000, reduce.fp.shape = 1ull << 63;
  reduce.fp.dtype = 0xffffffffu, reduce.fp.op = 1, reduce.fp.root = -2147483647 - 1, reduce.fp.algo = 7;
  reduce.fp.coll = tutti::collective::all_reduce, reduce.fp.elem_size = 255;
  reduce.algorithm = "";
  reduce.start_ns = -5, reduce.end_ns = 0;
  reduce.state = tutti::detail::flight_state::running;
  world.ops = {barrier, reduce};
  flight_comm group;
  group.rank = 0, group.size = 1, group.context = 99;
  p.comms = {world, group};
  return p;
}

// One of each message, with and without the reports that may be left out.
std::vector<rdzv_message> every_message() {
  return {
      rdzv_msg::hello{"00ff10ab", 2, 1, 3},
      rdzv_msg::welcome{},
      rdzv_msg::refused{"wrong job token: its TUTTI_JOB_TOKEN differs from node 0's"},
      rdzv_msg::failed{1, rank_failure()},
      rdzv_msg::failed{4, signal_failure()},
      rdzv_msg::done{0, 0, std::nullopt},
      rdzv_msg::done{1, 7, rank_failure()},
      rdzv_msg::done{1, 134, victim_failure()},
      rdzv_msg::leave{"received SIGTERM while waiting for the other nodes"},
      rdzv_msg::start{0, std::nullopt},
      rdzv_msg::start{2, rank_failure()},
      rdzv_msg::end{3, 0, std::nullopt},
      rdzv_msg::end{4, 130, signal_failure()},
      rdzv_msg::abort{"node 1's tuttirun went away during attempt 0 (it closed the connection)"},
      rdzv_msg::refused{""},
      rdzv_msg::dump{0, true, "rank 2 failed on node 1"},
      rdzv_msg::dump{3, false, "tuttirun received SIGUSR1 on node 1"},
      rdzv_msg::query{"00ff10ab", "tuttirun --dump"},
      rdzv_msg::collect{7},
      rdzv_msg::records{7, busy_process()},
      rdzv_msg::records{7, flight_process{-1, 12, "gone", "exited without saving its records", {}, false}},
      rdzv_msg::collected{7, 2},
      rdzv_msg::report{7, "hang report (x): what\n  rank 0 (pid 1): running\n\tback\\slash \\n kept\r\n"},
      rdzv_msg::report{8, ""},
  };
}

std::vector<std::string_view> fields_of(std::string_view line) { return split_fields(line); }

// `fields` joined by tabs.
std::string join(const std::vector<std::string_view>& fields, std::size_t count) {
  std::string line;
  for (std::size_t i = 0; i < count; ++i) line += (i ? "\t" : "") + std::string(fields[i]);
  return line;
}

}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("tuttirun rendezvous codec: the lines are those older tuttiruns send and read") {
  CHECK(encode(rdzv_msg::hello{"00ff10ab", 2, 1, 3}) == "hello\ttuttirun-rdzv/3\t00ff10ab\t2\t1\t3");
  CHECK(encode(rdzv_msg::welcome{}) == "welcome");
  CHECK(encode(rdzv_msg::refused{"no"}) == "refused\tno");
  CHECK(encode(rdzv_msg::failed{1, rank_failure()}) ==
        "failed\t1\t1\t0\t3\t3\t4242\t7\t1700000000123\t0\t0\t-1\texited with status 7\tboom: peer_lost (rank 2)");
  CHECK(encode(rdzv_msg::failed{1, victim_failure()}) ==
        "failed\t1\t1\t1\t2\t0\t4243\t134\t1700000000100\t0\t1\t3\twas killed by signal 6 (SIGABRT)\t  what():  rank 3 failed, so ...");
  CHECK(encode(rdzv_msg::done{0, 0, std::nullopt}) == "done\t0\t0");
  CHECK(encode(rdzv_msg::done{4, 130, signal_failure()}) ==
        "done\t4\t130\t4\t2\t-1\t-1\t-1\t130\t5\t1\t0\t-1\ttuttirun on node 2 received SIGINT\t");
  CHECK(encode(rdzv_msg::leave{"bye"}) == "leave\tbye");
  CHECK(encode(rdzv_msg::start{0, std::nullopt}) == "start\t0");
  CHECK(encode(rdzv_msg::end{3, 7, std::nullopt}) == "end\t3\t7");
  CHECK(encode(rdzv_msg::abort{"late"}) == "abort\tlate");
  CHECK(encode(rdzv_msg::dump{2, true, "why"}) == "dump\t2\t1\twhy");
  CHECK(encode(rdzv_msg::query{"ab", "why"}) == "query\tab\twhy");
  CHECK(encode(rdzv_msg::collect{5}) == "collect\t5");
  CHECK(encode(rdzv_msg::collected{5, 3}) == "collected\t5\t3");
  CHECK(encode(rdzv_msg::report{5, "a\tb\nc\\n"}) == "report\t5\ta\\tb\\nc\\\\n");
  CHECK(encode(rdzv_msg::records{5, flight_process{3, 9, "running", "live", {}, true}}) ==
        "records\t5\t3\t9\t1\trunning\tlive\t0");
  flight_process one = busy_process();
  one.comms.resize(1);
  one.comms[0].ops.resize(1);
  CHECK(encode(rdzv_msg::records{5, one}) ==
        "records\t5\t2\t31337\t1\tstopped by SIGSTOP\tlive\t1\t2\t4\t0\t3\t1\t1"
        "\t0\t2\t0\t0\t0\t0\t-1\t0\t8\t0\trecursive_doubling\t1700000000000000000\t1700000000000001000\t2");
}

TEST_CASE("tuttirun rendezvous codec: every message reads back as it was written") {
  for (const rdzv_message& m : every_message()) {
    const std::string line = encode(m);
    CAPTURE(line);
    CHECK(line.find('\n') == std::string::npos);
    const std::optional<rdzv_message> back = decode(line);
    REQUIRE(back);
    CHECK(back->index() == m.index());
    CHECK(*back == m);
  }
}

TEST_CASE("tuttirun rendezvous codec: tabs and line ends in a text are sent as spaces") {
  failure_report r = rank_failure();
  r.what = "exited\twith\nstatus 7";
  r.last_line = "a\r\nb";
  const std::string line = encode(rdzv_msg::failed{1, r});
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.find('\r') == std::string::npos);
  const std::optional<rdzv_message> m = decode(line);
  const auto* back = message_as<rdzv_msg::failed>(m);
  REQUIRE(back);
  CHECK(back->report.what == "exited with status 7");
  CHECK(back->report.last_line == "a  b");
  CHECK(encode(rdzv_msg::abort{"x\ty"}) == "abort\tx y");
  CHECK(encode(rdzv_msg::leave{"x\ny"}) == "leave\tx y");
  CHECK(encode(rdzv_msg::refused{"x\ry"}) == "refused\tx y");
}

TEST_CASE("tuttirun rendezvous codec: a report's status is read as 0-255") {
  failure_report r = rank_failure();
  r.exit_code = -5;
  const std::optional<rdzv_message> negative = decode(encode(rdzv_msg::failed{1, r}));
  REQUIRE(message_as<rdzv_msg::failed>(negative));
  CHECK(message_as<rdzv_msg::failed>(negative)->report.exit_code == 0);
  r.exit_code = 0;  // a rank that left early (failure_role::early_exit)
  const std::optional<rdzv_message> zero = decode(encode(rdzv_msg::failed{1, r}));
  REQUIRE(message_as<rdzv_msg::failed>(zero));
  CHECK(message_as<rdzv_msg::failed>(zero)->report.exit_code == 0);
  r.exit_code = 300;
  const std::optional<rdzv_message> big = decode(encode(rdzv_msg::failed{1, r}));
  REQUIRE(message_as<rdzv_msg::failed>(big));
  CHECK(message_as<rdzv_msg::failed>(big)->report.exit_code == 255);
}

TEST_CASE("tuttirun rendezvous codec: a line cut short at a tab is refused unless what is left is whole") {
  // What remains when the last fields are cut: a report must be all there or not at all.
  for (const rdzv_message& m : every_message()) {
    const std::string line = encode(m);
    const auto f = fields_of(line);
    for (std::size_t keep = 1; keep < f.size(); ++keep) {
      const std::string cut = join(f, keep);
      CAPTURE(cut);
      const std::optional<rdzv_message> d = decode(cut);
      // Whole without the report: start K, done K CODE, end K CODE.
      const bool whole = (std::holds_alternative<rdzv_msg::start>(m) && keep == 2) ||
                         ((std::holds_alternative<rdzv_msg::done>(m) || std::holds_alternative<rdzv_msg::end>(m)) &&
                          keep == 3);
      CHECK(d.has_value() == whole);
    }
    // And cut inside its last field, where that is a number (hello's MAX_RESTARTS, a status).
    if (!f.empty() && field_int(f.back()) && f.back().size() > 1) {
      const std::string cut = line.substr(0, line.size() - 1);
      CAPTURE(cut);
      const std::optional<rdzv_message> d = decode(cut);
      if (d) CHECK(*d != m);
    }
  }
  // A report cut inside a number.
  CHECK(!decode("failed\t1\t1\t0\t3\t3\t42"));
  CHECK(!decode("start\t2\t1\t0\t3"));
}

TEST_CASE("tuttirun rendezvous codec: garbage and extra fields and other protocols are refused") {
  const std::string report = encode_report(rank_failure());
  const std::string refused[] = {
      "",
      "\t",
      "\t\t\t",
      "hello",
      "HELLO\ttuttirun-rdzv/1\t00ff\t2\t1\t3",
      "hello\ttuttirun-rdzv/1\t00ff\t2\t1\t3",  // an older tuttirun: its reports have ten fields
      "hello\ttuttirun-rdzv/2\t00ff\t2\t1\t3",  // without the hang report's messages
      "hello\ttuttirun-rdzv/4\t00ff\t2\t1\t3",
      "hello\ttuttirun-rdzv/3\t00ff\ttwo\t1\t3",
      "hello\ttuttirun-rdzv/3\t00ff\t2\t1\t3\textra",
      "dump\t1\t2\twhy",   // FAILURE is 0 or 1
      "dump\t1\t1",
      "dump\t-1\t0\twhy",
      "query\tab",
      "query\tab\twhy\textra",
      "collect",
      "collect\t-1",
      "collect\t1\t2",
      "collected\t1",
      "collected\t1\t-2",
      "report\t1",
      "report\t1\ta\tb",
      "records\t1",
      "records\t1\t3\t9\t1\trunning\tlive",
      "records\t1\t3\t9\t1\trunning\tlive\t0\textra",
      "records\t1\t3\t9\t2\trunning\tlive\t0",          // HAS_RECORDS is 0 or 1
      "records\t1\t3\t9\t1\trunning\tlive\t65",         // more communicators than a table holds
      "records\t1\t3\t9\t1\trunning\tlive\t1\t0\t1\t0\t0\t0\t65",  // more operations than a ring
      "records\t1\t3\t9\t1\trunning\tlive\t1\t0\t1\t0\t0\t0\t1"    // an operation of no collective (200)
      "\t0\t0\t0\t0\t0\t0\t-1\t0\t200\t0\tx\t1\t2\t1",
      "records\t1\t3\t9\t1\trunning\tlive\t1\t0\t1\t0\t0\t0\t1"    // no such state (4)
      "\t0\t0\t0\t0\t0\t0\t-1\t0\t2\t0\tx\t1\t2\t4",
      "records\t1\t3\t9\t1\trunning\tlive\t1\t0\t1\t0\t0\t0\t1"    // a dtype past 32 bits
      "\t0\t0\t0\t0\t4294967296\t0\t-1\t0\t2\t0\tx\t1\t2\t1",
      "records\t1\t3\t9\t1\trunning\tlive\t1\t0\t1\t-1\t0\t0\t0",   // a negative context
      "hello tuttirun-rdzv/1 00ff 2 1 3",
      "welcome\t",
      "welcome\textra",
      "refused",
      "refused\ta\tb",
      "leave",
      "abort",
      "abort\ta\tb",
      "start",
      "start\t",
      "start\t-1",
      "start\tx",
      "start\t1.5",
      "start\t+1",
      "start\t 1",
      "start\t99999999999999999999",
      "start\t1\t",
      "start\t1\t" + report + "\textra",
      "failed\t1",
      "failed\t-1\t" + report,
      "failed\t1\t" + report + "\t",
      "done\t1",
      "done\t1\tx",
      "done\t1\t\t" + report,
      "done\tx\t0",
      "end\t1",
      "end\t1\t7\tgarbage",
      "end\t1\t7\t" + report + "\textra",
      "end\t-3\t7",
      "failed\t1\t1\t0\t3\t3\tpid\t7\t1700000000123\t0\t0\t-1\texited\tboom",
      "failed\t1\t1\t0\t3\t3\t4242\t7\t1700000000123\tno\t0\t-1\texited\tboom",
      "failed\t1\t1\t0\t3\t3\t4242\t7\t1700000000123\t0\t4\t-1\texited\tboom",   // no such role
      "failed\t1\t1\t0\t3\t3\t4242\t7\t1700000000123\t0\t-1\t-1\texited\tboom",
      "failed\t1\t1\t0\t3\t3\t4242\t7\t1700000000123\t0\texited\tboom",  // a /1 report
      "GET / HTTP/1.1\r",
      std::string("\0\x01\x02garbage", 10),
      std::string(3000, 'x'),
  };
  for (const std::string& line : refused) {
    CAPTURE(line);
    CHECK(!decode(line));
  }
}

TEST_CASE("tuttirun rendezvous codec: random lines never break decode and what it reads writes back") {
  // What decode() reads from a line must be a message as encode() writes it: read again, the same.
  // The line itself may spell a number another way ("007"), so it is not compared.
  std::size_t decoded = 0;
  auto check_line = [&](const std::string& line) {
    const std::optional<rdzv_message> m = decode(line);
    if (!m) return;
    ++decoded;
    CAPTURE(line);
    const std::optional<rdzv_message> again = decode(encode(*m));
    REQUIRE(again);
    CHECK(*again == *m);
  };
  std::mt19937 random(12345);
  SUBCASE("lines of 1-14 fields, from words a message might have and some it must not") {
    const std::string_view pieces[] = {"hello", "welcome", "refused", "failed", "done", "leave", "start",
                                       "end", "abort", "dump", "query", "collect", "records", "collected",
                                       "report", "tuttirun-rdzv/3", "0", "1", "-1", "7", "255", "\\n", "\\",
                                       "007", "x", "", " ", "1e3", "exited with status 7", "99999999999999999999"};
    for (int trial = 0; trial < 20000; ++trial) {
      std::string line;
      const int n = 1 + static_cast<int>(random() % 14);
      for (int i = 0; i < n; ++i) line += (i ? "\t" : "") + std::string(pieces[random() % std::size(pieces)]);
      check_line(line);
    }
    CHECK(decoded > 100);  // the trials did reach messages
  }
  SUBCASE("every message with one to three bytes changed, removed or added") {
    // No '\n': a line never holds one, the connection cuts lines there.
    const char bytes[] = {'\t', '0', '1', '9', '-', 'x', ' ', '\0'};
    for (const rdzv_message& m : every_message()) {
      const std::string line = encode(m);
      for (int trial = 0; trial < 2000; ++trial) {
        std::string bent = line;
        for (int edits = 1 + static_cast<int>(random() % 3); edits > 0; --edits) {
          const std::size_t at = bent.empty() ? 0 : random() % bent.size();
          const char b = bytes[random() % std::size(bytes)];
          switch (random() % 3) {
            case 0: if (!bent.empty()) bent[at] = b; break;
            case 1: if (!bent.empty()) bent.erase(at, 1); break;
            default: bent.insert(bent.begin() + static_cast<std::ptrdiff_t>(at), b);
          }
        }
        check_line(bent);
      }
    }
    CHECK(decoded > 1000);
  }
}

TEST_CASE("tuttirun rendezvous codec: message_as picks the kind or nothing") {
  const std::optional<rdzv_message> start = decode("start\t2");
  REQUIRE(message_as<rdzv_msg::start>(start));
  CHECK(message_as<rdzv_msg::start>(start)->attempt == 2);
  CHECK(!message_as<rdzv_msg::start>(start)->after);
  CHECK(!message_as<rdzv_msg::end>(start));
  const std::optional<rdzv_message> none;
  CHECK(!message_as<rdzv_msg::start>(none));
}

TEST_SUITE_END();
