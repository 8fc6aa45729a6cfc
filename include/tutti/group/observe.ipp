// Definitions of group/observe.hpp (TUTTI_DECL; see tutti/detail/attributes.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "tutti/core/config.hpp"

namespace tutti {

TUTTI_DECL const op_totals* comm_stats::find(std::string_view name) const noexcept {
  for (const op_totals& t : ops)
    if (t.name == name) return &t;
  return nullptr;
}

namespace detail {
TUTTI_COLD TUTTI_DECL std::string fixed3(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}
}  // namespace detail

TUTTI_COLD TUTTI_DECL std::string comm_stats::text() const {
  std::string s = "rank " + std::to_string(rank) + " of " + std::to_string(size) + ", communicator " +
                  std::to_string(context) + ":\n";
  char line[160];
  for (const op_totals& t : ops) {
    std::snprintf(line, sizeof line, "  %-18.*s %10llu calls %14llu bytes %12.3f ms\n", static_cast<int>(t.name.size()),
                  t.name.data(), static_cast<unsigned long long>(t.calls), static_cast<unsigned long long>(t.bytes),
                  static_cast<double>(t.time.count()) / 1e6);
    s += line;
  }
  if (ops.empty()) s += "  no operations\n";
  s += "  waited for:";
  bool any = false;
  for (std::size_t p = 0; p < waited.size(); ++p)
    if (waited[p].count() > 0) {
      s += (any ? ", rank " : " rank ") + std::to_string(p) + " " +
           detail::fixed3(static_cast<double>(waited[p].count()) / 1e6) + " ms";
      any = true;
    }
  if (waited_for_all.count() > 0) {
    s += std::string(any ? ", " : " ") + "all ranks " + detail::fixed3(static_cast<double>(waited_for_all.count()) / 1e6) +
         " ms";
    any = true;
  }
  if (!any) s += " nobody";
  if (slowest_peer >= 0) s += "; slowest peer: rank " + std::to_string(slowest_peer);
  s += "\n";
  return s;
}

namespace detail {

TUTTI_DECL std::string_view kind_name(std::size_t kind) noexcept {
  if (kind < scheduled_count) return collectives[kind].name;
  if (kind == kind_send) return "send";
  if (kind == kind_recv) return "recv";
  if (kind == kind_group) return "new_group/split";
  return "other";
}

TUTTI_DECL bool op_counters::active() const noexcept {
  if (!s_) return false;  // moved from
  for (const auto& c : s_->calls)
    if (c.load(std::memory_order_relaxed)) return true;
  return false;
}

TUTTI_DECL comm_stats op_counters::snapshot(int rank, std::uint64_t context) const {
  comm_stats s;
  if (!s_) return s;  // moved from
  const state& st = *s_;
  s.rank = rank;
  s.size = st.size;
  s.context = context;
  for (std::size_t k = 0; k < op_kinds; ++k) {
    const std::uint64_t calls = st.calls[k].load(std::memory_order_relaxed);
    if (calls == 0) continue;
    s.ops.push_back({kind_name(k), calls, st.bytes[k].load(std::memory_order_relaxed),
                     std::chrono::nanoseconds(static_cast<std::int64_t>(st.ns[k].load(std::memory_order_relaxed)))});
  }
  s.waited_for_all = std::chrono::nanoseconds(st.waited[0].load(std::memory_order_relaxed));
  s.waited.resize(static_cast<std::size_t>(st.size));
  std::int64_t most = 0;
  for (int p = 0; p < st.size; ++p) {
    const std::int64_t ns = st.waited[static_cast<std::size_t>(p) + 1].load(std::memory_order_relaxed);
    s.waited[static_cast<std::size_t>(p)] = std::chrono::nanoseconds(ns);
    if (ns > most) {
      most = ns;
      s.slowest_peer = p;
    }
  }
  return s;
}

TUTTI_COLD TUTTI_DECL void call_hook(const op_hook& h, const op_event& e) noexcept {
  try {
    h(e);
  } catch (const std::exception& x) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true))
      std::fprintf(stderr, "tutti: a hook (on_start/on_end/on_error) threw, which tutti ignores: %s\n", x.what());
  } catch (...) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true)) std::fprintf(stderr, "tutti: a hook (on_start/on_end/on_error) threw; tutti ignores it\n");
  }
}

TUTTI_DECL const std::string& trace_dir() {
  static const std::string dir = [] {
    const char* d = getenv_nonempty("TUTTI_TRACE");
    return std::string(d ? d : "");
  }();
  return dir;
}

namespace trace_impl {
/// The process's trace: events gathered as JSON lines, written to one file. Leaked on purpose,
/// so that the flush at exit never meets a destroyed object.
struct trace_state {
  std::mutex mu;
  std::string pending;  // event lines not yet written, each followed by ",\n"
  std::string path;
  int fd = -1;
  bool failed = false;  // the file could not be written: said once, then nothing more
  bool started = false;  // the file has its opening and closing lines
  std::map<std::tuple<int, std::uint64_t, bool>, int> tracks;  // (rank, context, posted) -> tid
  std::map<int, int> next_tid;                                  // per rank
};

inline std::atomic<trace_state*> trace_made{nullptr};

TUTTI_DECL trace_state& trace() {
  static trace_state* s = [] {
    auto* t = new trace_state;
    trace_made.store(t, std::memory_order_release);
    std::atexit([] { trace_flush(); });
    return t;
  }();
  return *s;
}

TUTTI_DECL void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

/// Microseconds with three decimals, from nanoseconds.
TUTTI_DECL void micros(std::string& out, std::int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  out += std::to_string(ns / 1000);
  char b[8];
  std::snprintf(b, sizeof b, ".%03d", static_cast<int>(ns % 1000));
  out += b;
}

/// Writes `t.pending` to the file (under t.mu), keeping the file valid JSON: an opening line,
/// the events, and a closing line that the next write replaces.
TUTTI_DECL void write_pending(trace_state& t) {
  if (t.pending.empty() || t.failed) return;
  if (t.fd < 0) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    t.path = trace_dir() + "/tutti-trace-" + host + "-" + std::to_string(::getpid()) + ".json";
    t.fd = ::open(t.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (t.fd < 0) {
      t.failed = true;
      std::fprintf(stderr, "tutti: TUTTI_TRACE: cannot write %s (%s); no trace from this process\n", t.path.c_str(),
                   std::strerror(errno));
      return;
    }
  }
  static constexpr std::string_view close_line = "\n]}\n";
  std::string out;
  if (!t.started) {
    out = "{\"traceEvents\":[\n";
  } else {
    ::lseek(t.fd, -static_cast<off_t>(close_line.size()), SEEK_END);
    out = ",\n";
  }
  out.append(t.pending, 0, t.pending.size() - 2);  // without the last ",\n"
  out += close_line;
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t k = ::write(t.fd, out.data() + done, out.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      t.failed = true;
      std::fprintf(stderr, "tutti: TUTTI_TRACE: writing %s failed (%s); the trace stops here\n", t.path.c_str(),
                   std::strerror(errno));
      return;
    }
    done += static_cast<std::size_t>(k);
  }
  t.started = true;
  t.pending.clear();
}
}  // namespace trace_impl

TUTTI_DECL void trace_event(const observers& o, const op_event& e, const std::int64_t* waits_before,
                            const std::atomic<std::int64_t>* waits_now, int size) {
  using namespace trace_impl;
  trace_state& t = trace();
  const std::lock_guard lock(t.mu);
  const int pid = o.trace_rank;
  if (!t.next_tid.count(pid)) {
    t.next_tid[pid] = 1;
    t.pending += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
                 ",\"tid\":0,\"args\":{\"name\":\"rank " + std::to_string(pid) + "\"}},\n";
    t.pending += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
                 ",\"tid\":0,\"args\":{\"sort_index\":" + std::to_string(pid) + "}},\n";
  }
  auto [it, fresh] = t.tracks.try_emplace({pid, o.context, e.posted}, 0);
  if (fresh) {
    it->second = t.next_tid[pid]++;
    t.pending += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
                 ",\"tid\":" + std::to_string(it->second) + ",\"args\":{\"name\":\"communicator " +
                 std::to_string(o.context) + (e.posted ? ", posted" : "") + "\"}},\n";
  }
  const fingerprint& fp = *e.fp;
  std::string& s = t.pending;
  s += "{\"name\":";
  json_string(s, e.name);
  s += ",\"cat\":\"";
  s += fp.coll == collective::send_recv ? "p2p" : info(fp.coll).scheduled ? "collective" : "other";
  s += "\",\"ph\":\"X\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(it->second) + ",\"ts\":";
  micros(s, e.start_ns);
  s += ",\"dur\":";
  micros(s, e.end_ns - e.start_ns);
  s += ",\"args\":{\"seq\":" + std::to_string(fp.seq) + ",\"context\":" + std::to_string(fp.context) +
       ",\"rank\":" + std::to_string(e.rank) + ",\"algorithm\":";
  json_string(s, e.algorithm);
  s += ",\"bytes\":" + std::to_string(e.bytes) + ",\"fingerprint\":";
  json_string(s, fingerprint_summary(fp, e.algorithm));
  if (e.peer >= 0) s += ",\"peer\":" + std::to_string(e.peer) + ",\"tag\":" + std::to_string(fp.root);
  if (waits_before && waits_now) {
    std::string w;
    for (int p = -1; p < size; ++p) {
      const auto i = static_cast<std::size_t>(p + 1);
      const std::int64_t d = waits_now[i].load(std::memory_order_relaxed) - waits_before[i];
      if (d <= 0) continue;
      w += w.empty() ? "" : ",";
      w += p < 0 ? "\"all\":" : "\"" + std::to_string(p) + "\":";
      micros(w, d);
    }
    if (!w.empty()) s += ",\"wait_us\":{" + w + "}";
  }
  if (e.error) {
    s += ",\"error\":";
    json_string(s, e.error->what());
  }
  s += "}},\n";
  if (s.size() >= (256u << 10)) write_pending(t);
}

TUTTI_DECL void trace_flush() noexcept {
  using namespace trace_impl;
  trace_state* made = trace_made.load(std::memory_order_acquire);
  if (!made) return;
  try {
    trace_state& t = *made;
    const std::lock_guard lock(t.mu);
    write_pending(t);
  } catch (...) {
  }
}

}  // namespace detail
}  // namespace tutti
