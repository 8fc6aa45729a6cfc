// tuttirun: the lines of the restart rendezvous across nodes, written and read by pure functions
// (rendezvous.hpp carries them over sockets).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "failure.hpp"
#include "hang_report.hpp"

namespace tuttirun {

// With --nnodes > 1, node 0's tuttirun serves a rendezvous on --master-addr:--rdzv-port and
// every other node's tuttirun keeps one connection to it: with --max-restarts > 0 the nodes
// restart together through it; in every job it carries the job's hang report. Lines of
// tab-separated fields:
//   hello tuttirun-rdzv/3 TOKEN NNODES NODE MAX_RESTARTS   a node joins (TOKEN in hex)
//   welcome | refused WHY                    node 0's answer
//   failed K REPORT       node -> 0: the first failure this node saw in attempt K;
//                         0 -> nodes: attempt K failed (the first report node 0 got): stop
//   done K CODE [REPORT]  node -> 0: attempt K is over here (every rank gone): this node's status
//                         and, if it failed, its first failure
//   leave WHY             node -> 0: this node's tuttirun is leaving (it received a signal)
//   start K [REPORT]      0 -> nodes: every node is ready: start attempt K (after REPORT's failure)
//   end K CODE [REPORT]   0 -> nodes: no more attempts (CODE 0: every rank succeeded)
//   abort WHY             0 -> nodes: a node is gone or late: stop the ranks and exit 1
// The hang report (hang_report.hpp), gathered node by node:
//   dump K FAILURE WHY    node -> 0: this node wants the job's report (FAILURE 1: a rank of
//                         attempt K failed, 0: SIGUSR1)
//   query TOKEN WHY       `tuttirun --dump` on any node -> 0, instead of hello: the same, for it
//   collect ID            0 -> nodes: send what your ranks are doing, now
//   records ID PROCESS    node -> 0: one rank's process and its flight records (below)
//   collected ID COUNT    node -> 0: this node's answer to collect ID is complete (COUNT records)
//   report ID TEXT        0 -> the node or query that asked: the job's report (TEXT escaped:
//                         backslash, line end and tab as \\, \n, \t)
// REPORT is a failure_report in twelve fields (/2: its role and the rank it blames; /1 had ten).
// PROCESS is JOB_RANK PID HAS_RECORDS STATUS SOURCE NCOMMS, then per communicator RANK SIZE
// CONTEXT TOTAL WAITING NOPS, then per operation its fingerprint's ten fields (context, seq,
// count, shape, dtype, op, root, algo, collective, element size), ALGORITHM START_NS END_NS STATE.
// A node's done carries its own judgement of its ranks' exits (the one that its ranks followed),
// from which node 0 picks the cause for all (pick_cause). Each line is one rdzv_message below: encode() writes
// it, decode() reads it back, or refuses a line that is not one (another program, a line cut
// short, a field that is not a number where one is due).

inline constexpr std::string_view rdzv_protocol = "tuttirun-rdzv/3";
// A records line holds one process's flight table (at most 64 communicators of 64 operations,
// about 600 KB as text); a report, a whole job's.
inline constexpr std::size_t max_rdzv_line = std::size_t{8} << 20;

// The messages, one struct per kind of line.
namespace rdzv_msg {
struct hello {
  std::string token_hex;
  long long nnodes = 0, node = 0, max_restarts = 0;
  bool operator==(const hello&) const = default;
};
struct welcome {
  bool operator==(const welcome&) const = default;
};
struct refused {
  std::string why;
  bool operator==(const refused&) const = default;
};
struct failed {
  long long attempt = 0;
  failure_report report;
  bool operator==(const failed&) const = default;
};
struct done {
  long long attempt = 0;
  int code = 0;
  std::optional<failure_report> first;  // this node's first failure, if it failed
  bool operator==(const done&) const = default;
};
struct leave {
  std::string why;
  bool operator==(const leave&) const = default;
};
struct start {
  long long attempt = 0;
  std::optional<failure_report> after;  // the failure that ended the attempt before
  bool operator==(const start&) const = default;
};
struct end {
  long long attempt = 0;
  int code = 0;
  std::optional<failure_report> root_cause;
  bool operator==(const end&) const = default;
};
struct abort {
  std::string why;
  bool operator==(const abort&) const = default;
};
struct dump {
  long long attempt = 0;
  bool failure = false;
  std::string why;
  bool operator==(const dump&) const = default;
};
struct query {
  std::string token_hex, why;
  bool operator==(const query&) const = default;
};
struct collect {
  long long id = 0;
  bool operator==(const collect&) const = default;
};
struct records {
  long long id = 0;
  flight_process process;
  bool operator==(const records&) const = default;
};
struct collected {
  long long id = 0, count = 0;
  bool operator==(const collected&) const = default;
};
struct report {
  long long id = 0;
  std::string text;
  bool operator==(const report&) const = default;
};
}  // namespace rdzv_msg

using rdzv_message = std::variant<rdzv_msg::hello, rdzv_msg::welcome, rdzv_msg::refused, rdzv_msg::failed,
                                  rdzv_msg::done, rdzv_msg::leave, rdzv_msg::start, rdzv_msg::end, rdzv_msg::abort,
                                  rdzv_msg::dump, rdzv_msg::query, rdzv_msg::collect, rdzv_msg::records,
                                  rdzv_msg::collected, rdzv_msg::report>;

// `m` as a T, or null when it is another message or none. Not of a temporary, which the pointer
// would outlive.
template <class T>
const T* message_as(const std::optional<rdzv_message>& m) {
  return m ? std::get_if<T>(&*m) : nullptr;
}
template <class T>
const T* message_as(const std::optional<rdzv_message>&& m) = delete;

// A text as one field: its tabs and line ends become spaces.
inline std::string one_field(std::string_view s) {
  std::string f(s);
  for (char& c : f)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return f;
}

// A report as twelve fields: ten numbers, then what happened and the rank's last line on stderr.
inline std::string encode_report(const failure_report& r) {
  std::string s;
  for (long long v : {r.attempt, r.node, r.rank, r.local_rank, r.pid, static_cast<long long>(r.exit_code), r.unix_ms,
                      static_cast<long long>(r.no_restart), static_cast<long long>(r.role), r.victim_of})
    s += std::to_string(v) + '\t';
  return s + one_field(r.what) + '\t' + one_field(r.last_line);
}

// A process and its flight records as fields (PROCESS above).
inline std::string encode_process(const flight_process& p) {
  std::string s = std::to_string(p.job_rank) + '\t' + std::to_string(p.pid) + '\t' + (p.has_records ? "1" : "0") +
                  '\t' + one_field(p.status) + '\t' + one_field(p.source) + '\t' + std::to_string(p.comms.size());
  auto add = [&s](auto v) { s += '\t' + std::to_string(v); };
  for (const flight_comm& c : p.comms) {
    add(c.rank), add(c.size), add(c.context), add(c.total), add(c.waiting), add(c.ops.size());
    for (const flight_op& o : c.ops) {
      const tutti::fingerprint& f = o.fp;
      add(f.context), add(f.seq), add(f.count), add(f.shape), add(f.dtype), add(f.op), add(f.root), add(f.algo);
      add(static_cast<unsigned>(f.coll)), add(static_cast<unsigned>(f.elem_size));
      s += '\t' + one_field(o.algorithm);
      add(o.start_ns), add(o.end_ns), add(static_cast<unsigned>(o.state));
    }
  }
  return s;
}

// A text with line ends as one field: backslash, line end, carriage return and tab escaped.
inline std::string escape_text(std::string_view t) {
  std::string s;
  s.reserve(t.size());
  for (char c : t) {
    if (c == '\\') s += "\\\\";
    else if (c == '\n') s += "\\n";
    else if (c == '\r') s += "\\r";
    else if (c == '\t') s += "\\t";
    else s += c;
  }
  return s;
}
// The text escape_text() wrote; a backslash before another character is kept as it is.
inline std::string unescape_text(std::string_view f) {
  std::string s;
  s.reserve(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    const char n = i + 1 < f.size() ? f[i + 1] : '\0';
    if (f[i] == '\\' && (n == '\\' || n == 'n' || n == 'r' || n == 't')) {
      s += n == 'n' ? '\n' : n == 'r' ? '\r' : n == 't' ? '\t' : '\\';
      ++i;
    } else {
      s += f[i];
    }
  }
  return s;
}

// The line that carries `m`, without its newline.
inline std::string encode(const rdzv_message& m) {
  struct writer {
    static std::string report(const std::optional<failure_report>& r) { return r ? "\t" + encode_report(*r) : ""; }
    std::string operator()(const rdzv_msg::hello& h) const {
      return "hello\t" + std::string(rdzv_protocol) + "\t" + one_field(h.token_hex) + "\t" + std::to_string(h.nnodes) +
             "\t" + std::to_string(h.node) + "\t" + std::to_string(h.max_restarts);
    }
    std::string operator()(const rdzv_msg::welcome&) const { return "welcome"; }
    std::string operator()(const rdzv_msg::refused& r) const { return "refused\t" + one_field(r.why); }
    std::string operator()(const rdzv_msg::failed& f) const {
      return "failed\t" + std::to_string(f.attempt) + "\t" + encode_report(f.report);
    }
    std::string operator()(const rdzv_msg::done& d) const {
      return "done\t" + std::to_string(d.attempt) + "\t" + std::to_string(d.code) + report(d.first);
    }
    std::string operator()(const rdzv_msg::leave& l) const { return "leave\t" + one_field(l.why); }
    std::string operator()(const rdzv_msg::start& s) const {
      return "start\t" + std::to_string(s.attempt) + report(s.after);
    }
    std::string operator()(const rdzv_msg::end& e) const {
      return "end\t" + std::to_string(e.attempt) + "\t" + std::to_string(e.code) + report(e.root_cause);
    }
    std::string operator()(const rdzv_msg::abort& a) const { return "abort\t" + one_field(a.why); }
    std::string operator()(const rdzv_msg::dump& d) const {
      return "dump\t" + std::to_string(d.attempt) + "\t" + (d.failure ? "1" : "0") + "\t" + one_field(d.why);
    }
    std::string operator()(const rdzv_msg::query& q) const {
      return "query\t" + one_field(q.token_hex) + "\t" + one_field(q.why);
    }
    std::string operator()(const rdzv_msg::collect& c) const { return "collect\t" + std::to_string(c.id); }
    std::string operator()(const rdzv_msg::records& r) const {
      return "records\t" + std::to_string(r.id) + "\t" + encode_process(r.process);
    }
    std::string operator()(const rdzv_msg::collected& c) const {
      return "collected\t" + std::to_string(c.id) + "\t" + std::to_string(c.count);
    }
    std::string operator()(const rdzv_msg::report& r) const {
      return "report\t" + std::to_string(r.id) + "\t" + escape_text(r.text);
    }
  };
  return std::visit(writer{}, m);
}

inline std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> f;
  for (std::size_t begin = 0;;) {
    const std::size_t tab = line.find('\t', begin);
    f.push_back(line.substr(begin, tab == std::string_view::npos ? std::string_view::npos : tab - begin));
    if (tab == std::string_view::npos) return f;
    begin = tab + 1;
  }
}

inline std::optional<long long> field_int(std::string_view f) {
  long long x = 0;
  auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), x);
  if (f.empty() || ec != std::errc() || end != f.data() + f.size()) return std::nullopt;
  return x;
}

// An unsigned number of at most `max`, written as decimal digits only.
inline std::optional<std::uint64_t> field_uint(std::string_view f, std::uint64_t max) {
  std::uint64_t x = 0;
  auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), x);
  if (f.empty() || f[0] == '-' || ec != std::errc() || end != f.data() + f.size() || x > max) return std::nullopt;
  return x;
}

// The process in fields[at..], which must be the last ones (encode_process).
inline std::optional<flight_process> decode_process(const std::vector<std::string_view>& f, std::size_t at) {
  using tutti::detail::flight_state;
  constexpr std::size_t head = 6, comm_fields = 6, op_fields = 14;
  if (f.size() < at + head) return std::nullopt;
  flight_process p;
  const auto job_rank = field_int(f[at]), pid = field_int(f[at + 1]);
  const auto has = field_uint(f[at + 2], 1), ncomms = field_uint(f[at + 5], tutti::detail::flight_slots);
  if (!job_rank || !pid || !has || !ncomms) return std::nullopt;
  p.job_rank = *job_rank, p.pid = static_cast<long>(*pid), p.has_records = *has != 0;
  p.status = std::string(f[at + 3]), p.source = std::string(f[at + 4]);
  std::size_t i = at + head;
  constexpr auto u64 = ~std::uint64_t{0}, u32 = std::uint64_t{0xffffffff};
  for (std::uint64_t c = 0; c < *ncomms; ++c) {
    if (f.size() < i + comm_fields) return std::nullopt;
    const auto rank = field_int(f[i]), size = field_int(f[i + 1]);
    const auto context = field_uint(f[i + 2], u64), total = field_uint(f[i + 3], u64),
               waiting = field_uint(f[i + 4], u64), nops = field_uint(f[i + 5], tutti::detail::flight_capacity);
    if (!rank || !size || !context || !total || !waiting || !nops || *rank < INT32_MIN || *rank > INT32_MAX ||
        *size < INT32_MIN || *size > INT32_MAX)
      return std::nullopt;
    flight_comm comm;
    comm.rank = static_cast<int>(*rank), comm.size = static_cast<int>(*size);
    comm.context = *context, comm.total = *total, comm.waiting = *waiting;
    i += comm_fields;
    for (std::uint64_t k = 0; k < *nops; ++k, i += op_fields) {
      if (f.size() < i + op_fields) return std::nullopt;
      std::optional<std::uint64_t> v[8];
      const std::uint64_t max[8] = {u64, u64, u64, u64, u32, u32, u32, u32};
      for (int j = 0; j < 8; ++j)
        if (j != 6 && !(v[j] = field_uint(f[i + j], max[j]))) return std::nullopt;
      const auto root = field_int(f[i + 6]);
      const auto coll = field_uint(f[i + 8], 255), elem = field_uint(f[i + 9], 255);
      const auto start = field_int(f[i + 11]), end = field_int(f[i + 12]);
      const auto state = field_uint(f[i + 13], static_cast<std::uint64_t>(flight_state::failed));
      if (!root || *root < INT32_MIN || *root > INT32_MAX || !coll ||
          !tutti::is_collective(static_cast<std::uint8_t>(*coll)) || !elem || !start || !end || !state)
        return std::nullopt;
      flight_op o;
      tutti::fingerprint& fp = o.fp;
      fp.context = *v[0], fp.seq = *v[1], fp.count = *v[2], fp.shape = *v[3];
      fp.dtype = static_cast<std::uint32_t>(*v[4]), fp.op = static_cast<std::uint32_t>(*v[5]);
      fp.root = static_cast<std::int32_t>(*root), fp.algo = static_cast<std::uint32_t>(*v[7]);
      fp.coll = static_cast<tutti::collective>(*coll), fp.elem_size = static_cast<std::uint8_t>(*elem);
      o.algorithm = std::string(f[i + 10]);
      o.start_ns = *start, o.end_ns = *end, o.state = static_cast<flight_state>(*state);
      comm.ops.push_back(std::move(o));
    }
    p.comms.push_back(std::move(comm));
  }
  if (i != f.size()) return std::nullopt;
  return p;
}

// The attempt in field 1 of a message, -1 when there is none.
inline long long attempt_field(const std::vector<std::string_view>& f) {
  const auto a = f.size() > 1 ? field_int(f[1]) : std::nullopt;
  return a && *a >= 0 ? *a : -1;
}

// The report in fields[at..], which must be the last twelve.
inline std::optional<failure_report> decode_report(const std::vector<std::string_view>& f, std::size_t at) {
  constexpr std::size_t numbers = 10;
  if (f.size() != at + numbers + 2) return std::nullopt;
  long long v[numbers];
  for (std::size_t i = 0; i < numbers; ++i) {
    const auto x = field_int(f[at + i]);
    if (!x) return std::nullopt;
    v[i] = *x;
  }
  failure_report r;
  r.attempt = v[0], r.node = v[1], r.rank = v[2], r.local_rank = v[3], r.pid = v[4];
  // 0 is the status of a rank that left early (failure_role::early_exit).
  r.exit_code = static_cast<int>(std::clamp<long long>(v[5], 0, 255)), r.unix_ms = v[6], r.no_restart = v[7] != 0;
  if (v[8] < 0 || v[8] > static_cast<long long>(failure_role::early_exit)) return std::nullopt;
  r.role = static_cast<failure_role>(v[8]);
  r.victim_of = v[9] < 0 ? -1 : v[9];
  r.what = std::string(f[at + numbers]);
  r.last_line = std::string(f[at + numbers + 1]);
  return r;
}

// The report that may end a message: none (no fields from `at` on) or one (the last twelve). False
// when the fields are neither.
inline bool decode_optional_report(const std::vector<std::string_view>& f, std::size_t at,
                                   std::optional<failure_report>& r) {
  r = f.size() == at ? std::nullopt : decode_report(f, at);
  return f.size() == at || r;
}

// The message on `line` (without its newline), or nothing when it is not one of this protocol's.
inline std::optional<rdzv_message> decode(std::string_view line) {
  const std::vector<std::string_view> f = split_fields(line);
  const std::string_view kind = f[0];
  const std::size_t n = f.size();
  if (kind == "hello" && n == 6 && f[1] == rdzv_protocol) {
    const auto nnodes = field_int(f[3]), node = field_int(f[4]), restarts = field_int(f[5]);
    if (nnodes && node && restarts) return rdzv_msg::hello{std::string(f[2]), *nnodes, *node, *restarts};
    return std::nullopt;
  }
  if (kind == "welcome" && n == 1) return rdzv_msg::welcome{};
  if (kind == "refused" && n == 2) return rdzv_msg::refused{std::string(f[1])};
  if (kind == "leave" && n == 2) return rdzv_msg::leave{std::string(f[1])};
  if (kind == "abort" && n == 2) return rdzv_msg::abort{std::string(f[1])};
  if (kind == "query" && n == 3) return rdzv_msg::query{std::string(f[1]), std::string(f[2])};
  // The others name an attempt (field 1); done and end a status (field 2).
  const long long attempt = attempt_field(f);
  if (attempt < 0) return std::nullopt;
  std::optional<failure_report> r;
  if (kind == "failed" && (r = decode_report(f, 2))) return rdzv_msg::failed{attempt, *r};
  if (kind == "start" && decode_optional_report(f, 2, r)) return rdzv_msg::start{attempt, r};
  if (kind == "collect" && n == 2) return rdzv_msg::collect{attempt};
  if (kind == "report" && n == 3) return rdzv_msg::report{attempt, unescape_text(f[2])};
  if (kind == "records") {
    if (std::optional<flight_process> p = decode_process(f, 2)) return rdzv_msg::records{attempt, std::move(*p)};
    return std::nullopt;
  }
  if (kind == "dump" && n == 4) {
    const auto failure = field_uint(f[2], 1);
    if (failure) return rdzv_msg::dump{attempt, *failure != 0, std::string(f[3])};
    return std::nullopt;
  }
  const auto code = n > 2 ? field_int(f[2]) : std::nullopt;
  if (!code) return std::nullopt;
  if (kind == "done" && decode_optional_report(f, 3, r)) return rdzv_msg::done{attempt, static_cast<int>(*code), r};
  if (kind == "end" && decode_optional_report(f, 3, r)) return rdzv_msg::end{attempt, static_cast<int>(*code), r};
  if (kind == "collected" && n == 3 && *code >= 0) return rdzv_msg::collected{attempt, *code};
  return std::nullopt;
}

}  // namespace tuttirun
