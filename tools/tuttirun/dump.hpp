// tuttirun --dump: the hang report of a running job, from this node's flight directory or, for
// a job across nodes, the whole job's from node 0's tuttirun (a `query` on the rendezvous).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "hang_report.hpp"
#include "rendezvous.hpp"
#include "rendezvous_codec.hpp"

namespace tuttirun {

// How long `tuttirun --dump` waits for node 0's tuttirun's report.
inline constexpr auto query_within = std::chrono::seconds(15);

// The job's report from node 0's tuttirun, when DIR/rendezvous names it (a job across nodes:
// its launcher wrote host, port and the job's token there); nothing when there is none, or when
// node 0's does not answer (said on stderr: the caller prints this node's part).
inline std::optional<std::string> query_job(const std::string& dir) {
  // Only a note this user's tuttirun wrote (its own, not a link, no one else may write it):
  // another user's could send this one's --dump anywhere.
  const int note = ::open((dir + "/rendezvous").c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (note < 0) return std::nullopt;
  struct stat st {};
  std::string line;
  char buf[1024];
  if (::fstat(note, &st) == 0 && st.st_uid == ::getuid() && (st.st_mode & 022) == 0 && S_ISREG(st.st_mode)) {
    const ssize_t n = ::read(note, buf, sizeof buf - 1);
    if (n > 0) line.assign(buf, static_cast<std::size_t>(n));
  }
  ::close(note);
  if (const std::size_t nl = line.find('\n'); nl != std::string::npos) line.resize(nl);
  if (line.empty()) return std::nullopt;
  const std::vector<std::string_view> f = split_fields(line);
  const auto port = f.size() == 3 ? field_int(f[1]) : std::nullopt;
  if (!port || *port < 1 || *port > 65535) return std::nullopt;
  const std::string host(f[0]), where = host_port_text(host, static_cast<int>(*port));
  const auto until = steady_clock::now() + query_within;
  int sig = 0;
  std::string why;
  const int fd = connect_once(host, static_cast<int>(*port), steady_clock::now() + std::chrono::seconds(5), -1, sig, why);
  if (fd >= 0) {
    line_conn conn(fd, where);
    conn.send(encode(rdzv_msg::query{std::string(f[2]), "tuttirun --dump"}));
    std::vector<std::string> lines;
    while (why.empty() && steady_clock::now() < until) {
      pollfd p{fd, static_cast<short>(POLLIN | (conn.wants_out() ? POLLOUT : 0)), 0};
      ::poll(&p, 1, poll_ms_until(until));
      if (p.revents & POLLOUT) conn.flush();
      if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (!conn.receive(lines, why) && lines.empty()) break;
      for (const std::string& l : lines) {
        const std::optional<rdzv_message> m = decode(l);
        if (const auto* r = message_as<rdzv_msg::report>(m)) return r->text;
        if (const auto* r = message_as<rdzv_msg::refused>(m)) why = "it refused: " + r->why;
      }
      lines.clear();
    }
    if (why.empty()) why = "no report within " + std::to_string(query_within.count()) + " s";
  }
  write_all(STDERR_FILENO, "tuttirun: --dump: node 0's tuttirun at " + where + " did not give the job's report (" + why +
                               "); this node's ranks only:\n");
  return std::nullopt;
}

// `tuttirun --dump[=DIR]`: the report of the job whose ranks publish their tables in DIR; without
// DIR, of the one tuttirun job running on this node (its TMPDIR/tuttirun-flight.* directory).
inline int dump_job(std::string dir) {
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = tmp && *tmp ? tmp : "/tmp";
    std::vector<std::string> found;
    if (DIR* d = ::opendir(base.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        struct stat st {};
        if (flight_dir_owner_alive(name) && ::lstat((base + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
            st.st_uid == ::getuid() && !read_flight_maps(base + "/" + name).empty())
          found.push_back(base + "/" + name);
      }
      ::closedir(d);
    }
    if (found.empty()) {
      write_all(STDERR_FILENO, "tuttirun: --dump: no tuttirun job with tutti ranks runs on this node (none of " + base +
                                   "/tuttirun-flight.* has a rank's map); for ranks started otherwise, set "
                                   "TUTTI_FLIGHT_MAP=DIR for them and run tuttirun --dump=DIR\n");
      return exit_launcher_error;
    }
    if (found.size() > 1) {
      std::string text = "tuttirun: --dump: " + std::to_string(found.size()) + " jobs run on this node; name one:\n";
      for (const std::string& f : found) text += "  tuttirun --dump=" + f + "\n";
      write_all(STDERR_FILENO, text);
      return exit_usage;
    }
    dir = found.front();
  }
  // A job across nodes: node 0's tuttirun gathers the whole job's report.
  if (std::optional<std::string> text = query_job(dir)) {
    write_all(STDOUT_FILENO, *text);
    return 0;
  }
  const std::vector<flight_process> procs = read_flight_dir(dir);
  if (procs.empty()) {
    write_all(STDERR_FILENO, "tuttirun: --dump: no rank has published its flight recorder in " + dir + "\n");
    return exit_launcher_error;
  }
  write_all(STDOUT_FILENO, titled_report("hang report of " + dir + ":", procs, tutti::detail::realtime_ns()));
  return 0;
}

}  // namespace tuttirun
