// tuttirun's timeline trace (tools/tuttirun/trace.hpp): a rank's file read as tutti writes it
// (one event a line), files that are cut short or mangled refused with the reason, the merge of
// several ranks' files into one trace (metadata first, then by time), and the directory: made at
// the start, this host's files of an earlier run removed, trace.json written at the end.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tuttirun/trace.hpp"

using namespace tuttirun;

namespace {

// A rank's file as tutti writes it: the header, the event lines with commas between, "]}".
std::string rank_file(const std::vector<std::string>& events) {
  std::string s = "{\"traceEvents\":[\n";
  for (std::size_t i = 0; i < events.size(); ++i) s += events[i] + (i + 1 < events.size() ? ",\n" : "\n");
  return s + "]}\n";
}

std::string meta(int pid, int tid, const std::string& what, const std::string& name) {
  return "{\"name\":\"" + what + "\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
         ",\"args\":{\"name\":\"" + name + "\"}}";
}

std::string op(int pid, int tid, const std::string& name, const std::string& ts, const std::string& dur,
               const std::string& extra = "") {
  return "{\"name\":\"" + name + "\",\"cat\":\"collective\",\"ph\":\"X\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"ts\":" + ts + ",\"dur\":" + dur +
         ",\"args\":{\"seq\":3,\"context\":0,\"algorithm\":\"ring\",\"bytes\":4096,\"fingerprint\":\"ab\",\"wait_us\":{"
         "\"1\":3.250}" +
         extra + "}}";
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) v.push_back(line);
  return v;
}

// A directory of its own under $TMPDIR, removed at the end of the test.
struct scratch_dir {
  std::filesystem::path path;
  scratch_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tuttirun-trace-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~scratch_dir() { std::filesystem::remove_all(path); }
  void write(const std::string& name, const std::string& content) const { std::ofstream(path / name) << content; }
  bool has(const std::string& name) const { return std::filesystem::exists(path / name); }
};

}  // namespace

TEST_CASE("tuttirun trace: a rank's file reads event by event") {
  const std::string file = rank_file({meta(0, 0, "process_name", "rank 0"), meta(0, 1, "thread_name", "communicator 0"),
                                      op(0, 1, "all_reduce", "1733280000123456.789", "12.345"),
                                      op(0, 1, "send", "1733280000123470", "1.5", ",\"peer\":1,\"tag\":0")});
  const rank_trace r = parse_rank_trace(file);
  REQUIRE(r.error == "");
  REQUIRE(r.events.size() == 4);
  CHECK(r.events[0].meta);
  CHECK(r.events[1].meta);
  CHECK_FALSE(r.events[2].meta);
  CHECK(r.events[2].pid == 0);
  CHECK(r.events[2].text == op(0, 1, "all_reduce", "1733280000123456.789", "12.345"));
  CHECK(r.events[3].ts > r.events[2].ts);
  // No events at all is a file too.
  const rank_trace none = parse_rank_trace("{\"traceEvents\":[\n]}\n");
  CHECK(none.error == "");
  CHECK(none.events.empty());
  // Without the last newline, with blank lines and CRLF.
  CHECK(parse_rank_trace("{\"traceEvents\":[\r\n\n" + meta(3, 0, "process_name", "rank 3") + "\r\n]}").error == "");
}

TEST_CASE("tuttirun trace: microsecond timestamps of the epoch keep their nanoseconds") {
  const rank_trace r = parse_rank_trace(rank_file({op(0, 1, "a", "1733280000123456.790", "0.001"),
                                                   op(1, 1, "b", "1733280000123456.789", "0.001")}));
  REQUIRE(r.error == "");
  REQUIRE(r.events.size() == 2);
  // Where long double is as wide as double, the two read the same; the merge keeps them in order.
  if (sizeof(long double) > sizeof(double)) CHECK(r.events[1].ts < r.events[0].ts);
  const merged_trace m = merge_traces({{"f", rank_file({op(0, 1, "a", "1733280000123456.790", "0.001"),
                                                        op(1, 1, "b", "1733280000123456.789", "0.001")})}});
  const std::vector<std::string> lines = lines_of(m.json);
  REQUIRE(lines.size() == 4);
  if (sizeof(long double) > sizeof(double)) CHECK(lines[1].find("\"name\":\"b\"") != std::string::npos);
}

TEST_CASE("tuttirun trace: a file cut short anywhere is refused, never half read") {
  const std::string file = rank_file({meta(0, 0, "process_name", "rank 0"), op(0, 1, "all_reduce", "100.5", "2"),
                                      op(0, 1, "broadcast", "103", "1.25", ",\"error\":\"peer_lost \\\"rank 1\\\"\"")});
  REQUIRE(parse_rank_trace(file).error == "");
  for (std::size_t n = 0; n < file.size(); ++n) {
    const std::string cut = file.substr(0, n);
    const rank_trace r = parse_rank_trace(cut);
    // Only the whole file, less its last newline, reads.
    if (n + 1 == file.size()) {
      CHECK(r.error == "");
      continue;
    }
    INFO("cut after " << n << " bytes");
    CHECK(r.error != "");
    CHECK(r.events.empty());
  }
  CHECK(parse_rank_trace("").error == "it is empty");
  CHECK(parse_rank_trace("{\"traceEvents\":[\n" + meta(0, 0, "process_name", "rank 0") + ",\n").error ==
        "it does not end with the line ]} (cut short: its process killed while writing it?)");
}

TEST_CASE("tuttirun trace: mangled files are refused with the reason") {
  const std::string m0 = meta(0, 0, "process_name", "rank 0");
  const std::string x0 = op(0, 1, "all_reduce", "100", "2");
  struct bad {
    std::string content, error;
  };
  const std::vector<bad> cases = {
      {"[\n" + x0 + "\n]}\n", "it does not start with the line {\"traceEvents\":["},
      {"{\"traceEvents\":[\n" + m0 + "\n" + x0 + "\n]}\n", "its event line 1 is not the last but has no comma after it"},
      {"{\"traceEvents\":[\n" + m0 + ",\n" + x0 + ",\n]}\n", "its event line 2 is the last but ends with a comma"},
      {rank_file({m0, "{\"name\":\"x\",\"ph\":\"X\",\"pid\":0,\"ts\":1"}), "its event line 2 is not a JSON object (cut short or mangled)"},
      {rank_file({m0, "garbage"}), "its event line 2 is not a JSON object (cut short or mangled)"},
      {rank_file({x0 + " }"}), "its event line 1 has text after its JSON object"},
      {rank_file({"{\"name\":\"x\",\"pid\":0,\"ts\":1}"}), "its event line 1 has no \"ph\" string"},
      {rank_file({"{\"name\":\"x\",\"ph\":\"X\",\"ts\":1}"}), "its event line 1 has no integer \"pid\""},
      {rank_file({"{\"name\":\"x\",\"ph\":\"X\",\"pid\":\"0\",\"ts\":1}"}), "its event line 1 has no integer \"pid\""},
      {rank_file({"{\"name\":\"x\",\"ph\":\"X\",\"pid\":0}"}), "its event line 1 has no number \"ts\""},
      {rank_file({"{\"name\":\"x\",\"ph\":\"X\",\"pid\":0,\"ts\":\"1\"}"}), "its event line 1 has no number \"ts\""},
      {rank_file({"{\"name\":\"x\",\"ph\":\"X\",\"pid\":0,\"ts\":01}"}), "its event line 1 is not a JSON object (cut short or mangled)"},
      {rank_file({"{\"name\":\"bad \\q escape\",\"ph\":\"X\",\"pid\":0,\"ts\":1}"}),
       "its event line 1 is not a JSON object (cut short or mangled)"},
      {rank_file({m0}) + "{\"traceEvents\":[\n", "it does not end with the line ]} (cut short: its process killed while writing it?)"},
  };
  for (const bad& b : cases) {
    INFO(b.content);
    const rank_trace r = parse_rank_trace(b.content);
    CHECK(r.error == b.error);
    CHECK(r.events.empty());
  }
  // Deep nesting is refused, not a stack overflow.
  std::string deep = "{\"name\":\"x\",\"ph\":\"X\",\"pid\":0,\"ts\":1,\"args\":";
  for (int i = 0; i < 100000; ++i) deep += '[';
  CHECK(parse_rank_trace(rank_file({deep})).error == "its event line 1 is not a JSON object (cut short or mangled)");
}

TEST_CASE("tuttirun trace: only top-level members count, not the same names in args or strings") {
  // An error text that holds "ts":5 and "ph":"M", and args with a pid and ts of their own.
  const std::string ev =
      "{\"name\":\"recv\",\"ph\":\"X\",\"pid\":2,\"tid\":1,\"ts\":200,\"dur\":1,\"args\":{\"pid\":9,\"ts\":1,"
      "\"error\":\"\\\"ts\\\":5,\\\"ph\\\":\\\"M\\\" \\u00e9\"}}";
  const rank_trace r = parse_rank_trace(rank_file({ev}));
  REQUIRE(r.error == "");
  REQUIRE(r.events.size() == 1);
  CHECK_FALSE(r.events[0].meta);
  CHECK(r.events[0].pid == 2);
  CHECK(r.events[0].ts == 200);
}

TEST_CASE("tuttirun trace: the merge puts metadata first, then every event by time") {
  // Two processes: one with ranks 0 and 1 (the threads transport), one with rank 2 that has a
  // posted track; a tie between ranks 0 and 2 keeps the order of the files.
  const std::string a = rank_file({meta(0, 0, "process_name", "rank 0"), meta(0, 1, "thread_name", "communicator 0"),
                                   meta(1, 0, "process_name", "rank 1"), op(0, 1, "all_reduce", "100", "5"),
                                   op(1, 1, "all_reduce", "101", "4"), op(0, 1, "barrier", "110", "1")});
  const std::string b = rank_file({meta(2, 0, "process_name", "rank 2"), meta(2, 2, "thread_name", "communicator 0, posted"),
                                   op(2, 1, "all_reduce", "99.5", "5.5"), op(2, 2, "all_gather", "100", "3"),
                                   op(2, 1, "barrier", "110", "1")});
  const merged_trace m = merge_traces({{"dir/tutti-trace-h-1.json", a}, {"dir/tutti-trace-h-2.json", b}});
  CHECK(m.warnings.empty());
  CHECK(m.files == 2);
  CHECK(m.ranks == 3);
  CHECK(m.events == 6);
  const std::string want = "{\"traceEvents\":[\n" + meta(0, 0, "process_name", "rank 0") + ",\n" +
                           meta(0, 1, "thread_name", "communicator 0") + ",\n" + meta(1, 0, "process_name", "rank 1") +
                           ",\n" + meta(2, 0, "process_name", "rank 2") + ",\n" +
                           meta(2, 2, "thread_name", "communicator 0, posted") + ",\n" +
                           op(2, 1, "all_reduce", "99.5", "5.5") + ",\n" + op(0, 1, "all_reduce", "100", "5") + ",\n" +
                           op(2, 2, "all_gather", "100", "3") + ",\n" + op(1, 1, "all_reduce", "101", "4") + ",\n" +
                           op(0, 1, "barrier", "110", "1") + ",\n" + op(2, 1, "barrier", "110", "1") + "\n" +
                           "],\"displayTimeUnit\":\"ms\"}\n";
  CHECK(m.json == want);
  // The merged trace is a rank's file's format but for its end: read back, it has every event.
  std::string as_rank_file = m.json;
  as_rank_file.replace(as_rank_file.rfind("],\"displayTimeUnit\":\"ms\"}"), std::string::npos, "]}\n");
  const rank_trace back = parse_rank_trace(as_rank_file);
  CHECK(back.error == "");
  CHECK(back.events.size() == 11);
}

TEST_CASE("tuttirun trace: a bad file is skipped with a warning naming it, the others merged") {
  const std::string good = rank_file({meta(0, 0, "process_name", "rank 0"), op(0, 1, "all_reduce", "100", "5")});
  const std::string cut = "{\"traceEvents\":[\n" + meta(1, 0, "process_name", "rank 1") + ",\n" +
                          op(1, 1, "all_reduce", "100", "5").substr(0, 30);
  merged_trace m = merge_traces({{"d/tutti-trace-h-1.json", good}, {"d/tutti-trace-h-2.json", cut}});
  CHECK(m.files == 1);
  CHECK(m.ranks == 1);
  CHECK(m.events == 1);
  REQUIRE(m.warnings.size() == 1);
  CHECK(m.warnings[0] ==
        "skipping trace file d/tutti-trace-h-2.json: it does not end with the line ]} (cut short: its process killed "
        "while writing it?)");
  CHECK(lines_of(m.json).size() == 4);
  // Nothing usable: no trace at all.
  m = merge_traces({{"d/tutti-trace-h-2.json", cut}, {"d/tutti-trace-h-3.json", ""}});
  CHECK(m.files == 0);
  CHECK(m.json == "");
  CHECK(m.warnings.size() == 2);
  CHECK(merge_traces({}).json == "");
  // A file with no events is merged, and counts no rank.
  m = merge_traces({{"d/tutti-trace-h-4.json", rank_file({})}});
  CHECK(m.files == 1);
  CHECK(m.ranks == 0);
  CHECK(m.json == "{\"traceEvents\":[\n],\"displayTimeUnit\":\"ms\"}\n");
}

TEST_CASE("tuttirun trace: the names of the ranks' files, by host") {
  CHECK(is_rank_trace_name("tutti-trace-node1-4242.json"));
  CHECK(is_rank_trace_name("tutti-trace-a-b-4242.json", "a-b"));
  CHECK_FALSE(is_rank_trace_name("tutti-trace-a-b-4242.json", "a"));
  CHECK(is_rank_trace_name("tutti-trace-a-1.json", "a"));
  CHECK_FALSE(is_rank_trace_name("tutti-trace-a-1.json", "b"));
  CHECK_FALSE(is_rank_trace_name("trace.json"));
  CHECK_FALSE(is_rank_trace_name("tutti-trace-node1-4242.json.tmp"));
  CHECK_FALSE(is_rank_trace_name("tutti-trace-node1-.json"));
  CHECK_FALSE(is_rank_trace_name("tutti-trace-4242.json"));
  CHECK_FALSE(is_rank_trace_name("tutti-trace-node1-42x.json"));
}

TEST_CASE("tuttirun trace: the directory at the start and the end of a job") {
  scratch_dir d;
  const std::string host = host_name();
  const std::string dir = (d.path / "a" / "b").string();
  prepare_trace_dir(dir, true);  // made, parents too
  CHECK(std::filesystem::is_directory(dir));
  const scratch_dir& s = d;
  const std::string sub = "a/b/";
  s.write(sub + "tutti-trace-" + host + "-11.json", "old");
  s.write(sub + "tutti-trace-" + host + "-x-12.json", "another host's");
  s.write(sub + "tutti-trace-other" + host + "-13.json", "another host's");
  s.write(sub + "notes.json", "not a trace");
  s.write(sub + "trace.json", "old merge");
  prepare_trace_dir(dir, false);  // another node: this host's files go, trace.json stays
  CHECK_FALSE(s.has(sub + "tutti-trace-" + host + "-11.json"));
  CHECK(s.has(sub + "tutti-trace-" + host + "-x-12.json"));
  CHECK(s.has(sub + "tutti-trace-other" + host + "-13.json"));
  CHECK(s.has(sub + "notes.json"));
  CHECK(s.has(sub + "trace.json"));
  prepare_trace_dir(dir + "/", true);  // node 0: the old merge goes too
  CHECK_FALSE(s.has(sub + "trace.json"));
  CHECK(s.has(sub + "notes.json"));

  // The end: the two files that read are merged (the bad ones were another host's), trace.json written.
  s.write(sub + "tutti-trace-" + host + "-20.json",
          rank_file({meta(0, 0, "process_name", "rank 0"), op(0, 1, "all_reduce", "100", "5")}));
  s.write(sub + "tutti-trace-" + host + "-21.json",
          rank_file({meta(1, 0, "process_name", "rank 1"), op(1, 1, "all_reduce", "99", "5")}));
  write_merged_trace(dir);
  REQUIRE(s.has(sub + "trace.json"));
  std::ifstream in(d.path / "a" / "b" / "trace.json");
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<std::string> lines = lines_of(text.str());
  REQUIRE(lines.size() == 6);
  CHECK(lines[3].find("\"ts\":99,") != std::string::npos);
  CHECK(lines[5] == "],\"displayTimeUnit\":\"ms\"}");

  // A directory that cannot be made.
  s.write("file", "x");
  CHECK_THROWS_AS(prepare_trace_dir((d.path / "file" / "sub").string(), true), launcher_error);
  CHECK_THROWS_AS(prepare_trace_dir((d.path / "file").string(), true), launcher_error);
}
