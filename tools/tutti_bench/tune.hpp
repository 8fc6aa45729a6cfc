// tutti-bench --tune: measures every fixed algorithm per collective and size, writes the tuned
// table automatic uses (include/tutti/algorithm/tuned_table.hpp), then measures automatic with
// that table and prints automatic vs the best fixed algorithm per size.
//
// The driver is not a rank: it runs this program (the same binary) once per (np, repetition,
// algorithm) with --csv to a temporary file, all collectives at once, and takes per size the
// fastest of the repetitions (each repetition cycles through every algorithm, so a burst of
// load hits them alike; load on a shared machine only ever adds time, so the fastest run is the
// one closest to the algorithm's own cost: medians of 3 were bimodal here, a rank descheduled
// or not). Algorithms within `near` (5%) of the best are treated as ties. A tie keeps what
// automatic runs without a table (shared_memory on shm, the α-β rule elsewhere), so the table
// overrides it only where another algorithm measured more than 5% faster: on this VM whole
// minutes run in a slow mode where every algorithm measures alike, and a tune without this
// chose tree for every shm all_reduce up to 1 MiB at 2 ranks, twice as slow as shared_memory
// in the fast mode. Among other ties, the one that lasts over the most following sizes is
// kept, so noise does not split the table into one-size ranges. Adjacent sizes with the same
// winner become one range; the first range starts at 0 and the last has no upper bound.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench.hpp"

namespace tutti_bench {

struct tune_options {
  std::vector<int> np_list{2, 4};
  int reps = 3;
  std::string out;  // empty: print the rows on stdout
  double near = 0.05;
};

namespace tune_detail {

inline std::string self_exe(const char* argv0) {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) return std::string(buf, static_cast<std::size_t>(n));
  return argv0;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string c_string(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

/// The bytes automatic is asked about for a tutti-bench size column (float elements).
inline std::size_t run_bytes(tutti::collective c, std::size_t size, int np) {
  switch (tutti::info(c).size) {
    case tutti::size_basis::block:
    case tutti::size_basis::largest_block:  // with uniform counts, one rank's block
      return size / (4 * static_cast<std::size_t>(np)) * 4;
    case tutti::size_basis::none: return 0;
    default: return size;
  }
}

inline std::string command_output(const char* cmd) {
  std::string out;
  if (std::FILE* p = ::popen(cmd, "r")) {
    char b[256];
    while (std::fgets(b, sizeof b, p)) out += b;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// (collective, run bytes) -> times of the repetitions
using samples = std::map<std::pair<int, std::size_t>, std::vector<double>>;

/// Runs one child and adds its CSV rows to `into` (out-of-place time where the call has one).
inline bool run_child(const std::string& self, const options& o, int np, const std::string& algo,
                      const std::string& tutti_algo_env, const std::string& collectives, samples& into, int& failures) {
  char tmpl[] = "/tmp/tutti_tune_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) return false;
  ::close(fd);
  const std::string csv = tmpl, err = csv + ".err";
  std::string cmd;
  if (!tutti_algo_env.empty()) cmd += "TUTTI_ALGO=" + shell_quote(tutti_algo_env) + " ";
  else cmd += "env -u TUTTI_ALGO ";
  cmd += shell_quote(self) + " --transport " + transport_name(o.transport) + " --np " + std::to_string(np) +
         " --algo " + algo + " --collective " + collectives + " -b " + std::to_string(o.min_bytes) + " -e " + std::to_string(o.max_bytes) +
         " -f " + std::to_string(o.factor) + " -n " + std::to_string(o.iters) + " -w " + std::to_string(o.warmup);
  if (o.iters == 0) {  // calibrated: each size for --time-per-size seconds
    cmd += " --time-per-size ";
    cmd += std::to_string(o.seconds_per_size);
  }
  cmd += " -c 0 --csv " + shell_quote(csv) + " >/dev/null 2>" + shell_quote(err);
  const int rc = std::system(cmd.c_str());
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);  // header
  std::map<std::pair<int, std::size_t>, double> got;  // prefer out of place
  std::map<std::pair<int, std::size_t>, bool> got_oop;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    if (f.size() < 12) continue;
    const auto named = tutti::collective_named(f[1]);
    if (!named) continue;
    const int c = static_cast<int>(*named);
    const std::size_t bytes = run_bytes(static_cast<tutti::collective>(c), std::stoull(f[8]), np);
    const bool oop = f[10] == "0";
    const auto key = std::make_pair(c, bytes);
    if (!got.count(key) || (oop && !got_oop[key])) got[key] = std::stod(f[11]), got_oop[key] = oop;
  }
  for (auto& [k, t] : got) into[k].push_back(t);
  if (rc != 0) {
    ++failures;
    std::ifstream e(err);
    std::stringstream es;
    es << e.rdbuf();
    std::fprintf(stderr, "tutti-bench --tune: %s --np %d --algo %s%s failed (status %d): %s\n", transport_name(o.transport).c_str(), np,
                 algo.c_str(), tutti_algo_env.empty() ? "" : (" TUTTI_ALGO=" + tutti_algo_env).c_str(), rc, es.str().c_str());
  }
  std::remove(csv.c_str());
  std::remove(err.c_str());
  return rc == 0;
}

/// The collectives --tune measures in one child run: every scheduled one but the barrier (it runs
/// in runs of its own) and the v-collectives whose size not every rank knows (automatic chooses
/// them without a size: there is nothing to tune by).
inline bool tuned_with_sizes(tutti::collective c) {
  return c != tutti::collective::barrier && tutti::info(c).size != tutti::size_basis::unknown;
}

/// The time that counts among a size's repetitions: the fastest.
inline double fastest(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::min_element(v.begin(), v.end());
}

struct row_out {
  int coll, np;
  std::size_t lo, hi;  // hi = SIZE_MAX: any
  std::string alg;
};

}  // namespace tune_detail

/// The --tune driver. Returns the exit status.
inline int run_tune(const options& o, const tune_options& t, const char* argv0) {
  using namespace tune_detail;
  const std::string self = self_exe(argv0);
  // Every candidate automatic may pick by itself on this transport (not native: explicit only).
  std::vector<std::string> algos;
  for (std::size_t i = 0; i < tutti::algo::automatic::candidate_count; ++i) {
    options with = o;
    with.algo = std::string(tutti::algo::automatic::names[i]);
    if (!tutti::algo::automatic::explicit_only[i] && algo_runs_any(with)) algos.push_back(with.algo);
  }
  double load[3] = {0, 0, 0};
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    std::fclose(f);
  }
  std::fprintf(stdout, "# tutti-bench --tune: transport %s, np %s, sizes %zu..%zu x%zu, -n %d -w %d, %d repetitions, load %.2f\n",
               transport_name(o.transport).c_str(), [&] {
                 std::string s;
                 for (int n : t.np_list) {
                   if (!s.empty()) s += ',';
                   s += std::to_string(n);
                 }
                 return s;
               }().c_str(), o.min_bytes, o.max_bytes, o.factor, o.iters, o.warmup, t.reps, load[0]);
  std::fflush(stdout);
  int failures = 0;
  auto run_fixed = [&](int np, const std::string& a, samples& into) {
    std::string env, colls;
    options with = o;
    with.algo = a;
    for (std::size_t c = 0; c < tutti::scheduled_count; ++c) {
      const auto cc = static_cast<tutti::collective>(c);
      if (!tuned_with_sizes(cc) || !algo_supports(with, cc)) continue;
      const std::string name(tutti::collective_name(cc));
      env += (env.empty() ? "" : ",") + name + "=" + a;
      colls += (colls.empty() ? "" : ",") + name;
    }
    run_child(self, o, np, "automatic", env, colls, into, failures);
    run_child(self, o, np, a, "", "barrier", into, failures);
  };
  std::vector<row_out> rows;
  std::map<int, std::map<std::string, samples>> fixed;  // np -> algo -> samples
  for (int np : t.np_list) {
    // Each algorithm runs through TUTTI_ALGO for the collectives measured, and never for the
    // barrier tutti-bench itself runs before each timed loop: that barrier decides how far
    // apart the ranks start, which a few iterations of a rooted collective (broadcast, scatter:
    // the root runs ahead) feel; so it is automatic's in every run, fixed or not. The barrier
    // collective is measured in runs of its own.
    for (int r = 0; r < t.reps; ++r)
      for (const auto& a : algos) run_fixed(np, a, fixed[np][a]);
    // winners per collective
    for (int c = 0; c < static_cast<int>(tutti::scheduled_count); ++c) {
      std::vector<std::size_t> sizes;
      for (auto& [a, s] : fixed[np])
        for (auto& [k, v] : s)
          if (k.first == c && std::find(sizes.begin(), sizes.end(), k.second) == sizes.end()) sizes.push_back(k.second);
      std::sort(sizes.begin(), sizes.end());
      if (sizes.empty()) continue;
      auto time_of = [&](const std::string& a, std::size_t b) {
        auto& s = fixed[np][a];
        auto it = s.find({c, b});
        return it == s.end() ? INFINITY : fastest(it->second);
      };
      std::vector<std::vector<std::string>> near(sizes.size());
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        double best = INFINITY;
        for (auto& a : algos) best = std::min(best, time_of(a, sizes[i]));
        for (auto& a : algos)
          if (time_of(a, sizes[i]) <= best * (1 + t.near)) near[i].push_back(a);
      }
      // What automatic runs without a table: shared_memory on shm (windows), the rule elsewhere.
      auto builtin = [&](std::size_t b) {
        if (o.transport->supports && o.transport->supports(*tutti::algo::automatic::index_of("shared_memory"),
                                                           static_cast<tutti::collective>(c)))
          return std::string("shared_memory");
        return std::string(tutti::algo::automatic{}.rule(static_cast<tutti::collective>(c), b, np));
      };
      std::string cur;
      std::vector<std::string> pick(sizes.size());
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        if (near[i].empty()) continue;
        if (const auto b = builtin(sizes[i]); std::find(near[i].begin(), near[i].end(), b) != near[i].end()) {
          pick[i] = cur = b;  // a tie keeps the built-in choice
          continue;
        }
        if (std::find(near[i].begin(), near[i].end(), cur) == near[i].end()) {
          std::size_t longest = 0;
          double quickest = INFINITY;
          for (auto& a : near[i]) {
            std::size_t run = 0;
            while (i + run < sizes.size() &&
                   std::find(near[i + run].begin(), near[i + run].end(), a) != near[i + run].end())
              ++run;
            if (run > longest || (run == longest && time_of(a, sizes[i]) < quickest)) longest = run, quickest = time_of(a, sizes[i]), cur = a;
          }
        }
        pick[i] = cur;
      }
      std::size_t lo = 0;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        if (pick[i].empty()) continue;
        const bool last = i + 1 == sizes.size() || pick[i + 1] != pick[i];
        if (!last) continue;
        rows.push_back({c, np, lo, i + 1 == sizes.size() ? static_cast<std::size_t>(-1) : sizes[i], pick[i]});
        lo = sizes[i] + 1;
      }
    }
  }

  // ---- the table ----------------------------------------------------------------------------
  char date[32], host[256] = "?";
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  ::gethostname(host, sizeof host - 1);
  // the commit of the tree this program was built in (its directory's repository)
  const std::string dir = self.substr(0, self.find_last_of('/') + 1);
  std::string commit = command_output(("git -C " + shell_quote(dir.empty() ? "." : dir) + " rev-parse --short HEAD 2>/dev/null").c_str());
  if (!commit.empty() && !command_output(("git -C " + shell_quote(dir.empty() ? "." : dir) + " status --porcelain --untracked-files=no 2>/dev/null").c_str()).empty())
    commit += "+changes";
  char loadtxt[64];
  std::snprintf(loadtxt, sizeof loadtxt, "load %.2f", load[0]);
  const std::string source = "tutti-bench --tune, " + std::string(date) + ", " + host + " (" +
                             std::to_string(std::thread::hardware_concurrency()) + " cores, " + loadtxt + "), tutti " +
                             (commit.empty() ? "unknown" : commit) + ": " + o.command_line;
  auto size_lit = [](std::size_t b) { return b == static_cast<std::size_t>(-1) ? std::string("any") : std::to_string(b); };
  const std::string me(o.transport->tuning_kind);
  std::string mine;
  for (auto& r : rows)
    mine += "    {\"" + me + "\", collective::" + std::string(tutti::collective_name(static_cast<tutti::collective>(r.coll))) +
            ", " + std::to_string(r.np) + ", " + std::to_string(r.np) + ", " + size_lit(r.lo) + ", " + size_lit(r.hi) +
            ", \"" + r.alg + "\"},\n";
  // The kinds of the table: those of this build's transports (a user transport's may be added by hand).
  std::vector<std::string> kinds;
  std::map<std::string, std::string> sources;
  for (const auto* tr : transports())
    if (!tr->tuning_kind.empty() && !sources.count(std::string(tr->tuning_kind))) {
      kinds.emplace_back(tr->tuning_kind);
      sources[kinds.back()] = "nullptr";
    }
  std::string kept;  // other kinds' rows of the existing file
  std::string before, after;
  if (!t.out.empty()) {
    std::ifstream in(t.out);
    std::string line;
    int part = 0;              // 0 before the generated block, 1 in it, 2 after
    bool in_sources = false;   // inside `sources[] = {`
    while (std::getline(in, line)) {
      if (part == 0) {
        before += line + "\n";
        if (line.find("---- BEGIN GENERATED ----") != std::string::npos) part = 1;
      } else if (part == 1) {
        if (line.find("---- END GENERATED ----") != std::string::npos) {
          part = 2;
          after += line + "\n";
          continue;
        }
        if (line.find("sources[] = {") != std::string::npos) in_sources = true;
        if (line.find("rows[] = {") != std::string::npos) in_sources = false;
        for (const std::string& k : kinds) {
          const std::string tag = std::string("    {\"") + k + "\", ";
          if (line.rfind(tag, 0) != 0) continue;
          if (in_sources) {
            std::string v = line.substr(tag.size());
            if (v.size() >= 2 && v.compare(v.size() - 2, 2, "},") == 0) v.resize(v.size() - 2);
            sources[k] = v;
          } else if (k != me) {
            kept += line + "\n";
          }
        }
      } else {
        after += line + "\n";
      }
    }
    if (part != 2) before.clear(), after.clear();
  }
  sources[me] = c_string(source);
  std::string gen = "/// The run that produced each kind's rows (nullptr: never tuned).\n"
                    "inline constexpr source sources[] = {\n";
  for (const std::string& k : kinds) gen += "    {\"" + k + "\", " + sources[k] + "},\n";
  gen += "};\ninline constexpr row rows[] = {\n" + kept + mine;
  if (kept.empty() && mine.empty()) gen += "    {\"(none)\", collective::barrier, 0, 0, 0, 0, \"ring\"},  // placeholder, never matches\n";
  gen += "};\n";
  if (t.out.empty()) {
    std::fputs(gen.c_str(), stdout);
  } else {
    if (before.empty())
      throw std::runtime_error("--out " + t.out + ": not a tuned_table.hpp (no '---- BEGIN GENERATED ----' / '---- END' lines)");
    std::ofstream out(t.out);
    out << before << gen << after;
    std::fprintf(stdout, "# wrote %zu %s rows to %s\n", rows.size(), transport_name(o.transport).c_str(), t.out.c_str());
  }

  // ---- automatic with the new table vs the best fixed algorithm -------------------------------
  std::fprintf(stdout, "#\n# automatic (the new table, as TUTTI_ALGO) vs the best fixed algorithm, measured again interleaved, fastest of %d\n", t.reps);
  std::fprintf(stdout, "# %-3s %-15s %10s  %-19s %10s %10s %7s\n", "np", "collective", "bytes", "best fixed", "best(us)",
               "auto(us)", "ratio");
  int flagged = 0, compared = 0;
  double worst = 0;
  for (int np : t.np_list) {
    std::string env_main, env_barrier;
    for (int c = 0; c < static_cast<int>(tutti::scheduled_count); ++c) {
      std::string item;
      for (auto& r : rows)
        if (r.np == np && r.coll == c) {
          std::string range = r.hi == static_cast<std::size_t>(-1) ? ">=" + std::to_string(r.lo)
                                                                    : std::to_string(r.lo) + ".." + std::to_string(r.hi);
          item += (item.empty() ? std::string(tutti::collective_name(static_cast<tutti::collective>(c))) + "=" : ",") +
                  r.alg + "@" + range;
        }
      if (item.empty()) continue;
      if (c == static_cast<int>(tutti::collective::barrier)) env_barrier = item;
      else env_main += (env_main.empty() ? "" : ",") + item;
    }
    std::string colls;
    for (std::size_t c = 0; c < tutti::scheduled_count; ++c) {
      if (!tuned_with_sizes(static_cast<tutti::collective>(c))) continue;
      if (!colls.empty()) colls += ',';
      colls += tutti::collective_name(static_cast<tutti::collective>(c));
    }
    // Measured again, each repetition running every fixed algorithm and then automatic, so
    // that both sides of each ratio come from the same minutes of machine load.
    samples autos;
    std::map<std::string, samples> again;
    for (int r = 0; r < t.reps; ++r) {
      for (const auto& a : algos) run_fixed(np, a, again[a]);
      run_child(self, o, np, "automatic", env_main, colls, autos, failures);
      run_child(self, o, np, "automatic", env_barrier, "barrier", autos, failures);
    }
    for (auto& [k, v] : autos) {
      double best = INFINITY;
      std::string best_a;
      for (auto& a : algos) {
        auto it = again[a].find(k);
        if (it != again[a].end() && fastest(it->second) < best) best = fastest(it->second), best_a = a;
      }
      if (best_a.empty()) continue;
      const double mine_t = fastest(v), ratio = mine_t / best;
      ++compared;
      worst = std::max(worst, ratio);
      if (ratio > 1.10) ++flagged;
      std::fprintf(stdout, "  %-3d %-15s %10zu  %-19s %10.2f %10.2f %7.3f%s\n", np,
                   std::string(tutti::collective_name(static_cast<tutti::collective>(k.first))).c_str(), k.second,
                   best_a.c_str(), best, mine_t, ratio, ratio > 1.10 ? "  >10%" : "");
    }
  }
  std::fprintf(stdout, "# %d of %d sizes within 10%% of the best fixed algorithm (worst ratio %.3f); %d child runs failed\n",
               compared - flagged, compared, worst, failures);
  return failures ? 1 : 0;
}

}  // namespace tutti_bench
