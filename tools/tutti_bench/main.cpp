// tutti-bench: nccl-tests-style benchmark of tutti's collectives, over shm, tcp, inproc (threads) or MPI.
//
//   tutti-bench --transport shm --np 4 --collective all_reduce -b 8 -e 64M -f 2 -c 1
//
// Without a launcher in the environment it starts itself through `tuttirun --nproc-per-node=N`
// (the tuttirun next to this program, else the one on PATH); under tuttirun, torchrun, mpirun or
// srun it is one rank of their job. `--transport inproc` runs N threads in this process.
// Rank 0 prints nccl-tests' table (or OSU's with --osu) and writes --csv / --json.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "tune.hpp"

namespace tutti_bench {

namespace {

constexpr const char* usage_text = R"(usage: tutti-bench [flags]

nccl-tests-style benchmark of tutti's collectives. Rank 0 prints one row per size:
size, count, type, redop, root, then time (us), algbw and busbw (GB/s) and #wrong, out of place
and in place (N/A where tutti's call has no such form: broadcast and reduce are in place only,
all_to_all and reduce_scatter out of place only).

  -b, --minbytes SIZE      smallest size (default 8); suffixes K, M, G (powers of 1024)
  -e, --maxbytes SIZE      largest size (default 32M)
  -f, --stepfactor F       multiply the size by F each step (default 2)
  -n, --iters N            timed iterations per size (default 20); 0: as many as fill
                           --time-per-size seconds at the pace of the warm-up
  -w, --warmup_iters N     untimed iterations before (default 5)
  -c, --check 0|1          check every result after the timed loop (default 1)
  -d, --datatype T         float, double, int32, int64, uint8, half (float16), bfloat16
  -o, --op OP              sum, prod, min, max, avg (reduce, all_reduce, reduce_scatter(_v))
  -r, --root R             root of broadcast, reduce, gather(_v), scatter(_v) (default 0)
  --collective C           a collective (listed below), a comma-separated list, or all
  --counts P               the v-collectives' counts: uniform (default: every rank the same
                           block), linear (rank r's block grows with r; the same total), or
                           one-heavy (rank 0 holds the whole total, the others nothing; for
                           all_to_all_v every rank sends everything to rank 0)
  --transport T            one of this build's transports (listed below; shm by default); the
                           device ones measure all_reduce of float, half or bfloat16 sums on
                           device buffers, beside raw NCCL and the device's copy-rate bound
  --algo A                 automatic (default), ring, tree, recursive_doubling, direct,
                           shared_memory (shm), native (mpi)
  --np N                   ranks: starts tuttirun --nproc-per-node=N (inproc: N threads);
                           under a launcher, must equal its world size
  --csv FILE               one row per size and placement ('-': stdout, and no table):
                           library,collective,transport,algorithm,np,dtype,op,root,bytes,count,
                           in_place,time_us,algbw_GBps,busbw_GBps,wrong (wrong -1: unchecked)
  --json FILE              {"meta": {...}, "results": [the same fields]} ('-': stdout)
  --osu                    OSU-style tables (Size, Avg/Min/Max Latency(us), Iterations)
  --time-per-size S        with -n 0: seconds per size (default 0.25)
  --data-varying BYTES     the warm-up and timed calls rotate over as many buffer sets as fill
                           BYTES per rank (at most 64), each with inputs of its own, so that no
                           call finds its buffers where the last one left them in the cache (the
                           memory-wall figures; the peers' harness takes the same flag); 0
                           (default): one set
  --progress               progress line on stderr even when it is not a terminal
  --tune                   measure every fixed algorithm per collective and size (over
                           --transport, at each --np-list size, all collectives), write the
                           tuned table automatic uses, then print automatic (with that table)
                           vs the best fixed algorithm per size, flagging ratios over 1.10
  --np-list N,N,...        --tune: the group sizes to measure (default 2,4)
  --reps R                 --tune: repetitions per algorithm; the fastest counts (default 3)
  --out FILE               --tune: the tuned_table.hpp to update (this transport's rows and
                           source are replaced, the others kept); default: rows on stdout
  --list-collectives       one line per collective: its name, whether its size column is np
                           blocks of the count column ("np") or one ("1"), and its placements
                           (0: out of place, 1: in place)
  -h, --help               this text

Time is the slowest rank's mean time per call; busbw = algbw x the nccl-tests factor
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all, gather, scatter and their
v-forms (n-1)/n; broadcast, reduce 1). The size of a v-collective is the sum of its counts,
its count column the average block. Exit status: 0, 1 (an error or a wrong result), 2 (bad
flags).
)";

struct usage_error_exit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::size_t parse_size(std::string_view flag, std::string_view v) {
  std::string s(v);
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(s.c_str(), &end);
  std::string_view rest(end);
  double mult = 1;
  if (!rest.empty()) {
    switch (rest.front()) {
      case 'k': case 'K': mult = 1024.0; break;
      case 'm': case 'M': mult = 1024.0 * 1024; break;
      case 'g': case 'G': mult = 1024.0 * 1024 * 1024; break;
      case 'b': case 'B': break;
      default: mult = 0;
    }
    if (mult != 0 && rest.front() != 'b' && rest.front() != 'B') rest.remove_prefix(1);
    if (rest == "iB" || rest == "B" || rest == "b") rest = {};
  }
  if (s.empty() || end == s.c_str() || errno || mult == 0 || !rest.empty() || !(x >= 0) || x * mult > 1e15)
    throw usage_error_exit(std::string(flag) + " " + s + ": expected a size in bytes, like 8, 64K, 32M or 1G");
  return static_cast<std::size_t>(x * mult);
}

long parse_int(std::string_view flag, std::string_view v, long lo, long hi) {
  std::string s(v);
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || errno || x < lo || x > hi)
    throw usage_error_exit(std::string(flag) + " " + s + ": expected an integer in " + std::to_string(lo) + ".." +
                           std::to_string(hi));
  return x;
}

std::optional<tutti::collective> collective_named(std::string_view n) {
  if (const auto c = tutti::collective_named(n)) return c;
  if (n == "allreduce") return tutti::collective::all_reduce;
  if (n == "allgather") return tutti::collective::all_gather;
  if (n == "alltoall") return tutti::collective::all_to_all;
  if (n == "reducescatter") return tutti::collective::reduce_scatter;
  return std::nullopt;
}

struct parsed {
  options o;
  bool tune = false;
  tune_options t;
  bool collectives_all = false;
  bool help = false;
  bool list = false;
};

parsed parse_command_line(int argc, char** argv) {
  parsed p;
  options& o = p.o;
  o.transport = transport_named("shm");
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    bool inline_value = false;
    if (flag.starts_with("--") && flag.find('=') != std::string::npos) {
      value = flag.substr(flag.find('=') + 1);
      flag = flag.substr(0, flag.find('='));
      inline_value = true;
    }
    auto next = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw usage_error_exit(flag + " needs a value");
      return argv[++i];
    };
    auto no_value = [&] {
      if (inline_value) throw usage_error_exit(flag + " takes no value");
    };
    if (flag == "-h" || flag == "--help") no_value(), p.help = true;
    else if (flag == "--list-collectives") no_value(), p.list = true;
    else if (flag == "-b" || flag == "--minbytes") o.min_bytes = parse_size(flag, next());
    else if (flag == "-e" || flag == "--maxbytes") o.max_bytes = parse_size(flag, next());
    else if (flag == "-f" || flag == "--stepfactor") o.factor = static_cast<std::size_t>(parse_int(flag, next(), 1, 1 << 20));
    else if (flag == "-n" || flag == "--iters") o.iters = static_cast<int>(parse_int(flag, next(), 0, 100000000));
    else if (flag == "-w" || flag == "--warmup_iters") o.warmup = static_cast<int>(parse_int(flag, next(), 0, 100000000));
    else if (flag == "-c" || flag == "--check") o.check = parse_int(flag, next(), 0, 1) != 0;
    else if (flag == "-r" || flag == "--root") o.root = static_cast<int>(parse_int(flag, next(), 0, 1 << 20));
    else if (flag == "--np") o.np = static_cast<int>(parse_int(flag, next(), 1, 4096));
    else if (flag == "--json") o.json_path = next();
    else if (flag == "--csv") o.csv_path = next();
    else if (flag == "--osu") no_value(), o.osu = true;
    else if (flag == "--progress") no_value(), o.progress = true;
    else if (flag == "--data-varying") o.data_varying = parse_size(flag, next());
    else if (flag == "--time-per-size") {
      const std::string v = next();
      char* end = nullptr;
      o.seconds_per_size = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !(o.seconds_per_size > 0) || o.seconds_per_size > 3600)
        throw usage_error_exit("--time-per-size " + v + ": expected seconds, like 0.25");
    } else if (flag == "--tune") {
      no_value(), p.tune = true;
    } else if (flag == "--np-list") {
      const std::string v = next();
      p.t.np_list.clear();
      std::string_view rest = v;
      while (true) {
        const auto comma = rest.find(',');
        p.t.np_list.push_back(static_cast<int>(parse_int(flag, rest.substr(0, comma), 2, 4096)));
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    } else if (flag == "--reps") {
      p.t.reps = static_cast<int>(parse_int(flag, next(), 1, 1000));
    } else if (flag == "--out") {
      p.t.out = next();
    } else if (flag == "-d" || flag == "--datatype") {
      const std::string v = next();
      if (v == "float" || v == "float32") o.dtype = dtype_kind::f32;
      else if (v == "double" || v == "float64") o.dtype = dtype_kind::f64;
      else if (v == "int32") o.dtype = dtype_kind::i32;
      else if (v == "int64") o.dtype = dtype_kind::i64;
      else if (v == "uint8") o.dtype = dtype_kind::u8;
      else if (v == "half" || v == "float16") o.dtype = dtype_kind::f16;
      else if (v == "bfloat16") o.dtype = dtype_kind::bf16;
      else throw usage_error_exit("-d " + v + ": unknown type (float, double, int32, int64, uint8, half/float16, bfloat16)");
    } else if (flag == "-o" || flag == "--op") {
      const std::string v = next();
      if (v == "sum") o.op = op_kind::sum;
      else if (v == "prod") o.op = op_kind::prod;
      else if (v == "min") o.op = op_kind::min;
      else if (v == "max") o.op = op_kind::max;
      else if (v == "avg") o.op = op_kind::avg;
      else throw usage_error_exit("-o " + v + ": unknown op (sum, prod, min, max, avg)");
    } else if (flag == "--collective") {
      const std::string v = next();
      o.collectives.clear();
      p.collectives_all = v == "all";
      if (p.collectives_all) {
        for (std::size_t c = 0; c < tutti::scheduled_count; ++c) o.collectives.push_back(static_cast<tutti::collective>(c));
      } else {
        std::string_view rest = v;
        while (true) {
          const auto comma = rest.find(',');
          const auto name = rest.substr(0, comma);
          const auto c = collective_named(name);
          if (!c)
            throw usage_error_exit("--collective " + std::string(name) + ": unknown collective (" +
                                   std::string(tutti::scheduled_names()) + ", or all)");
          o.collectives.push_back(*c);
          if (comma == std::string_view::npos) break;
          rest.remove_prefix(comma + 1);
        }
      }
    } else if (flag == "--transport") {
      const std::string v = next();
      o.transport = transport_named(v);
      if (!o.transport) {
        std::string names;
        for (const auto* t : transports()) names += (names.empty() ? "" : ", ") + std::string(t->name);
        throw usage_error_exit("--transport " + v + ": unknown transport (this build has " + names + ")");
      }
    } else if (flag == "--algo") {
      o.algo = next();
      if (o.algo != "automatic" && !tutti::algo::automatic::index_of(o.algo)) {
        std::string names = "automatic";
        for (auto n : tutti::algo::automatic::names) names += ", " + std::string(n);
        throw usage_error_exit("--algo " + o.algo + ": unknown algorithm (" + names + ")");
      }
    } else if (flag == "--counts") {
      const std::string v = next();
      if (v == "uniform") o.counts = counts_pattern::uniform;
      else if (v == "linear") o.counts = counts_pattern::linear;
      else if (v == "one-heavy") o.counts = counts_pattern::one_heavy;
      else throw usage_error_exit("--counts " + v + ": unknown pattern (uniform, linear, one-heavy)");
    } else {
      throw usage_error_exit("unknown flag " + flag);
    }
  }
  if (p.help || p.list) return p;
  if (o.min_bytes > o.max_bytes)
    throw usage_error_exit("-b " + std::to_string(o.min_bytes) + " is larger than -e " + std::to_string(o.max_bytes));
  if (o.factor < 2 && o.min_bytes != o.max_bytes)
    throw usage_error_exit("-f " + std::to_string(o.factor) + ": the step factor must be at least 2 (or -b equal to -e)");
  if (o.np && o.root >= o.np)
    throw usage_error_exit("-r " + std::to_string(o.root) + " is not a rank of --np " + std::to_string(o.np));
  if (o.transport->device) {
    for (auto c : o.collectives)
      if (c != tutti::collective::all_reduce)
        throw usage_error_exit("--transport " + std::string(transport_name(o.transport).c_str()) +
                               ": this benchmark measures all_reduce on device buffers only");
    if (o.algo != "automatic") throw usage_error_exit("--algo: the device transports run their own (automatic)");
    return p;
  }
  if (const auto i = tutti::algo::automatic::index_of(o.algo); i && !algo_runs_any(o)) {
    throw usage_error_exit("--algo " + o.algo + " needs " + std::string(tutti::algo::automatic::needs[*i]) + "; --transport " +
                           std::string(transport_name(o.transport).c_str()) + " has none");
  }
  if (!p.collectives_all)
    for (auto c : o.collectives) {
      if (!algo_supports(o, c))
        throw usage_error_exit("--algo " + o.algo + " has no " + std::string(tutti::collective_name(c)) +
                               " schedule (see the table in README.md); pick another --algo, or automatic");
      if (const auto why = skip_reason(o, c); !why.empty()) throw usage_error_exit(std::string(tutti::collective_name(c)) + ": " + why);
    }
  if (o.csv_path == "-" && o.json_path == "-") throw usage_error_exit("--csv - and --json - both ask for stdout");
  return p;
}

bool launcher_in_environment() {
  for (const char* v : {"TUTTI_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v); s && *s) return true;
  return false;
}

/// Re-runs this program under `tuttirun --no-prefix --nproc-per-node=N`; returns only on failure.
[[noreturn]] void launch_self(int np, int argc, char** argv) {
  std::string self(4096, '\0');
  const ssize_t k = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (k <= 0) throw std::runtime_error(std::string("cannot find this program (/proc/self/exe): ") + std::strerror(errno));
  self.resize(static_cast<std::size_t>(k));
  std::string launcher = self.substr(0, self.rfind('/') + 1) + "tuttirun";
  if (::access(launcher.c_str(), X_OK) != 0) launcher = "tuttirun";  // from PATH
  std::vector<std::string> args = {launcher, "--no-prefix", "--nproc-per-node=" + std::to_string(np), self};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::fflush(nullptr);
  ::execvp(launcher.c_str(), cargs.data());
  throw std::runtime_error("cannot start " + launcher + " (" + std::strerror(errno) +
                           "): put tuttirun next to tutti-bench or on PATH, or run tutti-bench under a launcher");
}

}  // namespace

const char* dtype_name(dtype_kind d) {
  constexpr const char* n[] = {"float", "double", "int32", "int64", "uint8", "float16", "bfloat16"};
  return n[static_cast<int>(d)];
}
const char* op_name(op_kind o) {
  constexpr const char* n[] = {"sum", "prod", "min", "max", "avg"};
  return n[static_cast<int>(o)];
}
std::vector<const transport_entry*>& transports() {
  static std::vector<const transport_entry*> all;
  return all;
}

const transport_entry* transport_named(std::string_view name) {
  for (const auto* t : transports())
    if (t->name == name || (!t->alias.empty() && t->alias == name)) return t;
  return nullptr;
}

bool algo_supports(const options& o, tutti::collective c) {
  if (o.algo == "automatic") return true;
  const auto i = tutti::algo::automatic::index_of(o.algo);
  return i && o.transport->supports && o.transport->supports(*i, c);
}

std::string skip_reason(const options& o, tutti::collective c) {
  if (!algo_supports(o, c)) return "algorithm " + o.algo + " has no " + std::string(tutti::collective_name(c)) + " schedule";
  if (o.op == op_kind::avg && tutti::info(c).ordered)
    return "-o avg: it reduces in rank order, where avg (a sum divided by the group size) has no meaning";
  return {};
}

bool algo_runs_any(const options& o) {
  for (std::size_t c = 0; c < tutti::scheduled_count; ++c)
    if (algo_supports(o, static_cast<tutti::collective>(c))) return true;
  return false;
}

// ---- the report -------------------------------------------------------------------------------

namespace {
std::string human_bytes(std::size_t b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double x = static_cast<double>(b);
  while (x >= 1024 && u < 4) x /= 1024, ++u;
  char s[32];
  std::snprintf(s, sizeof s, x == std::floor(x) ? "%.0f %s" : "%.1f %s", x, unit[u]);
  return s;
}
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\', out += ch;
    else if (static_cast<unsigned char>(ch) < 0x20) {
      char e[8];
      std::snprintf(e, sizeof e, "\\u%04x", ch);
      out += e;
    } else out += ch;
  }
  return out + "\"";
}
}  // namespace

struct report::impl {
  const options& o;
  int np, threads;
  std::FILE* table = stdout;  // nullptr: --csv - or --json - took stdout
  std::FILE* csv = nullptr;
  std::string json_rows;
  double busbw_sum = 0;
  int busbw_rows = 0;
  long long wrong = 0;
  bool progress_shown = false;
  bool tty = ::isatty(2) != 0;

  impl(const options& opt, int n, int t) : o(opt), np(n), threads(t) {}

  std::string algo_label() const {
    if (o.algo != "automatic") return o.algo;
    const char* env = std::getenv("TUTTI_ALGO");
    return env && *env ? std::string("automatic (TUTTI_ALGO=") + env + ")" : "automatic";
  }
  void clear_progress() {
    if (progress_shown && tty) std::fprintf(stderr, "\r%60s\r", "");
    progress_shown = false;
  }
  void csv_row(const size_result& r, const measurement& m, bool in_place, double algbw, double busbw) {
    char line[512];
    std::snprintf(line, sizeof line, "tutti,%s,%s,%s,%d,%s,%s,%d,%zu,%zu,%d,%.3f,%.4f,%.4f,%lld",
                  std::string(tutti::collective_name(r.coll)).c_str(), transport_name(o.transport).c_str(), o.algo.c_str(), np,
                  dtype_name(o.dtype), r.uses_op ? op_name(o.op) : "none", r.root, r.bytes, r.count, in_place ? 1 : 0,
                  m.time_us, algbw, busbw, m.wrong);
    if (csv) std::fprintf(csv, "%s\n", line), std::fflush(csv);
    if (!o.json_path.empty()) {
      char j[768];
      std::snprintf(j, sizeof j,
                    "%s    {\"library\": \"tutti\", \"collective\": \"%s\", \"transport\": \"%s\", \"algorithm\": %s, "
                    "\"np\": %d, \"dtype\": \"%s\", \"op\": \"%s\", \"root\": %d, \"bytes\": %zu, \"count\": %zu, "
                    "\"in_place\": %d, \"time_us\": %.3f, \"algbw_GBps\": %.4f, \"busbw_GBps\": %.4f, \"wrong\": %lld, "
                    "\"iters\": %d, \"min_us\": %.3f, \"avg_us\": %.3f}",
                    json_rows.empty() ? "" : ",\n", std::string(tutti::collective_name(r.coll)).c_str(),
                    transport_name(o.transport).c_str(), json_string(o.algo).c_str(), np, dtype_name(o.dtype),
                    r.uses_op ? op_name(o.op) : "none", r.root, r.bytes, r.count, in_place ? 1 : 0, m.time_us, algbw,
                    busbw, m.wrong, m.iters, m.min_us, m.avg_us);
      json_rows += j;
    }
  }
};

report::report(const options& o, int np, int threads) : p_(new impl(o, np, threads)) {
  if (o.csv_path == "-" || o.json_path == "-") p_->table = nullptr;
  if (!o.csv_path.empty()) {
    p_->csv = o.csv_path == "-" ? stdout : std::fopen(o.csv_path.c_str(), "w");
    if (!p_->csv) throw std::runtime_error("--csv " + o.csv_path + ": " + std::strerror(errno));
    std::fprintf(p_->csv, "library,collective,transport,algorithm,np,dtype,op,root,bytes,count,in_place,time_us,"
                          "algbw_GBps,busbw_GBps,wrong\n");
  }
  if (std::FILE* t = p_->table) {
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    std::fprintf(t, "# tutti-bench: transport %s, algorithm %s, np %d (%s)\n", transport_name(o.transport).c_str(),
                 p_->algo_label().c_str(), np,
                 o.transport->ranks == transport_entry::ranks_are::threads ? "threads of one process" : "one process per rank");
    std::fprintf(t, "# nThread %d nProcs %d minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d%s "
                    "validation: %d\n",
                 threads, o.transport->ranks == transport_entry::ranks_are::threads ? 1 : np, o.min_bytes, o.max_bytes, o.factor, o.warmup,
                 o.iters, o.iters == 0 ? " (calibrated)" : "", o.check ? 1 : 0);
    if (o.data_varying)
      std::fprintf(t, "# data-varying: the calls rotate over buffer sets filling %zu bytes per rank (at most 64 sets)\n",
                   o.data_varying);
    std::fprintf(t, "# Host %s, %u cores\n#\n", host, std::thread::hardware_concurrency());
    std::fflush(t);
  }
}

report::~report() {
  if (p_->csv && p_->csv != stdout) std::fclose(p_->csv);
  delete p_;
}

void report::begin(tutti::collective c) {
  std::FILE* t = p_->table;
  p_->busbw_sum = 0;
  p_->busbw_rows = 0;
  if (!t) return;
  p_->clear_progress();
  const std::string name(tutti::collective_name(c));
  if (p_->o.osu) {
    std::fprintf(t, "# OSU-style %s latency: tutti %s, %s, %d ranks, %s\n", name.c_str(), transport_name(p_->o.transport).c_str(),
                 p_->algo_label().c_str(), p_->np, dtype_name(p_->o.dtype));
    std::fprintf(t, "%-10s%18s%18s%18s%12s\n", "# Size", "Avg Latency(us)", "Min Latency(us)", "Max Latency(us)",
                 "Iterations");
  } else {
    std::fprintf(t, "# Collective: %s\n", name.c_str());
    std::fprintf(t, "#%74s%32s\n", "out-of-place", "in-place");
    std::fprintf(t, "#%11s  %12s  %8s  %6s  %6s  %8s  %6s  %6s  %6s  %8s  %6s  %6s  %6s\n", "size", "count", "type",
                 "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::fprintf(t, "#%11s  %12s  %8s  %6s  %6s  %8s  %6s  %6s  %6s  %8s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "",
                 "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  std::fflush(t);
}

void report::add(const size_result& r) {
  const double factor = bus_factor(r.coll, p_->np);
  auto bw = [&](const measurement& m) { return m.time_us > 0 ? static_cast<double>(r.bytes) / (m.time_us * 1e3) : 0.0; };
  for (const auto* m : {&r.out_of_place, &r.in_place}) {
    if (!m->present) continue;
    p_->csv_row(r, *m, m == &r.in_place, bw(*m), bw(*m) * factor);
    p_->busbw_sum += bw(*m) * factor;
    ++p_->busbw_rows;
    if (m->wrong > 0) p_->wrong += m->wrong;
  }
  std::FILE* t = p_->table;
  if (!t) return;
  p_->clear_progress();
  if (p_->o.osu) {
    const measurement& m = r.out_of_place.present ? r.out_of_place : r.in_place;
    std::fprintf(t, "%-10zu%18.2f%18.2f%18.2f%12d\n", r.bytes, m.avg_us, m.min_us, m.time_us, m.iters);
  } else {
    std::fprintf(t, " %11zu  %12zu  %8s  %6s  %6d", r.bytes, r.count, dtype_name(p_->o.dtype),
                 r.uses_op ? op_name(p_->o.op) : "none", r.root);
    for (const auto* m : {&r.out_of_place, &r.in_place}) {
      if (!m->present) {
        std::fprintf(t, "  %8s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        continue;
      }
      char wrong[24] = "N/A";
      if (m->wrong >= 0) std::snprintf(wrong, sizeof wrong, "%lld", m->wrong);
      std::fprintf(t, "  %8.2f  %6.2f  %6.2f  %6s", m->time_us, bw(*m), bw(*m) * factor, wrong);
    }
    std::fprintf(t, "\n");
  }
  std::fflush(t);
}

void report::note(const std::string& text) {
  p_->clear_progress();
  if (p_->table) std::fprintf(p_->table, "# %s\n", text.c_str()), std::fflush(p_->table);
  std::fprintf(stderr, "tutti-bench: %s\n", text.c_str());
}

void report::end(tutti::collective) {
  if (std::FILE* t = p_->table) {
    p_->clear_progress();
    if (!p_->o.osu)
      std::fprintf(t, "# Avg bus bandwidth    : %g\n#\n", p_->busbw_rows ? p_->busbw_sum / p_->busbw_rows : 0.0);
    else
      std::fprintf(t, "#\n");
    std::fflush(t);
  }
}

void report::progress(tutti::collective c, std::size_t bytes, int step, int steps) {
  if (!p_->tty && !p_->o.progress) return;
  std::fprintf(stderr, "%s[tutti-bench] %s %s (%d/%d)%s", p_->tty ? "\r" : "",
               std::string(tutti::collective_name(c)).c_str(), human_bytes(bytes).c_str(), step, steps,
               p_->tty ? "    " : "\n");
  std::fflush(stderr);
  p_->progress_shown = true;
}

long long report::finish() {
  p_->clear_progress();
  const options& o = p_->o;
  if (std::FILE* t = p_->table) {
    if (o.check)
      std::fprintf(t, "# Out of bounds values : %lld %s\n", p_->wrong, p_->wrong == 0 ? "OK" : "FAILED");
    std::fflush(t);
  }
  if (!o.json_path.empty()) {
    std::FILE* j = o.json_path == "-" ? stdout : std::fopen(o.json_path.c_str(), "w");
    if (!j) throw std::runtime_error("--json " + o.json_path + ": " + std::strerror(errno));
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::fprintf(j,
                 "{\n  \"meta\": {\"library\": \"tutti\", \"host\": %s, \"cores\": %u, \"date\": \"%s\", "
                 "\"command_line\": %s, \"transport\": \"%s\", \"algorithm\": %s, \"np\": %d, \"threads\": %d, "
                 "\"dtype\": \"%s\", \"op\": \"%s\", \"iters\": %d, \"warmup\": %d, \"check\": %d, \"data_varying\": %zu, "
                 "\"wrong\": %lld},\n"
                 "  \"results\": [\n%s\n  ]\n}\n",
                 json_string(host).c_str(), std::thread::hardware_concurrency(), date,
                 json_string(o.command_line).c_str(), transport_name(o.transport).c_str(), json_string(o.algo).c_str(),
                 p_->np, p_->threads, dtype_name(o.dtype), op_name(o.op), o.iters, o.warmup, o.check ? 1 : 0,
                 o.data_varying, p_->wrong,
                 p_->json_rows.c_str());
    if (j != stdout) std::fclose(j);
    else std::fflush(j);
  }
  return p_->wrong;
}

}  // namespace tutti_bench

int main(int argc, char** argv) {
  using namespace tutti_bench;
  parsed p;
  try {
    p = parse_command_line(argc, argv);
  } catch (const usage_error_exit& e) {
    std::fprintf(stderr, "tutti-bench: %s\n(tutti-bench --help lists the flags)\n", e.what());
    return 2;
  }
  if (p.list) {  // from the table: what a CSV row of each collective says (tools/test_tutti_bench.sh reads it)
    tutti::for_each_collective([](auto k) {
      constexpr tutti::collective C = decltype(k)::value;
      constexpr bool data = tutti::info(C).counts != tutti::counts_kind::none;  // else one row, out of place
      std::printf("%s %s %s%s\n", std::string(tutti::collective_name(C)).c_str(), blocks_column<C>() ? "np" : "1",
                  !data || tutti::testing::has_apart<C> ? "0" : "", data && tutti::testing::has_in_place<C> ? "1" : "");
    });
    return 0;
  }
  if (p.help) {
    std::fputs(usage_text, stdout);
    std::printf("\ncollectives: %s\ntransports of this build:\n", std::string(tutti::scheduled_names()).c_str());
    for (const auto* t : transports())
      std::printf("  %-24s %s\n", (std::string(t->name) + (t->alias.empty() ? "" : " (" + std::string(t->alias) + ")")).c_str(),
                  std::string(t->description).c_str());
    return 0;
  }
  options& o = p.o;
  for (int i = 0; i < argc; ++i) {
    if (i) o.command_line += ' ';
    o.command_line += argv[i];
  }
  if (p.tune) {
    if (o.algo != "automatic") {
      std::fprintf(stderr, "tutti-bench: --tune measures every algorithm itself (no --algo)\n");
      return 2;
    }
    if (o.transport->tuning_kind.empty()) {
      std::string kinds;
      for (const auto* t : transports())
        if (!t->tuning_kind.empty()) kinds += (kinds.empty() ? "" : ", ") + std::string(t->name);
      std::fprintf(stderr, "tutti-bench: --tune measures every algorithm itself over a transport with rows in the tuned "
                           "table (%s), not --transport %s\n", kinds.c_str(), std::string(o.transport->name).c_str());
      return 2;
    }
    try {
      return run_tune(o, p.t, argv[0]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tutti-bench --tune: %s\n", e.what());
      return 1;
    }
  }
  try {
    // --algo X: every communicator of this process takes X through TUTTI_ALGO (one name: every
    // collective X has a schedule for; the others were rejected or are skipped above).
    if (o.algo != "automatic") ::setenv("TUTTI_ALGO", o.algo.c_str(), 1);
    using ranks_are = transport_entry::ranks_are;
    if (o.transport->ranks == ranks_are::threads) {
      if (o.root >= std::max(o.np, 1)) {
        std::fprintf(stderr, "tutti-bench: -r %d is not a rank of --np %d\n", o.root, std::max(o.np, 1));
        return 2;
      }
      return o.transport->run(o);
    }
    if (!launcher_in_environment()) {
      if (o.transport->ranks == ranks_are::mpi_processes) {
        std::fprintf(stderr, "tutti-bench: --transport %s runs under MPI's launcher: mpirun -np %d %s ...\n",
                     std::string(o.transport->name).c_str(), std::max(o.np, 2), argv[0]);
        return 2;
      }
      launch_self(std::max(o.np, 1), argc, argv);
    }
    const tutti::job_env job = tutti::job_env::from_env();
    if (o.np && o.np != job.world_size) {
      std::fprintf(stderr, "tutti-bench: --np %d, but the launcher (%s) started %d ranks\n", o.np, job.source.c_str(),
                   job.world_size);
      return 2;
    }
    if (o.root >= job.world_size) {
      std::fprintf(stderr, "tutti-bench: -r %d is not a rank of this job of %d\n", o.root, job.world_size);
      return 2;
    }
    o.np = job.world_size;
    return o.transport->run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti-bench: %s\n", e.what());
    return 1;
  }
}
