// tuttirun: the lines of the restart rendezvous across nodes, written and read by pure functions
// (rendezvous.hpp carries them over sockets).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "failure.hpp"

namespace tuttirun {

// With --nnodes > 1 and --max-restarts > 0, node 0's tuttirun serves a rendezvous on
// --master-addr:--rdzv-port and every other node's tuttirun keeps one connection to it. Lines
// of tab-separated fields:
//   hello tuttirun-rdzv/2 TOKEN NNODES NODE MAX_RESTARTS   a node joins (TOKEN in hex)
//   welcome | refused WHY                    node 0's answer
//   failed K REPORT       node -> 0: the first failure this node saw in attempt K;
//                         0 -> nodes: attempt K failed (the first report node 0 got): stop
//   done K CODE [REPORT]  node -> 0: attempt K is over here (every rank gone): this node's status
//                         and, if it failed, its first failure
//   leave WHY             node -> 0: this node's tuttirun is leaving (it received a signal)
//   start K [REPORT]      0 -> nodes: every node is ready: start attempt K (after REPORT's failure)
//   end K CODE [REPORT]   0 -> nodes: no more attempts (CODE 0: every rank succeeded)
//   abort WHY             0 -> nodes: a node is gone or late: stop the ranks and exit 1
// REPORT is a failure_report in twelve fields (/2: its role and the rank it blames; /1 had ten).
// A node's done carries its own judgement of its ranks' exits (the one that its ranks followed),
// from which node 0 picks the cause for all (pick_cause). Each line is one rdzv_message below: encode() writes
// it, decode() reads it back, or refuses a line that is not one (another program, a line cut
// short, a field that is not a number where one is due).

inline constexpr std::string_view rdzv_protocol = "tuttirun-rdzv/2";
inline constexpr std::size_t max_rdzv_line = 16384;

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
}  // namespace rdzv_msg

using rdzv_message = std::variant<rdzv_msg::hello, rdzv_msg::welcome, rdzv_msg::refused, rdzv_msg::failed,
                                  rdzv_msg::done, rdzv_msg::leave, rdzv_msg::start, rdzv_msg::end, rdzv_msg::abort>;

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
  // The others name an attempt (field 1); done and end a status (field 2).
  const long long attempt = attempt_field(f);
  if (attempt < 0) return std::nullopt;
  std::optional<failure_report> r;
  if (kind == "failed" && (r = decode_report(f, 2))) return rdzv_msg::failed{attempt, *r};
  if (kind == "start" && decode_optional_report(f, 2, r)) return rdzv_msg::start{attempt, r};
  const auto code = n > 2 ? field_int(f[2]) : std::nullopt;
  if (!code) return std::nullopt;
  if (kind == "done" && decode_optional_report(f, 3, r)) return rdzv_msg::done{attempt, static_cast<int>(*code), r};
  if (kind == "end" && decode_optional_report(f, 3, r)) return rdzv_msg::end{attempt, static_cast<int>(*code), r};
  return std::nullopt;
}

}  // namespace tuttirun
