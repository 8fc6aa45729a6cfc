// tuttirun: a failure, as the exit summary and the other nodes learn it.
#pragma once

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

#include "common.hpp"

namespace tuttirun {

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

}  // namespace tuttirun
