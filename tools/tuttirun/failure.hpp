// tuttirun: a failure, as the exit summary and the other nodes learn it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <optional>
#include <regex>
#include <string_view>
#include <vector>
#include <string>

#include "common.hpp"

namespace tuttirun {

// What a rank's exit was to the attempt's failure, as its node's tuttirun judged it at the end
// of the attempt (failure_report::role).
enum class failure_role : int {
  cause = 0,       // it failed on its own (no "rank N failed, so ..." in its last words), or tuttirun did
  victim = 1,      // its last words blame another rank (victim_of)
  stopped = 2,     // killed by a signal tuttirun sent (after the failure)
  early_exit = 3,  // exited with status 0: the cause if a victim blames it, or it exited before any failure
};

struct failure_report {
  long long attempt = 0;
  long long node = 0;
  long long rank = -1, local_rank = -1;  // -1: not a rank's failure (a signal to tuttirun, ...)
  long long pid = -1;
  int exit_code = exit_launcher_error;
  std::string what;         // "exited with status 3", "was killed by signal 9 (SIGKILL)", or a sentence
  std::string last_line;    // the rank's last line on stderr
  long long unix_ms = 0;    // when tuttirun saw it, by its node's clock
  bool no_restart = false;  // a signal to tuttirun: the job ends after this attempt
  failure_role role = failure_role::cause;
  long long victim_of = -1;  // role victim: the job rank its last words blame
  bool operator==(const failure_report&) const = default;
};

inline long long unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// "2025-06-01 12:34:56.789 +0200": this host's local time.
inline std::string wall_time_text(long long unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char day[40], zone[16], ms[8];
  std::strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm);
  std::strftime(zone, sizeof zone, "%z", &tm);
  std::snprintf(ms, sizeof ms, ".%03d", static_cast<int>(unix_ms % 1000));
  return std::string(day) + ms + " " + zone;
}

// "rank 1 exited with status 3" ("rank 3 (node 1) exited ..." across nodes), or the sentence.
inline std::string cause_text(const failure_report& r, bool name_node) {
  if (r.rank < 0) return r.what;
  return "rank " + std::to_string(r.rank) + (name_node ? " (node " + std::to_string(r.node) + ")" : "") + " " +
         r.what;
}

// The job rank that a rank's last words on stderr blame for its failure, or -1. tutti names the
// origin of a failure first ("rank 1 failed with mismatch_error, so all_reduce(ring) on rank 0
// fails too: ...", "rank 1 (world rank 3) timed out, so ..."), and tcp the peer it lost
// ("barrier(ring): rank 2 lost rank 1 while receiving from it ..."); the first of these in the
// line counts (what follows is the origin's own account).
inline long long blamed_rank(std::string_view line) {
  static const std::regex notice(
      R"(rank ([0-9]{1,9})(?: \(world rank ([0-9]{1,9})\))? (?:failed|timed out|aborted its communicator)[^,]*, so .* fails too)");
  static const std::regex lost(R"(rank [0-9]+ lost rank ([0-9]{1,9})(?: \(world rank ([0-9]{1,9})\))? while)");
  long long blamed = -1;
  std::ptrdiff_t at = -1;
  for (const std::regex* re : {&notice, &lost}) {
    std::match_results<std::string_view::const_iterator> m;
    if (!std::regex_search(line.begin(), line.end(), m, *re)) continue;
    if (at >= 0 && m.position(0) >= at) continue;
    at = m.position(0);
    blamed = std::stoll(m[2].matched ? m[2].str() : m[1].str());
  }
  return blamed;
}

// The failure that the others followed, of those the nodes saw (each a rank's exit, or tuttirun's
// own failure): a rank that failed on its own (not a victim, whose last words blame another, nor
// one that tuttirun stopped), then one that exited with status 0, that a victim blames; else the
// earliest rank that failed on its own; else the earliest that exited with status 0 before any
// failure; else one a victim blames; else the earliest failure. The first failure seen in time is
// often a victim: its peer_lost may kill it before the rank it lost has exited. Empty when no
// failure is in `seen`.
inline std::optional<failure_report> pick_cause(const std::vector<failure_report>& seen) {
  auto blamed = [&](const failure_report& r) {
    return r.rank >= 0 && std::any_of(seen.begin(), seen.end(), [&](const failure_report& v) {
             return v.role == failure_role::victim && v.victim_of == r.rank;
           });
  };
  auto earliest = [&](auto&& fits) -> std::optional<failure_report> {
    std::optional<failure_report> best;
    for (const failure_report& r : seen)
      if (fits(r) && (!best || r.unix_ms < best->unix_ms)) best = r;
    return best;
  };
  const auto failed = [](const failure_report& r) { return r.role != failure_role::early_exit; };
  const std::optional<failure_report> first = earliest(failed);
  if (!first) return std::nullopt;
  for (failure_role role : {failure_role::cause, failure_role::early_exit})
    if (auto r = earliest([&](const failure_report& x) { return x.role == role && blamed(x); })) return r;
  if (auto r = earliest([](const failure_report& x) { return x.role == failure_role::cause; })) return r;
  if (auto r = earliest([&](const failure_report& x) {
        return x.role == failure_role::early_exit && x.unix_ms <= first->unix_ms;
      }))
    return r;
  if (auto r = earliest([&](const failure_report& x) { return failed(x) && blamed(x); })) return r;
  return first;
}

// What a node other than node 0 tells node 0 of its part (rdzv done): the cause it picks from
// its own ranks, or, where none of them failed, the first that exited with status 0 (node 0's
// victims may blame it).
inline std::optional<failure_report> node_pick(const std::vector<failure_report>& seen) {
  if (auto r = pick_cause(seen)) return r;
  std::optional<failure_report> best;
  for (const failure_report& r : seen)
    if (!best || r.unix_ms < best->unix_ms) best = r;
  return best;
}

// The job's exit status when `cause` ended it: its own, or where it exited with status 0 (it left
// early) the first status of the others that was not 0.
inline int job_status(const failure_report& cause, const std::vector<failure_report>& seen) {
  if (cause.exit_code != 0) return cause.exit_code;
  std::optional<failure_report> first;
  for (const failure_report& r : seen)
    if (r.exit_code != 0 && (!first || r.unix_ms < first->unix_ms)) first = r;
  return first ? first->exit_code : exit_launcher_error;
}

}  // namespace tuttirun
