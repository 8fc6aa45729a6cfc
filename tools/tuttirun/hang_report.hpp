// tuttirun: one hang report for the job. Every tutti process tells the launcher where its flight
// recorder's table lies (TUTTI_FLIGHT_MAP: `<dir>/<pid>.map`) and saves a copy of it when a call
// fails (`<dir>/<pid>.table`); the launcher reads the live tables with process_vm_readv (it is
// the ranks' ancestor, so Yama allows it, and a stopped or hung process is read like any other)
// and the saved ones of processes that have exited, and `hang_report` turns them into one text
// that names the cause: per communicator, the oldest collective some rank waits in, which ranks
// are in it, which never entered it and what they were last seen doing, and fingerprints that
// differ side by side. Reading (`read_flight_tables`) and analysing (`hang_report`, a pure
// function, unit-tested) are apart.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/detail/flight_recorder.hpp"

namespace tuttirun {

// One operation of a communicator, as a rank's flight recorder kept it.
struct flight_op {
  tutti::fingerprint fp;
  std::string algorithm;
  std::int64_t start_ns = 0, end_ns = 0;
  tutti::detail::flight_state state = tutti::detail::flight_state::empty;
  bool operator==(const flight_op&) const = default;
};

// One communicator's records in one process, oldest first.
struct flight_comm {
  int rank = 0, size = 0;
  std::uint64_t context = 0;
  std::uint64_t total = 0;    // operations recorded in all
  std::uint64_t waiting = 0;  // posted, not started
  std::vector<flight_op> ops;
  bool operator==(const flight_comm&) const = default;
};

// What the launcher knows of one process of the job.
struct flight_process {
  long long job_rank = -1;
  long pid = 0;
  std::string status;          // "running", "stopped by SIGSTOP", "exited with status 1", ...
  std::string source;          // "live", "saved when its call failed", or why there are no records
  std::vector<flight_comm> comms;
  bool has_records = false;
  bool operator==(const flight_process&) const = default;
};

namespace hang_detail {

inline std::string seconds(std::int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", static_cast<double>(ns) / 1e9);
  return b;
}

inline bool is_collective(const flight_op& o) {
  return o.fp.coll != tutti::collective::send_recv;
}

inline std::string op_text(const flight_op& o) {
  return tutti::detail::fingerprint_summary(o.fp, o.algorithm);
}

// The same call, as far as ranks must agree (not the algorithm: a rank that chose another one
// is a difference too, but the fingerprint's other fields say more).
inline bool same_call(const tutti::fingerprint& a, const tutti::fingerprint& b) {
  return a.coll == b.coll && a.count == b.count && a.shape == b.shape && a.dtype == b.dtype &&
         a.elem_size == b.elem_size && a.op == b.op && a.root == b.root;
}

inline std::string who(const flight_process& p, const flight_comm& c) {
  std::string s = "rank " + std::to_string(c.rank);
  if (c.context != 0 || p.job_rank != c.rank) s += " (job rank " + std::to_string(p.job_rank) + ")";
  return s;
}

// What a process was last seen doing, outside communicator `context`'s call.
inline std::string doing(const flight_process& p, const flight_comm& c, std::int64_t now) {
  for (const flight_comm& other : p.comms)
    if (&other != &c)
      for (const flight_op& o : other.ops)
        if (o.state == tutti::detail::flight_state::running)
          return "blocked in communicator " + std::to_string(other.context) + ": " + op_text(o) + ", for " +
                 seconds(now - o.start_ns);
  const flight_op* last = nullptr;
  for (const flight_op& o : c.ops)
    if (o.state != tutti::detail::flight_state::empty) last = &o;
  if (!last) return "no operation on this communicator yet";
  if (last->state == tutti::detail::flight_state::running) return "in " + op_text(*last);
  return std::string("last ") + (last->state == tutti::detail::flight_state::failed ? "failed " : "finished ") +
         op_text(*last) + " " + seconds(now - last->end_ns) + " ago; in its own code since";
}

}  // namespace hang_detail

// The report: one block per communicator where some rank waits in a collective (the oldest such
// collective), and a line naming the cause. `now_ns`: CLOCK_REALTIME, as the records'.
inline std::string hang_report(const std::vector<flight_process>& procs, std::int64_t now_ns) {
  using namespace hang_detail;
  using tutti::detail::flight_state;
  std::string out;
  std::vector<std::string> causes;
  // Members of each communicator: (process, its records of it). A communicator is its context
  // and its size: a world made by shrink or grow has context 0 too, beside the old one.
  std::map<std::pair<std::uint64_t, int>, std::vector<std::pair<const flight_process*, const flight_comm*>>> by_comm;
  for (const flight_process& p : procs)
    for (const flight_comm& c : p.comms) by_comm[{c.context, c.size}].emplace_back(&p, &c);

  for (const auto& [key, members] : by_comm) {
    const std::uint64_t context = key.first;
    // The call to report: the oldest collective some member failed in (the failure names it; a
    // rank still in an earlier one may only be slow to leave it), else the oldest some member
    // is in (its last collective, running).
    std::optional<std::uint64_t> failed_in, running_in;
    for (const auto& [p, c] : members) {
      const flight_op* last = nullptr;
      for (const flight_op& o : c->ops)
        if (is_collective(o)) last = &o;
      if (!last || last->state == flight_state::done) continue;
      std::optional<std::uint64_t>& oldest = last->state == flight_state::failed ? failed_in : running_in;
      if (!oldest || last->fp.seq < *oldest) oldest = last->fp.seq;
    }
    const std::optional<std::uint64_t> stuck = failed_in ? failed_in : running_in;
    std::vector<std::string> p2p;
    for (const auto& [p, c] : members)
      for (const flight_op& o : c->ops)
        if (!is_collective(o) && o.state == flight_state::running)
          p2p.push_back(who(*p, *c) + " in " + op_text(o) + " for " + seconds(now_ns - o.start_ns));
    if (!stuck && p2p.empty()) continue;
    const int size = key.second;
    out += "communicator " + std::to_string(context) + " (" + std::to_string(size) + " ranks):\n";
    for (const std::string& line : p2p) out += "  " + line + "\n";
    if (!stuck) continue;

    std::vector<std::string> in_it, passed, behind;
    std::vector<std::pair<std::string, const flight_op*>> calls;  // who, their record of the stuck call
    std::set<int> seen;
    const flight_op* example = nullptr;
    std::int64_t longest = 0;
    for (const auto& [p, c] : members) {
      seen.insert(c->rank);
      const flight_op* mine = nullptr;
      std::uint64_t newest = 0;
      bool any = false;
      for (const flight_op& o : c->ops)
        if (is_collective(o)) {
          if (o.fp.seq == *stuck) mine = &o;
          newest = any ? std::max(newest, o.fp.seq) : o.fp.seq;
          any = true;
        }
      const std::string name = who(*p, *c) + (p->status == "running" ? "" : " [" + p->status + "]");
      if (mine) {
        calls.emplace_back(name, mine);
        if (!example) example = mine;
        if (mine->state == flight_state::running) {
          in_it.push_back(name);
          longest = std::max(longest, now_ns - mine->start_ns);
        } else if (mine->state == flight_state::failed) {
          in_it.push_back(name + " (failed in it after " + seconds(mine->end_ns - mine->start_ns) + ")");
          longest = std::max(longest, mine->end_ns - mine->start_ns);
        } else {
          passed.push_back(name + ": finished it");
        }
      } else if (!any || newest < *stuck) {
        behind.push_back(name + ": " + doing(*p, *c, now_ns));
      } else {
        passed.push_back(name + ": went past it without a record of it");
      }
    }
    out += std::string(failed_in ? "  oldest call some rank failed in: " : "  oldest call some rank is in: ") +
           op_text(*example) + "\n";
    out += "  in it (up to " + seconds(longest) + "): ";
    for (std::size_t i = 0; i < in_it.size(); ++i) out += (i ? ", " : "") + in_it[i];
    out += "\n";
    for (const std::string& s : passed) out += "  " + s + "\n";
    std::vector<std::string> never, unknown;
    for (const std::string& s : behind) {
      out += "  never entered it: " + s + "\n";
      never.push_back(s.substr(0, s.find(':')));
    }
    for (int r = 0; r < size; ++r)
      if (!seen.count(r)) {
        std::string s = "rank " + std::to_string(r);
        if (context == 0)  // the world: group rank r is the process of job rank r, if the launcher knows it
          for (const flight_process& p : procs)
            if (p.job_rank == r && !p.has_records) s += " [" + p.status + (p.source.empty() ? "" : "; " + p.source) + "]";
        out += "  no record: " + s + " (dead before it saved its records, or it never made this communicator)\n";
        unknown.push_back(s);
      }
    // Ranks in the same call with different fingerprints, side by side.
    bool differ = false;
    for (const auto& [name, op] : calls) differ |= !same_call(op->fp, calls.front().second->fp);
    if (differ) {
      out += "  the ranks called it differently:\n";
      for (const auto& [name, op] : calls) out += "    " + name + ": " + op_text(*op) + "\n";
      causes.push_back("communicator " + std::to_string(context) + ": the ranks called #" + std::to_string(*stuck) +
                       " with different arguments (above)");
    }
    auto ranks_text = [](const std::vector<std::string>& names) {
      std::string t;
      for (std::size_t i = 0; i < names.size(); ++i) t += (i ? ", " : "") + names[i];
      return t;
    };
    if (!never.empty())
      causes.push_back("communicator " + std::to_string(context) + ": " + ranks_text(never) +
                       (never.size() == 1 ? " has" : " have") + " not entered " + op_text(*example) + ", which " +
                       std::to_string(in_it.size()) + (in_it.size() == 1 ? " rank is" : " ranks are") + " in");
    if (!unknown.empty())  // not a cause by itself: the ranks may have been in it when they died
      causes.push_back("communicator " + std::to_string(context) + ": " + ranks_text(unknown) + " left no records" +
                       (never.empty() && !differ ? " while the others are in " + op_text(*example) : ""));
  }
  if (out.empty()) out = "no rank is in a tutti call\n";
  for (const std::string& c : causes) out += "cause: " + c + "\n";
  return out;
}

// The report under a title, after one line per process: its status, and where its records are
// not to be had, why.
inline std::string titled_report(const std::string& title, const std::vector<flight_process>& procs,
                                 std::int64_t now_ns) {
  std::string text = title + "\n";
  for (const flight_process& p : procs)
    text += "  rank " + std::to_string(p.job_rank) + " (pid " + std::to_string(p.pid) + "): " + p.status +
            (p.has_records ? "" : ", " + p.source) + "\n";
  return text + hang_report(procs, now_ns);
}

// `text` on stderr, each line after "tuttirun: ", in one write.
inline void say_lines(const std::string& text) {
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = text.find('\n', at);
    out += "tuttirun: " + text.substr(at, nl == std::string::npos ? std::string::npos : nl - at) + "\n";
    at = nl == std::string::npos ? text.size() : nl + 1;
  }
  write_all(STDERR_FILENO, out);
}

// --- reading the tables

// A flight table read from a process or a file; null where it could not be read.
using flight_table_copy = std::unique_ptr<tutti::detail::flight_slot[]>;

// The records of `table`, as `hang_report` takes them (slots in use, records not being written).
inline std::vector<flight_comm> flight_comms(const tutti::detail::flight_slot* table) {
  using namespace tutti::detail;
  std::vector<flight_comm> comms;
  for (std::size_t s = 0; s < flight_slots; ++s) {
    const flight_slot& slot = table[s];
    if (!slot.used.load(std::memory_order_relaxed)) continue;
    flight_comm c;
    c.rank = slot.rank;
    c.size = slot.size;
    c.context = slot.context;
    c.total = slot.next.load(std::memory_order_relaxed);
    c.waiting = slot.waiting.load(std::memory_order_relaxed);
    const std::uint64_t shown = std::min<std::uint64_t>(c.total, flight_capacity);
    for (std::uint64_t i = c.total - shown; i < c.total; ++i) {
      const flight_entry& e = slot.ring[i % flight_capacity];
      if (e.version.load(std::memory_order_relaxed) & 1u) continue;  // being written
      if (e.r.state == flight_state::empty) continue;
      flight_op o;
      o.fp = e.r.fp;
      o.algorithm.assign(e.r.algorithm, strnlen(e.r.algorithm, sizeof e.r.algorithm));
      o.start_ns = e.r.start_ns;
      o.end_ns = e.r.end_ns;
      o.state = e.r.state;
      c.ops.push_back(o);
    }
    comms.push_back(std::move(c));
  }
  return comms;
}

// One process's map (`<dir>/<pid>.map`).
struct flight_map_entry {
  long pid = 0;
  long long job_rank = -1;
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  unsigned version = 0;
};

inline std::vector<flight_map_entry> read_flight_maps(const std::string& dir) {
  std::vector<flight_map_entry> maps;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return maps;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 5 || name.compare(name.size() - 4, 4, ".map") != 0) continue;
    FILE* f = std::fopen((dir + "/" + name).c_str(), "r");
    if (!f) continue;
    flight_map_entry m;
    unsigned long long addr = 0, bytes = 0;
    char magic[16] = {};
    if (std::fscanf(f, "%15s %u %llu %llu %lld", magic, &m.version, &addr, &bytes, &m.job_rank) == 5 &&
        std::strcmp(magic, "tutti-flight") == 0) {
      m.pid = std::atol(name.c_str());
      m.address = static_cast<std::uintptr_t>(addr);
      m.bytes = static_cast<std::size_t>(bytes);
      maps.push_back(m);
    }
    std::fclose(f);
  }
  ::closedir(d);
  return maps;
}

inline bool layout_matches(const flight_map_entry& m) {
  return m.version == tutti::detail::flight_layout_version && m.bytes == sizeof tutti::detail::flight_table;
}

// The live table of process `m.pid`; null (and `why`) where it cannot be read.
inline flight_table_copy read_live_table(const flight_map_entry& m, std::string& why) {
  using tutti::detail::flight_slot;
  flight_table_copy t(new flight_slot[tutti::detail::flight_slots]);
  iovec local{static_cast<void*>(t.get()), sizeof tutti::detail::flight_table};
  iovec remote{reinterpret_cast<void*>(m.address), m.bytes};
  const ssize_t n = ::process_vm_readv(static_cast<pid_t>(m.pid), &local, 1, &remote, 1, 0);
  if (n != static_cast<ssize_t>(m.bytes)) {
    why = n < 0 ? std::string("its memory could not be read: ") + std::strerror(errno) : "its table was read in part";
    return nullptr;
  }
  return t;
}

// The table process `pid` saved when a call failed (`<dir>/<pid>.table`); null if none.
inline flight_table_copy read_saved_table(const std::string& dir, long pid) {
  using tutti::detail::flight_slot;
  const int fd = ::open((dir + "/" + std::to_string(pid) + ".table").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  flight_table_copy t(new flight_slot[tutti::detail::flight_slots]);
  auto* p = reinterpret_cast<char*>(static_cast<void*>(t.get()));
  std::size_t done = 0;
  const std::size_t want = sizeof tutti::detail::flight_table;
  while (done < want) {
    const ssize_t k = ::read(fd, p + done, want - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    done += static_cast<std::size_t>(k);
  }
  ::close(fd);
  return done == want ? std::move(t) : nullptr;
}

// `p`'s records, from the table map `m` names: read live while the process `runs`, else as it
// saved them in `dir` when a call failed; `p.source` says which, or why there are none.
inline void read_records(flight_process& p, const flight_map_entry& m, const std::string& dir, bool runs) {
  if (!layout_matches(m)) {
    p.source = "its tutti's flight recorder differs from this tuttirun's";
    return;
  }
  std::string why_not;
  flight_table_copy t = runs ? read_live_table(m, why_not) : nullptr;
  if (t) p.source = "live";
  else if ((t = read_saved_table(dir, m.pid))) p.source = "saved when its call failed";
  else p.source = why_not.empty() ? "exited without saving its records" : why_not;
  if (t) {
    p.comms = flight_comms(t.get());
    p.has_records = true;
  }
}

// What /proc says of process `pid`: "running", "stopped" (state T or t), or "gone".
inline std::string process_state(long pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return "gone";
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* close = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
  if (!close || close + 2 >= buf + n) return "running";
  const char st = close[2];
  return st == 'T' || st == 't' ? "stopped" : st == 'Z' ? "gone" : "running";
}

// The processes that published their tables in `dir`, read live where they run (any state) and
// from what they saved where they are gone.
inline std::vector<flight_process> read_flight_dir(const std::string& dir) {
  std::vector<flight_process> procs;
  for (const flight_map_entry& m : read_flight_maps(dir)) {
    flight_process p;
    p.job_rank = m.job_rank;
    p.pid = m.pid;
    p.status = process_state(m.pid);
    read_records(p, m, dir, p.status != "gone");
    procs.push_back(std::move(p));
  }
  std::sort(procs.begin(), procs.end(), [](const flight_process& a, const flight_process& b) {
    return a.job_rank != b.job_rank ? a.job_rank < b.job_rank : a.pid < b.pid;
  });
  return procs;
}

// A launcher's flight-recorder directory: TMPDIR/tuttirun-flight.<host>.<pid>.XXXXXX.
inline std::string flight_dir_prefix() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string("tuttirun-flight.") + host + ".";
}
// The pid in such a directory's name, if it is this host's; 0 otherwise.
inline long flight_dir_pid(const std::string& name) {
  const std::string prefix = flight_dir_prefix();
  if (name.rfind(prefix, 0) != 0) return 0;
  return std::atol(name.c_str() + prefix.size());
}
// Whether the tuttirun that made directory `name` (of this host) still runs.
inline bool flight_dir_owner_alive(const std::string& name) {
  const long pid = flight_dir_pid(name);
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH);
}

}  // namespace tuttirun
