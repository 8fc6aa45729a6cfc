// tuttirun: the lines of the restart rendezvous across nodes, written and read by pure functions
// (rendezvous.hpp carries them over sockets).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "failure.hpp"

namespace tuttirun {

// With --nnodes > 1 and --max-restarts > 0, node 0's tuttirun serves a rendezvous on
// --master-addr:--rdzv-port and every other node's tuttirun keeps one connection to it. Lines
// of tab-separated fields:
//   hello tuttirun-rdzv/1 TOKEN NNODES NODE MAX_RESTARTS   a node joins (TOKEN in hex)
//   welcome | refused WHY                    node 0's answer
//   failed K REPORT       node -> 0: the first failure this node saw in attempt K;
//                         0 -> nodes: attempt K failed (the first report node 0 got): stop
//   done K CODE [REPORT]  node -> 0: attempt K is over here (every rank gone): this node's status
//                         and, if it failed, its first failure
//   leave WHY             node -> 0: this node's tuttirun is leaving (it received a signal)
//   start K [REPORT]      0 -> nodes: every node is ready: start attempt K (after REPORT's failure)
//   end K CODE [REPORT]   0 -> nodes: no more attempts (CODE 0: every rank succeeded)
//   abort WHY             0 -> nodes: a node is gone or late: stop the ranks and exit 1

inline constexpr std::string_view rdzv_protocol = "tuttirun-rdzv/1";
inline constexpr std::size_t max_rdzv_line = 16384;

inline std::string one_field(std::string_view s) {
  std::string f(s);
  for (char& c : f)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return f;
}

inline std::string encode(const failure_report& r) {
  std::string s;
  for (long long v : {r.attempt, r.node, r.rank, r.local_rank, r.pid, static_cast<long long>(r.exit_code), r.unix_ms,
                      static_cast<long long>(r.no_restart)})
    s += std::to_string(v) + '\t';
  return s + one_field(r.what) + '\t' + one_field(r.last_line);
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

// The report in fields[at..], which must be the last ten.
inline std::optional<failure_report> decode_report(const std::vector<std::string_view>& f, std::size_t at) {
  if (f.size() != at + 10) return std::nullopt;
  long long v[8];
  for (std::size_t i = 0; i < 8; ++i) {
    const auto x = field_int(f[at + i]);
    if (!x) return std::nullopt;
    v[i] = *x;
  }
  failure_report r;
  r.attempt = v[0], r.node = v[1], r.rank = v[2], r.local_rank = v[3], r.pid = v[4];
  r.exit_code = static_cast<int>(std::clamp<long long>(v[5], 1, 255)), r.unix_ms = v[6], r.no_restart = v[7] != 0;
  r.what = std::string(f[at + 8]);
  r.last_line = std::string(f[at + 9]);
  return r;
}

}  // namespace tuttirun
