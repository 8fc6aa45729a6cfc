// tuttirun: the timeline trace (TUTTI_TRACE=dir). Each tutti process writes its ranks'
// operations to dir/tutti-trace-<hostname>-<pid>.json, Chrome trace-event JSON with one event a
// line; tuttirun clears what an earlier run left there when the job starts and, on node 0 once
// the job is over, merges every such file into dir/trace.json (Perfetto, chrome://tracing).
// The merge (parse_rank_trace, merge_traces) is pure, string in and string out, so that it can be
// tested without a job; the rest reads and writes the directory.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common.hpp"

namespace tuttirun {

inline constexpr std::string_view trace_env = "TUTTI_TRACE";
inline constexpr std::string_view trace_file_prefix = "tutti-trace-";
inline constexpr std::string_view trace_file_suffix = ".json";
inline constexpr std::string_view merged_trace_name = "trace.json";

// One event of a rank's file: its line as written (without the comma that separates it from the
// next), whether it is metadata ("ph":"M"), its "ts" (microseconds; long double, which holds a
// CLOCK_REALTIME microsecond count with its fraction to the nanosecond on x86-64) and its "pid"
// (the job rank).
struct trace_event {
  std::string text;
  bool meta = false;
  long double ts = 0;
  long long pid = 0;
};

// A rank's file read: its events, or why it cannot be used.
struct rank_trace {
  std::vector<trace_event> events;
  std::string error;  // empty if the file is well formed
};

namespace trace_json {

// A JSON checker, just enough to tell an event line from a cut or mangled one and to find the
// top-level members an event is sorted and counted by. Nesting deeper than max_depth is refused.
inline constexpr int max_depth = 64;

struct cursor {
  std::string_view s;
  std::size_t i = 0;
  bool at_end() const { return i >= s.size(); }
  char peek() const { return i < s.size() ? s[i] : '\0'; }
  void skip_ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
};

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
inline bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// A string; `raw` gets its text between the quotes, escapes left as they are.
inline bool string(cursor& c, std::string_view* raw = nullptr) {
  if (c.peek() != '"') return false;
  const std::size_t start = ++c.i;
  while (!c.at_end()) {
    const char ch = c.s[c.i];
    if (ch == '"') {
      if (raw) *raw = c.s.substr(start, c.i - start);
      ++c.i;
      return true;
    }
    if (static_cast<unsigned char>(ch) < 0x20) return false;
    if (ch == '\\') {
      ++c.i;
      const char e = c.peek();
      if (e == 'u') {
        for (int k = 1; k <= 4; ++k)
          if (c.i + k >= c.s.size() || !is_hex(c.s[c.i + k])) return false;
        c.i += 4;
      } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos || e == '\0') {
        return false;
      }
    }
    ++c.i;
  }
  return false;
}

inline bool number(cursor& c) {
  if (c.peek() == '-') ++c.i;
  if (c.peek() == '0') {
    ++c.i;
  } else if (is_digit(c.peek())) {
    while (is_digit(c.peek())) ++c.i;
  } else {
    return false;
  }
  if (c.peek() == '.') {
    ++c.i;
    if (!is_digit(c.peek())) return false;
    while (is_digit(c.peek())) ++c.i;
  }
  if (c.peek() == 'e' || c.peek() == 'E') {
    ++c.i;
    if (c.peek() == '+' || c.peek() == '-') ++c.i;
    if (!is_digit(c.peek())) return false;
    while (is_digit(c.peek())) ++c.i;
  }
  return true;
}

inline bool value(cursor& c, int depth);

// An object; for each member named in `want`, `got` gets the text of its value.
inline bool object(cursor& c, int depth, const std::vector<std::string_view>& want = {},
                   std::vector<std::optional<std::string_view>>* got = nullptr) {
  if (c.peek() != '{' || depth > max_depth) return false;
  ++c.i;
  c.skip_ws();
  if (c.peek() == '}') return ++c.i, true;
  for (;;) {
    c.skip_ws();
    std::string_view key;
    if (!string(c, &key)) return false;
    c.skip_ws();
    if (c.peek() != ':') return false;
    ++c.i;
    c.skip_ws();
    const std::size_t start = c.i;
    if (!value(c, depth + 1)) return false;
    if (got)
      for (std::size_t k = 0; k < want.size(); ++k)
        if (key == want[k]) (*got)[k] = c.s.substr(start, c.i - start);
    c.skip_ws();
    if (c.peek() == ',') {
      ++c.i;
      continue;
    }
    if (c.peek() == '}') return ++c.i, true;
    return false;
  }
}

inline bool array(cursor& c, int depth) {
  if (c.peek() != '[' || depth > max_depth) return false;
  ++c.i;
  c.skip_ws();
  if (c.peek() == ']') return ++c.i, true;
  for (;;) {
    c.skip_ws();
    if (!value(c, depth + 1)) return false;
    c.skip_ws();
    if (c.peek() == ',') {
      ++c.i;
      continue;
    }
    if (c.peek() == ']') return ++c.i, true;
    return false;
  }
}

inline bool literal(cursor& c, std::string_view word) {
  if (c.s.substr(c.i, word.size()) != word) return false;
  c.i += word.size();
  return true;
}

inline bool value(cursor& c, int depth) {
  switch (c.peek()) {
    case '{': return object(c, depth);
    case '[': return array(c, depth);
    case '"': return string(c);
    case 't': return literal(c, "true");
    case 'f': return literal(c, "false");
    case 'n': return literal(c, "null");
    default: return number(c);
  }
}

}  // namespace trace_json

namespace trace_detail {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// One event line (its separating comma removed): the event, or why it is not one.
inline std::optional<trace_event> parse_event(std::string_view line, std::string& why) {
  static const std::vector<std::string_view> want = {"ph", "ts", "pid"};
  std::vector<std::optional<std::string_view>> got(want.size());
  trace_json::cursor c{line};
  if (!trace_json::object(c, 0, want, &got)) {
    why = "is not a JSON object (cut short or mangled)";
    return std::nullopt;
  }
  c.skip_ws();
  if (!c.at_end()) {
    why = "has text after its JSON object";
    return std::nullopt;
  }
  trace_event ev;
  ev.text = std::string(line);
  if (!got[0] || got[0]->size() < 2 || got[0]->front() != '"') {
    why = "has no \"ph\" string";
    return std::nullopt;
  }
  ev.meta = *got[0] == "\"M\"";
  const auto num_of = [](std::optional<std::string_view> v, auto& out) {
    if (!v) return false;
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
    return ec == std::errc() && end == v->data() + v->size();
  };
  if (!num_of(got[2], ev.pid)) {
    why = "has no integer \"pid\"";
    return std::nullopt;
  }
  if (!ev.meta) {
    // strtold: the text is a JSON number (the checker saw to that), and tuttirun runs in the C
    // locale, so it reads as written.
    if (!got[1] || got[1]->empty() || got[1]->front() == '"' || got[1]->front() == '{' || got[1]->front() == '[' ||
        got[1]->front() == 't' || got[1]->front() == 'f' || got[1]->front() == 'n') {
      why = "has no number \"ts\"";
      return std::nullopt;
    }
    const std::string ts(*got[1]);
    char* end = nullptr;
    ev.ts = std::strtold(ts.c_str(), &end);
    if (end != ts.c_str() + ts.size()) {
      why = "has a \"ts\" that does not read as a number";
      return std::nullopt;
    }
  }
  return ev;
}

}  // namespace trace_detail

// Reads one rank's file: the line {"traceEvents":[, then one event a line, each but the last
// followed by a comma, then the line ]} (blank lines allowed). Anything else, a file cut short by
// a rank killed while writing it above all, is refused with the reason, never half read.
inline rank_trace parse_rank_trace(std::string_view content) {
  rank_trace r;
  std::vector<std::string_view> lines;
  for (std::size_t pos = 0; pos < content.size();) {
    std::size_t nl = content.find('\n', pos);
    if (nl == std::string_view::npos) nl = content.size();
    const std::string_view line = trace_detail::trim(content.substr(pos, nl - pos));
    if (!line.empty()) lines.push_back(line);
    pos = nl + 1;
  }
  if (lines.empty()) {
    r.error = "it is empty";
    return r;
  }
  if (lines.front() != "{\"traceEvents\":[") {
    r.error = "it does not start with the line {\"traceEvents\":[";
    return r;
  }
  if (lines.size() < 2 || lines.back() != "]}") {
    r.error = "it does not end with the line ]} (cut short: its process killed while writing it?)";
    return r;
  }
  const std::size_t first = 1, last = lines.size() - 2;  // the event lines, if last >= first
  for (std::size_t k = first; k + 1 < lines.size(); ++k) {
    std::string_view line = lines[k];
    const bool comma = line.back() == ',';
    if (comma) line = trace_detail::trim(line.substr(0, line.size() - 1));
    const std::string where = "its event line " + std::to_string(k - first + 1);
    if (comma != (k != last)) {
      r.error = where + (comma ? " is the last but ends with a comma" : " is not the last but has no comma after it");
      r.events.clear();
      return r;
    }
    std::string why;
    std::optional<trace_event> ev = trace_detail::parse_event(line, why);
    if (!ev) {
      r.error = where + " " + why;
      r.events.clear();
      return r;
    }
    r.events.push_back(std::move(*ev));
  }
  return r;
}

// A rank's file by name (the name is only for the warning that skips it) and content.
struct trace_input {
  std::string name;
  std::string content;
};

struct merged_trace {
  std::string json;                   // trace.json; empty if no file could be used
  std::size_t files = 0;              // the files merged
  std::size_t ranks = 0;              // distinct pids (job ranks) among their events
  std::size_t events = 0;             // their events other than metadata
  std::vector<std::string> warnings;  // one per file skipped
};

// The files' events in one trace: {"traceEvents":[, the metadata events ("ph":"M") in the order
// of the files and their lines, then every other event by "ts" (ties in that order too), one a
// line with a comma after every one but the last, then ],"displayTimeUnit":"ms"}. A file that
// does not read (parse_rank_trace) is left out with a warning that names it.
inline merged_trace merge_traces(const std::vector<trace_input>& files) {
  merged_trace m;
  std::vector<trace_event> meta, timed;
  std::set<long long> pids;
  for (const trace_input& f : files) {
    rank_trace r = parse_rank_trace(f.content);
    if (!r.error.empty()) {
      m.warnings.push_back("skipping trace file " + f.name + ": " + r.error);
      continue;
    }
    ++m.files;
    for (trace_event& ev : r.events) {
      pids.insert(ev.pid);
      (ev.meta ? meta : timed).push_back(std::move(ev));
    }
  }
  if (m.files == 0) return m;
  std::stable_sort(timed.begin(), timed.end(), [](const trace_event& a, const trace_event& b) { return a.ts < b.ts; });
  m.ranks = pids.size();
  m.events = timed.size();
  std::size_t bytes = 64;
  for (const auto* v : {&meta, &timed})
    for (const trace_event& ev : *v) bytes += ev.text.size() + 2;
  m.json.reserve(bytes);
  m.json += "{\"traceEvents\":[\n";
  std::size_t left = meta.size() + timed.size();
  for (const auto* v : {&meta, &timed})
    for (const trace_event& ev : *v) {
      m.json += ev.text;
      m.json += --left ? ",\n" : "\n";
    }
  m.json += "],\"displayTimeUnit\":\"ms\"}\n";
  return m;
}

// Whether `name` is the name of a rank's file: tutti-trace-<host>-<pid>.json, of host `host` if
// given (its pid all digits, so that host "a" does not claim host "a-b"'s files).
inline bool is_rank_trace_name(std::string_view name, std::optional<std::string_view> host = std::nullopt) {
  if (!name.starts_with(trace_file_prefix) || !name.ends_with(trace_file_suffix)) return false;
  std::string_view mid = name.substr(trace_file_prefix.size(), name.size() - trace_file_prefix.size() - trace_file_suffix.size());
  const std::size_t dash = mid.rfind('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == mid.size()) return false;
  const std::string_view pid = mid.substr(dash + 1);
  if (!std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  return !host || mid.substr(0, dash) == *host;
}

inline std::string trace_path(const std::string& dir, std::string_view name) {
  return dir.ends_with('/') ? dir + std::string(name) : dir + "/" + std::string(name);
}

// TUTTI_TRACE, if set and not empty.
inline std::optional<std::string> trace_dir_from_env() {
  const char* v = std::getenv(std::string(trace_env).c_str());
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

inline std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// mkdir -p: throws launcher_error naming the directory if it cannot be made.
inline void make_trace_dir(const std::string& dir) {
  std::string path;
  std::size_t pos = 0;
  while (pos <= dir.size()) {
    std::size_t slash = dir.find('/', pos);
    if (slash == std::string::npos) slash = dir.size();
    path = dir.substr(0, slash);
    pos = slash + 1;
    if (path.empty()) continue;  // the leading '/'
    if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST)
      throw launcher_error("TUTTI_TRACE=" + dir + ": cannot create the directory " + errno_text(path.c_str()));
  }
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) throw launcher_error("TUTTI_TRACE=" + dir + ": " + errno_text(dir.c_str()));
  if (!S_ISDIR(st.st_mode)) throw launcher_error("TUTTI_TRACE=" + dir + ": not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw launcher_error("TUTTI_TRACE=" + dir + ": cannot write there: " + std::strerror(errno));
}

inline std::vector<std::string> list_rank_traces(const std::string& dir, std::optional<std::string_view> host) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d))
    if (is_rank_trace_name(e->d_name, host)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// At the job's start: the directory is made if missing, and this host's rank files of an earlier
// run are removed (and on node 0 the merged trace), so that the trace is this job's alone.
inline void prepare_trace_dir(const std::string& dir, bool node0) {
  make_trace_dir(dir);
  for (const std::string& name : list_rank_traces(dir, host_name())) {
    const std::string path = trace_path(dir, name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) say("warning: cannot remove " + errno_text(path.c_str()));
  }
  if (node0) {
    const std::string path = trace_path(dir, merged_trace_name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) say("warning: cannot remove " + errno_text(path.c_str()));
  }
}

inline std::optional<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string s;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    s.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return s;
}

// Once the job is over (node 0): every rank's file in the directory, from every host, merged
// into dir/trace.json (written whole, then renamed into place), with one line on stderr that
// says what it holds. Problems are warnings: the job's exit status is not the trace's.
inline void write_merged_trace_or_throw(const std::string& dir) {
  std::vector<trace_input> inputs;
  for (const std::string& name : list_rank_traces(dir, std::nullopt)) {
    const std::string path = trace_path(dir, name);
    if (std::optional<std::string> content = read_file(path))
      inputs.push_back({path, std::move(*content)});
    else
      say("warning: skipping trace file " + errno_text(path.c_str()));
  }
  const merged_trace m = merge_traces(inputs);
  for (const std::string& w : m.warnings) say("warning: " + w);
  if (m.files == 0) {
    say(inputs.empty() ? "no trace: no rank wrote a " + std::string(trace_file_prefix) + "*.json file in " + dir
                       : "no trace: no trace file in " + dir + " could be read");
    return;
  }
  const std::string out = trace_path(dir, merged_trace_name);
  const std::string tmp = out + ".tmp" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    say("warning: no trace: " + errno_text(tmp.c_str()));
    return;
  }
  const bool written = write_all(fd, m.json);
  const std::string why = written ? "" : errno_text(tmp.c_str());
  if (::close(fd) != 0 || !written || ::rename(tmp.c_str(), out.c_str()) != 0) {
    say("warning: no trace: " + (why.empty() ? errno_text(out.c_str()) : why));
    ::unlink(tmp.c_str());
    return;
  }
  say("trace of " + std::to_string(m.ranks) + (m.ranks == 1 ? " rank (" : " ranks (") + std::to_string(m.events) +
      (m.events == 1 ? " event) in " : " events) in ") + out);
}

inline void write_merged_trace(const std::string& dir) {
  try {
    write_merged_trace_or_throw(dir);
  } catch (const std::exception& e) {  // out of memory, say: the job's status stands
    say(std::string("warning: no trace: ") + e.what());
  }
}

}  // namespace tuttirun
