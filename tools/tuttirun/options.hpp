// tuttirun: the command line, read into `options` by a pure function (parse_args), and the text
// of --help.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common.hpp"

#ifndef TUTTI_VERSION
#define TUTTI_VERSION "unknown"
#endif

namespace tuttirun {

inline constexpr std::string_view help_text = R"(Usage: tuttirun [options] [--] program [args...]

Starts N processes ("ranks") of a tutti program on this node, like
torchrun --nproc-per-node=N. A job on M nodes runs tuttirun once per node, with
the same --nnodes, --master-addr, --master-port (and TUTTI_JOB_TOKEN) and each
node's own --node-rank; its ranks talk over tutti::tcp, which finds the others
through a store served by rank 0 on --master-addr:--master-port:
  node 0: tuttirun --nnodes=2 --node-rank=0 --nproc-per-node=2 \
            --master-addr=10.0.0.1 --master-port=29500 prog
  node 1: tuttirun --nnodes=2 --node-rank=1 --nproc-per-node=2 \
            --master-addr=10.0.0.1 --master-port=29500 prog

Options take their value as --opt=V or --opt V; underscores may replace dashes
in option names (--nproc_per_node=4).

Options:
  --nproc-per-node=N  ranks to start on this node (1-4096; default 1)
  --nnodes=M          nodes in the job (1-65536; default 1)
  --node-rank=K       index of this node, 0..M-1 (default 0)
  --master-addr=A     address of node 0 (default 127.0.0.1)
  --master-port=P     port on node 0 (1-65535). Default with one node: a free
                      port picked by binding to port 0 on A; required if M > 1
  --failure-grace=SECONDS
                      when the first rank fails, how long the others get to
                      exit on their own, and say why, before tuttirun sends
                      SIGTERM (0-86400, fractions allowed; default 3; 0: at
                      once). A tutti rank whose peer fails raises peer_lost
                      within milliseconds, prints it and exits.
  --grace=SECONDS     how long the ranks get to exit after SIGTERM (sent once
                      the failure grace is over, or forwarded) before SIGKILL
                      (0-86400, fractions allowed; default 3)
  --no-prefix         do not prefix output lines with "[rank R] "
  --keep-going        when a rank fails, name it but let the others run on (for
                      programs that recover, e.g. with communicator::shrink());
                      the exit status still reports the first failure
  --max-restarts=N    when a rank fails, stop this node's ranks (as below) and
                      start them all again, up to N times (0-10000; default 0:
                      never). See "Restarts" below
  --monitor-interval=SECONDS
                      tuttirun acts on a rank's exit (SIGCHLD), its output and
                      signals as they come; besides, it checks on its ranks
                      (and, with M > 1, the other nodes) at least this often,
                      which bounds how soon a failure is acted on
                      (0.001-86400, fractions allowed; default 0.1)
  --rdzv-port=PORT    with M > 1: the port on A where node 0's tuttirun serves
                      the nodes' rendezvous (restarts, the job's hang report)
                      for as long as it runs (1-65535; default P+1, P the
                      --master-port: a job across nodes holds P and P+1 on
                      node 0; without --max-restarts, a port already taken
                      costs only the job's report across nodes)
  --rdzv-timeout=SECONDS
                      with M > 1 and --max-restarts: how long a node waits for
                      the others, to join and, once an attempt failed, to be
                      done with it; a node that is gone or late makes the
                      others exit with status 1, saying which (1-86400,
                      fractions allowed; default 300)
  --dump[=DIR]        print the hang report of a running job on this node and
                      exit: what each rank is doing, per communicator the oldest
                      call some rank failed or is in, who never entered it and
                      why, and calls the ranks made differently. Without DIR,
                      the job of the tuttirun running on this node (with M > 1,
                      the whole job's: node 0's tuttirun gathers every node's);
                      with DIR, ranks started by any launcher with
                      TUTTI_FLIGHT_MAP=DIR (e.g. mpirun -x
                      TUTTI_FLIGHT_MAP=DIR). tuttirun prints the same report
                      itself when a rank fails and on SIGUSR1 (with M > 1, node
                      0's and the asking node's tuttirun print the whole job's)
  -h, --help          print this help and exit
  --version           print the version and exit

Environment of local rank i (0..N-1):
  RANK=K*N+i  WORLD_SIZE=M*N  LOCAL_RANK=i  LOCAL_WORLD_SIZE=N
  GROUP_RANK=K  NODE_RANK=K  MASTER_ADDR=A  MASTER_PORT=P
  TUTTI_LAUNCHER=tuttirun
  TUTTI_RESTART_COUNT=k  TORCHELASTIC_RESTART_COUNT=k  (the attempt: 0, then
  1..N after each restart)  TORCHELASTIC_MAX_RESTARTS=N
  (the rank variables of other launchers, TUTTI_RANK, SLURM_PROCID,
  OMPI_COMM_WORLD_RANK, PMI_RANK and the like, are removed)
  TUTTI_JOB_ID     kept if already set. Otherwise 16 random hex digits shared by
                   the ranks of this launch or, with M > 1, derived from A:P
                   (so spell A the same way on every node)
  TUTTI_JOB_TOKEN  kept if already set. Otherwise 32 hex digits: random with one
                   node, derived from A:P with M > 1, where it is therefore not
                   secret (tuttirun warns): export the same random token on
                   every node instead. The store and the ranks' connections
                   refuse processes with another token.
  From attempt k = 1 on (--max-restarts), the ranks see TUTTI_JOB_ID with
  "-r<k>" appended and a token derived from the job's and k, so that nothing
  left of an earlier attempt can join a later one; with one node and no
  --master-port, each attempt also gets a new free MASTER_PORT.

Output: every line a rank writes to stdout (stderr) is written to tuttirun's
stdout (stderr) prefixed with "[rank R] ", R the global rank; lines of different
ranks are never mixed. An unfinished last line is completed at exit. Each rank
is its own process group; its stdin is /dev/null if tuttirun's is a terminal.

Signals: SIGINT, SIGTERM and SIGHUP are forwarded to every rank's process
group (SIGKILL follows after the grace period); a second SIGINT sends SIGKILL
at once. SIGUSR1 is forwarded and nothing else: each rank with a tutti
communicator prints its flight recorder (its last operations) and carries on.
If tuttirun dies, its ranks are SIGKILLed.

When a rank fails (non-zero exit or killed by a signal), tuttirun names it on
stderr and lets the other ranks run for the failure grace, so that each can
exit on its own and say why. Then it sends SIGTERM (and SIGCONT) to those still
running, SIGKILL to those left after the grace period, and keeps forwarding
their output until they are gone. At exit it lists every rank that failed, the
first one first, with its exit status and the last line it wrote to stderr.
A rank stopped by a signal (SIGSTOP, SIGTSTP, ...) is named when it stops; if
the job fails while it is stopped, it is killed at once (SIGKILL), and said so.
A rank killed after the first failure by a signal tuttirun did not send is
named too.

Whatever stops the ranks stops their process groups, a rank exited or not:
what a rank started and left there (a shell's `cmd &`, which ignores SIGINT)
gets the same signals and, after the grace period, SIGKILL, and tuttirun waits
for that. Once no rank runs, the job failed or succeeded, it gets SIGTERM
without waiting out the failure grace: nothing of the job outlives tuttirun but
a process that left its rank's process group (setsid) before the rank exited.

Restarts (--max-restarts=N): once every rank of a failed attempt is gone,
tuttirun prints that attempt's summary and "restart k/N after rank R exited
with status S", and starts every rank again with TUTTI_RESTART_COUNT=k and a
fresh rendezvous (above). A signal to tuttirun (SIGINT, SIGTERM, SIGHUP) is
never followed by a restart, nor is a program that cannot be run (not found,
not executable), which tuttirun names before it starts any rank of an attempt.
When the restarts run out, the summary is followed
by the root cause, the first failure of the last attempt: its rank, local rank,
exit status or signal, time and attempt.
Across nodes (M > 1), every node restarts together: node 0's tuttirun serves a
rendezvous on A:--rdzv-port (default P+1), which the others join with the job
token. The node that sees an attempt's first failure tells it there; every node
stops its ranks (as after a failure of its own), and once all nodes' ranks are
gone, all start the next attempt, or all exit: a node with a failed rank with
that rank's status, the others with the root cause's. A node's tuttirun that
goes away, or does not join or finish within --rdzv-timeout, makes the others
stop their ranks and exit with status 1, naming it. With N = 0 the rendezvous
carries the hang report only: nothing waits for it, a node joins when it can,
and each node ends on its own, as its ranks do.

Trace (TUTTI_TRACE=DIR in tuttirun's environment, which the ranks inherit):
each tutti process writes its ranks' operations to
DIR/tutti-trace-<hostname>-<pid>.json. At the start tuttirun makes DIR if
missing (status 1 if it cannot) and removes this host's such files of an
earlier run; once the job is over, failed or not, node 0's tuttirun merges
every such file in DIR into DIR/trace.json (Chrome trace-event JSON, for
Perfetto or chrome://tracing; tools/trace-plot.sh draws it) and says so. A
file cut short (its process killed while writing it) is left out, with a
warning that names it. Across nodes DIR must be shared for node 0 to see the
other nodes' files; with --max-restarts, every attempt is in the trace.

Exit status:
  0       every rank exited with status 0
  S       the first rank to fail exited with status S (with --max-restarts:
          in the last attempt; on a node whose ranks did not fail, the root
          cause's status)
  128+n   the first rank to fail was killed by signal n, or (if no rank had
          failed before) tuttirun itself received signal n
  127     the program was not found (126: found but not executable); no
          rank was started
  2       bad command line
  1       tuttirun itself failed (pipes, processes, picking a port), or a
          node of the restart rendezvous was gone or late
)";

struct options {
  long long nproc_per_node = 1;
  long long nnodes = 1;
  long long node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;
  double failure_grace_s = 3.0;  // first failure -> SIGTERM
  double grace_s = 3.0;          // SIGTERM -> SIGKILL
  bool prefix = true;
  bool keep_going = false;
  long long max_restarts = 0;
  double monitor_interval_s = 0.1;  // the longest poll() between looks at the ranks
  std::optional<int> rdzv_port;     // with nnodes > 1: set by parse_args
  double rdzv_timeout_s = 300;
  std::vector<char*> program;  // argv of the ranks, null-terminated
  std::string dump_dir;        // --dump=DIR (empty: the running tuttirun job of this node)
};

// Across nodes, restarts need node 0's tuttirun and the others to agree (the rendezvous).
inline bool restarts_across_nodes(const options& o) { return o.nnodes > 1 && o.max_restarts > 0; }

inline long long parse_int(std::string_view flag, std::string_view v, long long lo, long long hi) {
  long long x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec == std::errc::invalid_argument || end != v.data() + v.size())
    throw usage_error(std::string(flag) + ": '" + std::string(v) + "' is not an integer");
  if (ec == std::errc::result_out_of_range || x < lo || x > hi)
    throw usage_error(std::string(flag) + ": " + std::string(v) + " is out of range (" +
                     std::to_string(lo) + "-" + std::to_string(hi) + ")");
  return x;
}

inline double parse_seconds(std::string_view flag, std::string_view v, double lo = 0, double hi = 86400) {
  double x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x, std::chars_format::fixed);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !std::isfinite(x))
    throw usage_error(std::string(flag) + ": '" + std::string(v) + "' is not a number of seconds");
  if (x < lo || x > hi)
    throw usage_error(std::string(flag) + ": " + std::string(v) + " is out of range (" + seconds_text(lo) + "-" +
                      seconds_text(hi) + ")");
  return x;
}

inline constexpr std::string_view version_text = "tuttirun (tutti) " TUTTI_VERSION "\n";

// What the command line asks for: to run the program with `opts`, or to print help_text
// (-h, --help) or version_text (--version) and exit 0.
struct command_line {
  enum class action { run, help, version, dump } what = action::run;
  options opts;  // with action::run
};

// Applies one flag. `next` yields the following argument for the `--opt V` form. Returns
// action::run, or what --help or --version asks for instead.
template <class Next>
command_line::action apply_flag(options& o, std::string_view arg, Next&& next) {
  std::string name(arg.substr(0, arg.find('=')));
  std::replace(name.begin() + 2, name.end(), '_', '-');
  std::optional<std::string_view> inline_value;
  if (auto eq = arg.find('='); eq != std::string_view::npos) inline_value = arg.substr(eq + 1);

  auto value = [&]() -> std::string_view { return inline_value ? *inline_value : next(name); };
  auto no_value = [&] {
    if (inline_value) throw usage_error(name + " takes no value");
  };

  if (name == "--nproc-per-node") o.nproc_per_node = parse_int(name, value(), 1, 4096);
  else if (name == "--nnodes") o.nnodes = parse_int(name, value(), 1, 65536);
  else if (name == "--node-rank") o.node_rank = parse_int(name, value(), 0, 65535);
  else if (name == "--master-port") o.master_port = static_cast<int>(parse_int(name, value(), 1, 65535));
  else if (name == "--grace") o.grace_s = parse_seconds(name, value());
  else if (name == "--failure-grace") o.failure_grace_s = parse_seconds(name, value());
  else if (name == "--max-restarts") o.max_restarts = parse_int(name, value(), 0, 10000);
  else if (name == "--monitor-interval") o.monitor_interval_s = parse_seconds(name, value(), 0.001);
  else if (name == "--rdzv-port") o.rdzv_port = static_cast<int>(parse_int(name, value(), 1, 65535));
  else if (name == "--rdzv-timeout") o.rdzv_timeout_s = parse_seconds(name, value(), 1);
  else if (name == "--master-addr") {
    o.master_addr = std::string(value());
    if (o.master_addr.empty()) throw usage_error("--master-addr: empty address");
  } else if (name == "--no-prefix") { no_value(); o.prefix = false; }
  else if (name == "--keep-going") { no_value(); o.keep_going = true; }
  else if (name == "--help") { no_value(); return command_line::action::help; }
  else if (name == "--dump") {
    if (inline_value) {
      if (inline_value->empty()) throw usage_error("--dump=: empty directory");
      o.dump_dir = std::string(*inline_value);
    }
    return command_line::action::dump;
  }
  else if (name == "--version") { no_value(); return command_line::action::version; }
  else throw usage_error("unknown option '" + std::string(arg) + "'");
  return command_line::action::run;
}

// Reads tuttirun's command line; touches nothing else (no environment, no output). Throws
// usage_error, whose text says what is wrong, for a bad one. -h, --help and --version end the
// reading where they stand: what comes after them is not looked at.
inline command_line parse_args(int argc, char** argv) {
  command_line c;
  options& o = c.opts;
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") { ++i; break; }
    if (arg == "-h") return {command_line::action::help, {}};
    if (arg.size() < 3 || !arg.starts_with("--")) {
      if (arg.starts_with("-")) throw usage_error("unknown option '" + std::string(arg) + "'");
      break;  // the program
    }
    const auto what = apply_flag(o, arg, [&](const std::string& name) -> std::string_view {
      if (i + 1 >= argc) throw usage_error(name + " needs a value");
      return argv[++i];
    });
    if (what == command_line::action::dump) {
      if (i + 1 < argc)
        throw usage_error("--dump takes nothing after it (its directory as --dump=DIR), not '" + std::string(argv[i + 1]) +
                          "'");
      c.what = what;
      return c;
    }
    if (what != command_line::action::run) return {what, {}};
  }
  if (i >= argc) throw usage_error("no program to run");
  if (o.node_rank >= o.nnodes)
    throw usage_error("--node-rank=" + std::to_string(o.node_rank) + " must be less than --nnodes=" +
                     std::to_string(o.nnodes));
  if (o.nnodes > 1 && !o.master_port)
    throw usage_error("--master-port is required with --nnodes > 1 (every node must use the same port)");
  if (o.nnodes > 1) {
    // Without restarts the rendezvous carries the job's hang report only: a job that leaves no
    // port for it runs without it.
    if (!o.rdzv_port && *o.master_port == 65535 && restarts_across_nodes(o))
      throw usage_error("--master-port=65535 leaves no port for the restart rendezvous (--master-port + 1): "
                        "give --rdzv-port");
    if (!o.rdzv_port && *o.master_port < 65535) o.rdzv_port = *o.master_port + 1;
    if (o.rdzv_port && *o.rdzv_port == *o.master_port)
      throw usage_error("--rdzv-port=" + std::to_string(*o.rdzv_port) +
                        " must differ from --master-port (rank 0's store listens there)");
  }
  o.program.assign(argv + i, argv + argc);
  o.program.push_back(nullptr);
  return c;
}

}  // namespace tuttirun
