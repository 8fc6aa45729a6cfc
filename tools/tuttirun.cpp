// tuttirun: start N ranks of a tutti program on this node, the equivalent of
// `torchrun --nproc-per-node=N`. Linux only; needs nothing beyond libc and the standard library.

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#ifndef TUTTI_VERSION
#define TUTTI_VERSION "unknown"
#endif

extern char** environ;

namespace {

using std::chrono::steady_clock;

constexpr int exit_launcher_error = 1;
constexpr int exit_usage = 2;
// A line longer than this is emitted in pieces: the alternative is unbounded memory.
constexpr std::size_t max_line = 1 << 20;
// How long to wait for output still held by a rank's descendants once every rank has exited.
constexpr auto drain_after_exit = std::chrono::seconds(1);
// The exit summary quotes at most this much of a rank's last stderr line.
constexpr std::size_t max_quoted_line = 400;

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct launcher_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr std::string_view help_text = R"(Usage: tuttirun [options] [--] program [args...]

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
  --rdzv-port=PORT    with M > 1 and --max-restarts: the port on A where node
                      0's tuttirun serves the nodes' restart rendezvous (1-65535;
                      default P+1, P the --master-port)
  --rdzv-timeout=SECONDS
                      with M > 1 and --max-restarts: how long a node waits for
                      the others, to join and, once an attempt failed, to be
                      done with it; a node that is gone or late makes the
                      others exit with status 1, saying which (1-86400,
                      fractions allowed; default 300)
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

Signals: SIGINT, SIGTERM and SIGHUP are forwarded to every running rank's
process group (SIGKILL follows after the grace period); a second SIGINT sends
SIGKILL at once. SIGUSR1 is forwarded and nothing else: each rank with a tutti
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

Restarts (--max-restarts=N): once every rank of a failed attempt is gone,
tuttirun prints that attempt's summary and "restart k/N after rank R exited
with status S", and starts every rank again with TUTTI_RESTART_COUNT=k and a
fresh rendezvous (above). A signal to tuttirun (SIGINT, SIGTERM, SIGHUP) is
never followed by a restart. When the restarts run out, the summary is followed
by the root cause, the first failure of the last attempt: its rank, local rank,
exit status or signal, time and attempt.
Across nodes (M > 1), every node restarts together: node 0's tuttirun serves a
rendezvous on A:--rdzv-port (default P+1), which the others join with the job
token. The node that sees an attempt's first failure tells it there; every node
stops its ranks (as after a failure of its own), and once all nodes' ranks are
gone, all start the next attempt, or all exit: a node with a failed rank with
that rank's status, the others with the root cause's. A node's tuttirun that
goes away, or does not join or finish within --rdzv-timeout, makes the others
stop their ranks and exit with status 1, naming it. With N = 0 there is no
rendezvous: each node ends on its own, as its ranks do.

Exit status:
  0       every rank exited with status 0
  S       the first rank to fail exited with status S (with --max-restarts:
          in the last attempt; on a node whose ranks did not fail, the root
          cause's status)
  128+n   the first rank to fail was killed by signal n, or (if no rank had
          failed before) tuttirun itself received signal n
  127     a rank's program was not found (126: found but not executable)
  2       bad command line
  1       tuttirun itself failed (pipes, processes, picking a port), or a
          node of the restart rendezvous was gone or late
)";

// ---------------------------------------------------------------------------------------------
// Small utilities

// Writes everything, also to a non-blocking or slow descriptor. False (errno set) on an error.
bool write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n >= 0) {
      s.remove_prefix(static_cast<std::size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

void say(std::string_view msg) { write_all(STDERR_FILENO, "tuttirun: " + std::string(msg) + "\n"); }

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";       case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";     case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";     case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";       case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";     case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";     case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";     case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";     case SIGCHLD: return "SIGCHLD";
    case SIGCONT: return "SIGCONT";     case SIGSTOP: return "SIGSTOP";
    case SIGTSTP: return "SIGTSTP";     case SIGTTIN: return "SIGTTIN";
    case SIGTTOU: return "SIGTTOU";     case SIGURG: return "SIGURG";
    case SIGXCPU: return "SIGXCPU";     case SIGXFSZ: return "SIGXFSZ";
    case SIGVTALRM: return "SIGVTALRM"; case SIGPROF: return "SIGPROF";
    case SIGWINCH: return "SIGWINCH";   case SIGIO: return "SIGIO";
    case SIGSYS: return "SIGSYS";
    default: return sig >= SIGRTMIN && sig <= SIGRTMAX ? "SIGRT" : "unknown signal";
  }
}

int exit_code_of(int wstatus) {
  return WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : WEXITSTATUS(wstatus);
}

std::string describe_exit(int wstatus) {
  if (!WIFSIGNALED(wstatus)) return "exited with status " + std::to_string(WEXITSTATUS(wstatus));
  int sig = WTERMSIG(wstatus);
  return "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")" +
         (WCOREDUMP(wstatus) ? " (core dumped)" : "");
}

steady_clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<steady_clock::duration>(std::chrono::duration<double>(seconds));
}

// 3 -> "3", 0.25 -> "0.25": the shortest text that reads back as `seconds`.
std::string seconds_text(double seconds) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, seconds);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(seconds);
}

// ---------------------------------------------------------------------------------------------
// Command line

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
  std::optional<int> rdzv_port;     // with nnodes > 1 and restarts: set by parse_args
  double rdzv_timeout_s = 300;
  std::vector<char*> program;  // argv of the ranks, null-terminated
};

// Across nodes, restarts need node 0's tuttirun and the others to agree (the rendezvous).
bool restarts_across_nodes(const options& o) { return o.nnodes > 1 && o.max_restarts > 0; }

long long parse_int(std::string_view flag, std::string_view v, long long lo, long long hi) {
  long long x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec == std::errc::invalid_argument || end != v.data() + v.size())
    throw usage_error(std::string(flag) + ": '" + std::string(v) + "' is not an integer");
  if (ec == std::errc::result_out_of_range || x < lo || x > hi)
    throw usage_error(std::string(flag) + ": " + std::string(v) + " is out of range (" +
                     std::to_string(lo) + "-" + std::to_string(hi) + ")");
  return x;
}

double parse_seconds(std::string_view flag, std::string_view v, double lo = 0, double hi = 86400) {
  double x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x, std::chars_format::fixed);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !std::isfinite(x))
    throw usage_error(std::string(flag) + ": '" + std::string(v) + "' is not a number of seconds");
  if (x < lo || x > hi)
    throw usage_error(std::string(flag) + ": " + std::string(v) + " is out of range (" + seconds_text(lo) + "-" +
                      seconds_text(hi) + ")");
  return x;
}

[[noreturn]] void print_and_exit(std::string_view text) {
  write_all(STDOUT_FILENO, text);
  std::exit(0);
}

// Applies one flag. `next` yields the following argument for the `--opt V` form.
template <class Next>
void apply_flag(options& o, std::string_view arg, Next&& next) {
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
  else if (name == "--help") { no_value(); print_and_exit(help_text); }
  else if (name == "--version") { no_value(); print_and_exit("tuttirun (tutti) " TUTTI_VERSION "\n"); }
  else throw usage_error("unknown option '" + std::string(arg) + "'");
}

options parse_args(int argc, char** argv) {
  options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") { ++i; break; }
    if (arg == "-h") print_and_exit(help_text);
    if (arg.size() < 3 || !arg.starts_with("--")) {
      if (arg.starts_with("-")) throw usage_error("unknown option '" + std::string(arg) + "'");
      break;  // the program
    }
    apply_flag(o, arg, [&](const std::string& name) -> std::string_view {
      if (i + 1 >= argc) throw usage_error(name + " needs a value");
      return argv[++i];
    });
  }
  if (i >= argc) throw usage_error("no program to run");
  if (o.node_rank >= o.nnodes)
    throw usage_error("--node-rank=" + std::to_string(o.node_rank) + " must be less than --nnodes=" +
                     std::to_string(o.nnodes));
  if (o.nnodes > 1 && !o.master_port)
    throw usage_error("--master-port is required with --nnodes > 1 (every node must use the same port)");
  if (restarts_across_nodes(o)) {
    if (!o.rdzv_port && *o.master_port == 65535)
      throw usage_error("--master-port=65535 leaves no port for the restart rendezvous (--master-port + 1): "
                        "give --rdzv-port");
    if (!o.rdzv_port) o.rdzv_port = *o.master_port + 1;
    if (*o.rdzv_port == *o.master_port)
      throw usage_error("--rdzv-port=" + std::to_string(*o.rdzv_port) +
                        " must differ from --master-port (rank 0's store listens there)");
  }
  o.program.assign(argv + i, argv + argc);
  o.program.push_back(nullptr);
  return o;
}

// ---------------------------------------------------------------------------------------------
// Job identity: port, id, token

int pick_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &res); rc != 0)
    throw launcher_error("cannot resolve --master-addr " + addr + ": " + ::gai_strerror(rc));
  std::string why = "no address";
  int port = 0;
  for (addrinfo* ai = res; ai && port == 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) { why = errno_text("socket"); continue; }
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) why = errno_text("bind");
    else if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) why = errno_text("getsockname");
    else if (sa.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
    else if (sa.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (port == 0) throw launcher_error("cannot pick a free port on " + addr + ": " + why);
  return port;
}

std::string to_hex(const unsigned char* p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw launcher_error(errno_text("/dev/urandom"));
  ssize_t n = ::read(fd, buf.data(), bytes);
  ::close(fd);
  if (n != static_cast<ssize_t>(bytes)) throw launcher_error("short read from /dev/urandom");
  return to_hex(buf.data(), bytes);
}

// FNV-1a: the same input gives the same id on every node, which is all that is needed.
std::string derived_hex(std::string_view salt, std::string_view key) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : std::string(salt) + '\0' + std::string(key)) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(h >> (56 - 8 * i));
  return to_hex(b, 8);
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

struct job_identity {
  int port;
  std::string id, token;
};

job_identity make_identity(const options& o) {
  job_identity j;
  j.port = o.master_port ? *o.master_port : pick_free_port(o.master_addr);
  std::string key = o.master_addr + ":" + std::to_string(j.port);
  bool multi = o.nnodes > 1;
  j.id = env_or("TUTTI_JOB_ID", multi ? derived_hex("id", key) : random_hex(8));
  j.token = env_or("TUTTI_JOB_TOKEN", multi ? derived_hex("token-a", key) + derived_hex("token-b", key)
                                            : random_hex(16));
  if (const char* t = std::getenv("TUTTI_JOB_TOKEN"); multi && (!t || !*t))
    say("warning: no TUTTI_JOB_TOKEN with --nnodes > 1: the token is derived from " + key +
        ", so anyone who knows the address can join; export one random token on every node, e.g. "
        "TUTTI_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \\n')");
  return j;
}

// The longest TUTTI_JOB_ID tutti accepts.
constexpr std::size_t max_job_id = 64;

// A free port other than `previous`: the kernel may hand out the same one twice in a row, and a
// restart's rendezvous must not meet what is left of the attempt before (connections in
// TIME_WAIT, a straggler still dialling it).
int pick_other_free_port(const std::string& addr, int previous) {
  int port = pick_free_port(addr);
  for (int tries = 0; port == previous && tries < 20; ++tries) port = pick_free_port(addr);
  return port;
}

// What the ranks of attempt `attempt` see. Attempt 0: the job's identity. Later ones: the job id
// with "-r<attempt>" appended and a token derived from the job's and the attempt, the same on
// every node, so that a rank or connection left from an earlier attempt is refused by the new
// one's store and ranks; with one node and no --master-port, also a new free port.
job_identity attempt_identity(const options& o, const job_identity& job, long long attempt, int previous_port) {
  if (attempt == 0) return job;
  job_identity j = job;
  if (!o.master_port) j.port = pick_other_free_port(o.master_addr, previous_port);
  const std::string suffix = "-r" + std::to_string(attempt);
  j.id = (job.id.size() + suffix.size() <= max_job_id ? job.id : derived_hex("id", job.id)) + suffix;
  j.token = derived_hex("token-a" + suffix, job.token) + derived_hex("token-b" + suffix, job.token);
  return j;
}

// Rank variables of other launchers' conventions. tutti reads those too, and rejects an
// environment where they contradict RANK/WORLD_SIZE (tuttirun inside an srun or mpirun task).
constexpr std::string_view foreign_rank_vars[] = {
    "TUTTI_RANK", "TUTTI_WORLD_SIZE", "TUTTI_LOCAL_RANK", "TUTTI_LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
};

// The environment of one rank: tuttirun's own, with the launcher variables replaced and the
// other conventions' rank variables removed.
std::vector<std::string> rank_environment(const options& o, const job_identity& j, long long local_rank,
                                          long long attempt) {
  std::vector<std::string> vars = {
      "RANK=" + std::to_string(o.node_rank * o.nproc_per_node + local_rank),
      "WORLD_SIZE=" + std::to_string(o.nnodes * o.nproc_per_node),
      "LOCAL_RANK=" + std::to_string(local_rank),
      "LOCAL_WORLD_SIZE=" + std::to_string(o.nproc_per_node),
      "GROUP_RANK=" + std::to_string(o.node_rank),
      "NODE_RANK=" + std::to_string(o.node_rank),
      "MASTER_ADDR=" + o.master_addr,
      "MASTER_PORT=" + std::to_string(j.port),
      "TUTTI_JOB_ID=" + j.id,
      "TUTTI_JOB_TOKEN=" + j.token,
      "TUTTI_LAUNCHER=tuttirun",
      "TUTTI_RESTART_COUNT=" + std::to_string(attempt),
      "TORCHELASTIC_RESTART_COUNT=" + std::to_string(attempt),
      "TORCHELASTIC_MAX_RESTARTS=" + std::to_string(o.max_restarts),
  };
  auto overridden = [&](std::string_view entry) {
    auto name_eq = entry.substr(0, entry.find('=') + 1);
    auto name = name_eq.substr(0, name_eq.size() - 1);
    return std::any_of(vars.begin(), vars.end(), [&](const std::string& v) { return v.starts_with(name_eq); }) ||
           std::find(std::begin(foreign_rank_vars), std::end(foreign_rank_vars), name) != std::end(foreign_rank_vars);
  };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!overridden(*e)) env.emplace_back(*e);
  env.insert(env.end(), vars.begin(), vars.end());
  return env;
}

// ---------------------------------------------------------------------------------------------
// Starting a rank

// What a forked child needs, prepared before fork: the child allocates only if exec fails.
struct child_setup {
  pid_t launcher_pid;
  int stdin_fd;  // -1: inherit
  int out_fd, err_fd;
  sigset_t mask;
  struct sigaction sigpipe;
  char* const* argv;
  char* const* envp;
};

[[noreturn]] void exec_child(const child_setup& s) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != s.launcher_pid) ::_exit(exit_launcher_error);  // tuttirun died before prctl
  if (s.stdin_fd >= 0) ::dup2(s.stdin_fd, STDIN_FILENO);
  ::dup2(s.out_fd, STDOUT_FILENO);
  ::dup2(s.err_fd, STDERR_FILENO);
  ::sigaction(SIGPIPE, &s.sigpipe, nullptr);
  ::sigprocmask(SIG_SETMASK, &s.mask, nullptr);
  ::execvpe(s.argv[0], s.argv, s.envp);
  int err = errno;
  std::string msg = std::string("tuttirun: cannot run '") + s.argv[0] + "': " + std::strerror(err) + "\n";
  write_all(STDERR_FILENO, msg);
  ::_exit(err == ENOENT ? 127 : 126);
}

struct pipe_ends {
  int read = -1, write = -1;
};

pipe_ends make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw launcher_error(errno_text("pipe"));
  return {fds[0], fds[1]};
}

// One of a rank's output streams and the start of a line not yet complete.
struct output_stream {
  int fd = -1;
  int dest = -1;
  std::string pending;
  bool keeps_last_line = false;  // stderr: its last line is quoted in the exit summary
  std::string last_line;         // the last line that was not blank, without its newline
};

struct rank_process {
  long long rank = 0;
  pid_t pid = -1;
  bool running = false;
  int stopped_by = 0;               // the signal that stopped it while it is stopped, else 0
  std::optional<int> exit_wstatus;  // once it has exited
  long long exited_unix_ms = 0;     // when tuttirun saw it exit
  output_stream out, err;
};

// ---------------------------------------------------------------------------------------------
// Failures, as the exit summary and the other nodes learn them

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
};

long long unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// "2025-06-01 12:34:56.789 +0200": this host's local time.
std::string wall_time_text(long long unix_ms) {
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
std::string cause_text(const failure_report& r, bool name_node) {
  if (r.rank < 0) return r.what;
  return "rank " + std::to_string(r.rank) + (name_node ? " (node " + std::to_string(r.node) + ")" : "") + " " +
         r.what;
}

// ---------------------------------------------------------------------------------------------
// Restarts across nodes: the launchers' rendezvous
//
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
// Node 0 takes part like the others, through direct calls; every decision is node 0's, so the
// nodes always agree on what comes next. `events` hands them to the launcher.

constexpr std::string_view rdzv_protocol = "tuttirun-rdzv/1";
constexpr std::size_t max_rdzv_line = 16384;
// A connection to node 0's rendezvous must say hello within this, and node 0 must welcome it.
constexpr auto rdzv_hello_within = std::chrono::seconds(10);
// How long the other nodes wait beyond node 0's own deadlines before they give up on it.
constexpr auto rdzv_margin = std::chrono::seconds(10);
constexpr std::size_t max_rdzv_strangers = 16;  // connections yet to say hello

struct rdzv_event {
  enum class kind { start, failed, end, abort } what;
  long long attempt = 0;
  int code = 0;                          // end: the job's status; abort: tuttirun's
  std::optional<failure_report> report;  // start: the failure it follows; failed; end: the root cause
  std::string why;                       // abort
};

std::string one_field(std::string_view s) {
  std::string f(s);
  for (char& c : f)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return f;
}

std::string encode(const failure_report& r) {
  std::string s;
  for (long long v : {r.attempt, r.node, r.rank, r.local_rank, r.pid, static_cast<long long>(r.exit_code), r.unix_ms,
                      static_cast<long long>(r.no_restart)})
    s += std::to_string(v) + '\t';
  return s + one_field(r.what) + '\t' + one_field(r.last_line);
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> f;
  for (std::size_t begin = 0;;) {
    const std::size_t tab = line.find('\t', begin);
    f.push_back(line.substr(begin, tab == std::string_view::npos ? std::string_view::npos : tab - begin));
    if (tab == std::string_view::npos) return f;
    begin = tab + 1;
  }
}

std::optional<long long> field_int(std::string_view f) {
  long long x = 0;
  auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), x);
  if (f.empty() || ec != std::errc() || end != f.data() + f.size()) return std::nullopt;
  return x;
}

// The attempt in field 1 of a message, -1 when there is none.
long long attempt_field(const std::vector<std::string_view>& f) {
  const auto a = f.size() > 1 ? field_int(f[1]) : std::nullopt;
  return a && *a >= 0 ? *a : -1;
}

// The report in fields[at..], which must be the last ten.
std::optional<failure_report> decode_report(const std::vector<std::string_view>& f, std::size_t at) {
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

std::string host_port_text(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string address_text(const sockaddr_storage& a) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  const socklen_t len = a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown address";
  return host_port_text(host, std::atoi(serv));
}

// The rendezvous' connections carry each line at once, and notice a node that vanished without
// a word (its host went down) in about half a minute.
void tune_rdzv_socket(int fd) {
  const int one = 1, idle = 15, interval = 5, count = 4;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Reads the signals waiting on tuttirun's signalfd; returns the first that ends tuttirun's wait
// (SIGINT, SIGTERM, SIGHUP), or 0. Used while no rank runs: SIGCHLD and SIGUSR1 are dropped.
int take_signal(int sigfd) {
  int first = 0;
  signalfd_siginfo si;
  while (::read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    const int sig = static_cast<int>(si.ssi_signo);
    if (!first && (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)) first = sig;
  }
  return first;
}

int poll_ms_until(steady_clock::time_point t) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - steady_clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
}

// One connection of the rendezvous, non-blocking: whole lines in, lines out.
class line_conn {
 public:
  line_conn(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  line_conn(const line_conn&) = delete;
  line_conn& operator=(const line_conn&) = delete;
  ~line_conn() { ::close(fd_); }

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  bool wants_out() const { return !out_.empty(); }

  void send(std::string_view line) {
    out_.append(line);
    out_ += '\n';
    flush();
  }

  // Writes what the socket takes now; false once the connection is broken.
  bool flush() {
    while (!out_.empty() && !broken_) {
      const ssize_t n = ::send(fd_, out_.data(), out_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) out_.erase(0, static_cast<std::size_t>(n));
      else if (n < 0 && errno == EINTR) continue;
      else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      else broken_ = true;
    }
    return !broken_;
  }

  // Waits up to `until` for the peer to take what is still to be sent (before tuttirun exits).
  void drain(steady_clock::time_point until) {
    while (flush() && !out_.empty() && steady_clock::now() < until) {
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, 50);
    }
  }

  // Reads what has come and appends its complete lines to `lines`. False (`why` says why) at
  // EOF, on an error, or when a line is longer than any this protocol sends.
  bool receive(std::vector<std::string>& lines, std::string& why) {
    char buf[4096];
    while (true) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        in_.append(buf, static_cast<std::size_t>(n));
        for (std::size_t nl; (nl = in_.find('\n')) != std::string::npos; in_.erase(0, nl + 1))
          lines.push_back(in_.substr(0, nl));
        if (in_.size() > max_rdzv_line) {
          why = "it sent a line of more than " + std::to_string(max_rdzv_line) + " bytes";
          return false;
        }
      } else if (n == 0) {
        why = "it closed the connection";
        return false;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return true;
      } else if (errno != EINTR) {
        why = errno_text("recv");
        return false;
      }
    }
  }

 private:
  int fd_;
  std::string peer_;
  std::string in_, out_;
  bool broken_ = false;
};

// What the launcher sees of the rendezvous, on node 0 (rdzv_server) and the others (rdzv_client).
class rendezvous {
 public:
  virtual ~rendezvous() = default;
  // Before the first attempt: the other nodes connect to node 0. Returns 0, or the signal
  // (SIGINT, SIGTERM, SIGHUP) that came first. Throws launcher_error when node 0 cannot be reached.
  virtual int join(int sigfd) = 0;
  // The descriptors to poll, appended to `fds`; then what poll() said of them, in that order.
  virtual void add_fds(std::vector<pollfd>& fds) = 0;
  virtual void on_poll(const pollfd* fds) = 0;
  // When on_time() has something to check, if ever; on_time() acts on the deadlines passed.
  virtual std::optional<steady_clock::time_point> deadline() const = 0;
  virtual void on_time() = 0;
  // This node's first failure of an attempt, as it happens.
  virtual void report_failure(const failure_report& r) = 0;
  // Attempt `attempt` is over on this node (every rank gone), with this node's status.
  virtual void report_done(long long attempt, int code, const std::optional<failure_report>& first) = 0;
  // This node's tuttirun leaves (it received a signal): the others are told why.
  virtual void leave(const std::string& why) = 0;
  // Before tuttirun exits: what is still to be sent goes out.
  virtual void finish() = 0;

  std::deque<rdzv_event> events;  // what the launcher is to act on, in order
};

// Node 0's listening socket, on `host` (on every address when `host` is not one of this host's,
// as the ranks' store does).
int listen_for_nodes(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    throw launcher_error("cannot resolve --master-addr " + host + ": " + ::gai_strerror(rc));
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    const int s = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) { why = errno_text("socket"); continue; }
    const int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage a{};
    std::memcpy(&a, ai->ai_addr, ai->ai_addrlen);
    int rc = ::bind(s, reinterpret_cast<sockaddr*>(&a), ai->ai_addrlen);
    if (rc != 0 && errno == EADDRNOTAVAIL) {  // not an address of this host (a NAT, a name for it)
      sockaddr_storage any{};
      any.ss_family = a.ss_family;
      if (a.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(any).sin6_port = htons(static_cast<std::uint16_t>(port));
      else reinterpret_cast<sockaddr_in&>(any).sin_port = htons(static_cast<std::uint16_t>(port));
      rc = ::bind(s, reinterpret_cast<sockaddr*>(&any), ai->ai_addrlen);
    }
    if (rc == 0 && ::listen(s, 64) == 0) {
      fd = s;
      break;
    }
    why = errno == EADDRINUSE ? "the port is in use: another job or service holds it; pick another --rdzv-port "
                                "(by default --master-port + 1)"
                              : errno_text(rc != 0 ? "bind" : "listen");
    ::close(s);
  }
  ::freeaddrinfo(res);
  if (fd < 0) throw launcher_error("cannot serve the restart rendezvous on " + host_port_text(host, port) + ": " + why);
  return fd;
}

// Connects to node 0's rendezvous, retrying while nothing listens there yet (node 0's tuttirun
// may start later) until `deadline`. Returns the socket, or -1 when a signal came first (`sig`).
int connect_to_node0(const options& o, steady_clock::time_point deadline, int sigfd, int& sig) {
  const std::string where = host_port_text(o.master_addr, *o.rdzv_port);
  std::string why = "no address";
  for (auto pause = std::chrono::milliseconds(10);; pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(o.master_addr.c_str(), std::to_string(*o.rdzv_port).c_str(), &hints, &res); rc != 0)
      why = std::string("cannot resolve --master-addr: ") + ::gai_strerror(rc), res = nullptr;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      const int s = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (s < 0) { why = errno_text("socket"); continue; }
      if (::connect(s, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
        pollfd p[2] = {{s, POLLOUT, 0}, {sigfd, POLLIN, 0}};
        ::poll(p, 2, std::max(1, std::min(poll_ms_until(deadline), 5000)));
        if ((p[1].revents & POLLIN) && (sig = take_signal(sigfd))) {
          ::close(s), ::freeaddrinfo(res);
          return -1;
        }
        int err = ETIMEDOUT;
        socklen_t len = sizeof err;
        if (p[0].revents) ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) {
          ::freeaddrinfo(res);
          tune_rdzv_socket(s);
          return s;
        }
        why = std::strerror(err);
      } else {
        why = errno_text("connect");
      }
      ::close(s);
    }
    if (res) ::freeaddrinfo(res);
    if (steady_clock::now() >= deadline)
      throw launcher_error("cannot reach node 0's tuttirun at " + where + " (the restart rendezvous, --rdzv-port) within " +
                           seconds_text(o.rdzv_timeout_s) + " s (--rdzv-timeout): " + why +
                           "; is it running, with the same --master-addr, --master-port, --rdzv-port?");
    pollfd p{sigfd, POLLIN, 0};
    ::poll(&p, 1, std::max(1, std::min(poll_ms_until(deadline), static_cast<int>(pause.count()))));
    if ((p.revents & POLLIN) && (sig = take_signal(sigfd))) return -1;
  }
}

std::string node_list(const std::vector<long long>& nodes) {
  std::string s = nodes.size() == 1 ? "node " : "nodes ";
  for (std::size_t i = 0; i < nodes.size(); ++i) s += (i ? ", " : "") + std::to_string(nodes[i]);
  return s;
}

// Node 0's side: accepts the other nodes, gathers their reports and decides for all of them.
class rdzv_server final : public rendezvous {
 public:
  rdzv_server(const options& o, const std::string& token)
      : o_(o), token_hex_(to_hex(reinterpret_cast<const unsigned char*>(token.data()), token.size())),
        where_(host_port_text(o.master_addr, *o.rdzv_port)), listener_(listen_for_nodes(o.master_addr, *o.rdzv_port)),
        joined_(static_cast<std::size_t>(o.nnodes), false), done_(static_cast<std::size_t>(o.nnodes)) {
    joined_[0] = true;
  }
  ~rdzv_server() override { ::close(listener_); }

  int join(int) override {
    say("restart rendezvous: serving on " + where_ + ", waiting for " +
        (o_.nnodes == 2 ? "node 1" : "nodes 1-" + std::to_string(o_.nnodes - 1)));
    deadline_ = steady_clock::now() + to_duration(o_.rdzv_timeout_s);
    return 0;
  }

  void add_fds(std::vector<pollfd>& fds) override {
    polled_ = peers_.size();
    fds.push_back({listener_, POLLIN, 0});
    for (const auto& p : peers_)
      fds.push_back({p->conn.fd(), static_cast<short>(POLLIN | (p->conn.wants_out() ? POLLOUT : 0)), 0});
  }

  void on_poll(const pollfd* fds) override {
    for (std::size_t i = 0; i < polled_ && i < peers_.size(); ++i) {
      peer& p = *peers_[i];
      const short ev = fds[1 + i].revents;
      if ((ev & POLLOUT) && !p.closed) p.conn.flush();
      if ((ev & (POLLIN | POLLHUP | POLLERR)) && !p.closed) read_from(p);
    }
    if (fds[0].revents & POLLIN) accept_nodes();
    std::erase_if(peers_, [](const std::unique_ptr<peer>& p) { return p->closed; });
    polled_ = 0;
  }

  std::optional<steady_clock::time_point> deadline() const override {
    std::optional<steady_clock::time_point> next = deadline_;
    for (const auto& p : peers_)
      if (p->node < 0 && !p->closed && (!next || p->accepted + rdzv_hello_within < *next))
        next = p->accepted + rdzv_hello_within;
    return next;
  }

  void on_time() override {
    const auto now = steady_clock::now();
    for (auto& p : peers_)
      if (p->node < 0 && !p->closed && now >= p->accepted + rdzv_hello_within) {
        log_refusal(*p, "it sent no hello within " + std::to_string(rdzv_hello_within.count()) + " s");
        p->closed = true;
      }
    std::erase_if(peers_, [](const std::unique_ptr<peer>& p) { return p->closed; });
    if (deadline_ && now >= *deadline_) abort(lateness());
  }

  void report_failure(const failure_report& r) override { note_failure(r.attempt, r); }
  void report_done(long long attempt, int code, const std::optional<failure_report>& first) override {
    note_done(0, attempt, code, first);
  }
  void leave(const std::string& why) override {
    abort("node 0's tuttirun left: " + why);
    finish();
  }
  void finish() override {
    const auto until = steady_clock::now() + std::chrono::seconds(2);
    for (auto& p : peers_) p->conn.drain(until);
  }

 private:
  struct peer {
    peer(int fd, std::string from) : conn(fd, std::move(from)), accepted(steady_clock::now()) {}
    line_conn conn;
    long long node = -1;  // -1 until its hello is accepted
    steady_clock::time_point accepted;
    bool closed = false;
  };

  void accept_nodes() {
    while (true) {
      sockaddr_storage from{};
      socklen_t len = sizeof from;
      const int fd = ::accept4(listener_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      const auto strangers = std::count_if(peers_.begin(), peers_.end(), [](const auto& p) { return p->node < 0; });
      if (decided_ || static_cast<std::size_t>(strangers) >= max_rdzv_strangers) {
        ::close(fd);
        continue;
      }
      tune_rdzv_socket(fd);
      peers_.push_back(std::make_unique<peer>(fd, address_text(from)));
    }
  }

  void read_from(peer& p) {
    std::vector<std::string> lines;
    std::string why;
    const bool open = p.conn.receive(lines, why);
    for (const std::string& line : lines) {
      if (p.closed) break;
      handle(p, line);
    }
    if (!open && !p.closed) lost(p, why);
  }

  void handle(peer& p, const std::string& line) {
    const auto f = split_fields(line);
    if (p.node < 0) return hello(p, f);
    const long long attempt = attempt_field(f);
    if (f[0] == "failed" && attempt >= 0) {
      if (auto r = decode_report(f, 2)) return note_failure(attempt, *r);
    } else if (f[0] == "done" && attempt >= 0 && f.size() >= 3) {
      const auto code = field_int(f[2]);
      const auto r = f.size() > 3 ? decode_report(f, 3) : std::nullopt;
      if (code && (f.size() == 3 || r)) return note_done(p.node, attempt, static_cast<int>(*code), r);
    } else if (f[0] == "leave" && f.size() == 2) {
      p.closed = true;
      return abort("node " + std::to_string(p.node) + "'s tuttirun left: " + std::string(f[1]));
    }
    abort("node " + std::to_string(p.node) + "'s tuttirun sent a line this one does not understand ('" +
          one_field(line.substr(0, 60)) + "'): do all nodes run the same tuttirun?");
  }

  void hello(peer& p, const std::vector<std::string_view>& f) {
    std::string refusal;
    const auto nnodes = f.size() == 6 ? field_int(f[3]) : std::nullopt;
    const auto node = f.size() == 6 ? field_int(f[4]) : std::nullopt;
    const auto restarts = f.size() == 6 ? field_int(f[5]) : std::nullopt;
    if (f.size() != 6 || f[0] != "hello" || f[1] != rdzv_protocol || !nnodes || !node || !restarts) {
      log_refusal(p, "it does not speak " + std::string(rdzv_protocol) + " (another program, or another tuttirun version)");
      p.closed = true;  // a stranger gets no answer
      return;
    }
    if (f[2] != token_hex_) {
      refusal = "wrong job token: its TUTTI_JOB_TOKEN differs from node 0's";
    } else if (*nnodes != o_.nnodes) {
      refusal = "it has --nnodes=" + std::to_string(*nnodes) + ", node 0 has --nnodes=" + std::to_string(o_.nnodes);
    } else if (*node < 1 || *node >= o_.nnodes) {
      refusal = "it has --node-rank=" + std::to_string(*node) + " (another node 0?)";
    } else if (joined_[static_cast<std::size_t>(*node)]) {
      refusal = "node " + std::to_string(*node) + " has joined already (two tuttiruns with --node-rank=" +
                std::to_string(*node) + "?)";
    } else if (*restarts != o_.max_restarts) {
      refusal = "it has --max-restarts=" + std::to_string(*restarts) + ", node 0 has --max-restarts=" +
                std::to_string(o_.max_restarts);
    }
    if (!refusal.empty()) {
      log_refusal(p, refusal);
      p.conn.send("refused\t" + one_field(refusal));
      p.conn.drain(steady_clock::now() + std::chrono::seconds(1));
      p.closed = true;
      return;
    }
    p.node = *node;
    joined_[static_cast<std::size_t>(*node)] = true;
    p.conn.send("welcome");
    if (std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) start(0, std::nullopt);
  }

  void log_refusal(const peer& p, const std::string& why) {
    if (refusals_ > 100) return;
    say(++refusals_ > 100 ? "restart rendezvous: more refused connections, no longer logged"
                          : "restart rendezvous: refused a connection from " + p.conn.peer() + ": " + why);
  }

  void broadcast(const std::string& line) {
    for (auto& p : peers_)
      if (p->node >= 0 && !p->closed) p->conn.send(line);
  }

  void start(long long attempt, std::optional<failure_report> after) {  // a copy: first_ is reset
    started_ = true;
    attempt_ = attempt;
    first_.reset();
    no_restart_ = false;
    std::fill(done_.begin(), done_.end(), std::nullopt);
    deadline_.reset();
    broadcast("start\t" + std::to_string(attempt) + (after ? "\t" + encode(*after) : ""));
    events.push_back({rdzv_event::kind::start, attempt, 0, after, {}});
  }

  void note_failure(long long attempt, const failure_report& r) {
    if (decided_ || !started_ || attempt != attempt_) return;
    no_restart_ = no_restart_ || r.no_restart;
    if (first_) return;
    first_ = r;
    broadcast("failed\t" + std::to_string(attempt) + "\t" + encode(r));
    events.push_back({rdzv_event::kind::failed, attempt, 0, r, {}});
    // Every node's ranks are stopped within the failure grace and the grace (and the wait for
    // their output); the rendezvous timeout comes on top.
    deadline_ = steady_clock::now() + to_duration(o_.failure_grace_s + o_.grace_s + o_.rdzv_timeout_s) + drain_after_exit;
  }

  void note_done(long long node, long long attempt, int code, const std::optional<failure_report>& first) {
    auto& done = done_[static_cast<std::size_t>(node)];
    if (decided_ || !started_ || attempt != attempt_ || done) return;
    done = code;
    if (code != 0) {
      failure_report r;
      r.attempt = attempt, r.node = node, r.exit_code = code, r.unix_ms = unix_ms_now();
      r.what = "the ranks of node " + std::to_string(node) + " failed (status " + std::to_string(code) + ")";
      note_failure(attempt, first ? *first : r);
    }
    // Reported as it happened, a rank's failure came before its last words on stderr.
    if (first_ && first && first->node == first_->node && first->rank == first_->rank && first->rank >= 0)
      first_->last_line = first->last_line;
    if (std::all_of(done_.begin(), done_.end(), [](const std::optional<int>& d) { return d.has_value(); })) decide();
  }

  void decide() {
    if (first_ && !no_restart_ && attempt_ < o_.max_restarts) return start(attempt_ + 1, first_);
    decided_ = true;
    deadline_.reset();
    const int code = first_ ? first_->exit_code : 0;
    broadcast("end\t" + std::to_string(attempt_) + "\t" + std::to_string(code) + (first_ ? "\t" + encode(*first_) : ""));
    events.push_back({rdzv_event::kind::end, attempt_, code, first_, {}});
  }

  void abort(const std::string& why) {
    if (decided_) return;
    decided_ = true;
    deadline_.reset();
    broadcast("abort\t" + one_field(why));
    events.push_back({rdzv_event::kind::abort, attempt_, exit_launcher_error, std::nullopt, why});
  }

  void lost(peer& p, const std::string& why) {
    p.closed = true;
    if (p.node < 0) return;  // a stranger, or a node that was refused
    abort("node " + std::to_string(p.node) + "'s tuttirun went away " +
          (started_ ? "during attempt " + std::to_string(attempt_) : std::string("before the job started")) + " (" +
          why + "): the job ends on every node");
  }

  // Why the deadline passed: who has not joined, or not finished the failed attempt.
  std::string lateness() const {
    std::vector<long long> missing;
    if (!started_) {
      for (long long n = 0; n < o_.nnodes; ++n)
        if (!joined_[static_cast<std::size_t>(n)]) missing.push_back(n);
      return node_list(missing) + " did not join the restart rendezvous on " + where_ + " within " +
             seconds_text(o_.rdzv_timeout_s) + " s (--rdzv-timeout): not started, or started with another "
             "--master-addr, --master-port, --rdzv-port or TUTTI_JOB_TOKEN?";
    }
    for (long long n = 0; n < o_.nnodes; ++n)
      if (!done_[static_cast<std::size_t>(n)]) missing.push_back(n);
    return node_list(missing) + " did not finish attempt " + std::to_string(attempt_) + " within " +
           seconds_text(o_.failure_grace_s + o_.grace_s + o_.rdzv_timeout_s + 1) + " s of its first failure (" +
           (first_ ? cause_text(*first_, true) : "") + "; --failure-grace + --grace + --rdzv-timeout): the job ends "
           "on every node";
  }

  const options o_;
  std::string token_hex_, where_;
  int listener_;
  std::vector<std::unique_ptr<peer>> peers_;
  std::size_t polled_ = 0;  // the peers add_fds() handed to poll()
  std::vector<bool> joined_;
  std::vector<std::optional<int>> done_;  // each node's status for the current attempt
  long long attempt_ = 0;
  bool started_ = false, decided_ = false, no_restart_ = false;
  std::optional<failure_report> first_;  // the current attempt's first failure
  std::optional<steady_clock::time_point> deadline_;
  int refusals_ = 0;
};

// Another node's side: one connection to node 0's tuttirun, which decides.
class rdzv_client final : public rendezvous {
 public:
  rdzv_client(const options& o, const std::string& token)
      : o_(o), token_hex_(to_hex(reinterpret_cast<const unsigned char*>(token.data()), token.size())),
        where_(host_port_text(o.master_addr, *o.rdzv_port)) {}

  int join(int sigfd) override {
    say("restart rendezvous: joining node 0's tuttirun at " + where_);
    int sig = 0;
    const int fd = connect_to_node0(o_, steady_clock::now() + to_duration(o_.rdzv_timeout_s), sigfd, sig);
    if (fd < 0) return sig;
    conn_ = std::make_unique<line_conn>(fd, where_);
    conn_->send("hello\t" + std::string(rdzv_protocol) + "\t" + token_hex_ + "\t" + std::to_string(o_.nnodes) + "\t" +
                std::to_string(o_.node_rank) + "\t" + std::to_string(o_.max_restarts));
    // Node 0 gives up on the nodes missing after --rdzv-timeout of its own; this one, a little later.
    wait_for(to_duration(o_.rdzv_timeout_s) + rdzv_margin, "for every node to join");
    return 0;
  }

  void add_fds(std::vector<pollfd>& fds) override {
    fds.push_back({conn_->fd(), static_cast<short>(POLLIN | (conn_->wants_out() ? POLLOUT : 0)), 0});
  }

  void on_poll(const pollfd* fds) override {
    if (fds[0].revents & POLLOUT) conn_->flush();
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) return;
    std::vector<std::string> lines;
    std::string why;
    const bool open = conn_->receive(lines, why);
    for (const std::string& line : lines)
      if (!decided_) handle(line);
    if (!open && !decided_)
      give_up(welcomed_ ? "lost node 0's tuttirun (the restart rendezvous at " + where_ + ": " + why +
                              "): it exited or was killed, or its host is gone"
                        : "the restart rendezvous at " + where_ + " closed the connection before it welcomed this "
                          "node: is --rdzv-port node 0's tuttirun's (and not, say, rank 0's store)?");
  }

  std::optional<steady_clock::time_point> deadline() const override { return deadline_; }

  void on_time() override {
    if (deadline_ && steady_clock::now() >= *deadline_)
      give_up("no word from node 0's tuttirun at " + where_ + " while waiting " + waiting_for_ + ": giving up");
  }

  void report_failure(const failure_report& r) override {
    conn_->send("failed\t" + std::to_string(r.attempt) + "\t" + encode(r));
  }

  void report_done(long long attempt, int code, const std::optional<failure_report>& first) override {
    conn_->send("done\t" + std::to_string(attempt) + "\t" + std::to_string(code) + (first ? "\t" + encode(*first) : ""));
    if (code != 0 || failed_attempt_ == attempt) wait_after_failure();
  }

  void leave(const std::string& why) override {
    if (!conn_) return;
    conn_->send("leave\t" + one_field(why));
    finish();
  }

  void finish() override {
    if (conn_) conn_->drain(steady_clock::now() + std::chrono::seconds(1));
  }

 private:
  void handle(const std::string& line) {
    const auto f = split_fields(line);
    const long long attempt = attempt_field(f);
    if (f[0] == "welcome" && f.size() == 1) {
      welcomed_ = true;
      return;
    }
    if (f[0] == "refused" && f.size() == 2) return give_up("node 0's tuttirun at " + where_ + " refused this node: " + std::string(f[1]));
    if (f[0] == "abort" && f.size() == 2) {
      decided_ = true;
      events.push_back({rdzv_event::kind::abort, 0, exit_launcher_error, std::nullopt, std::string(f[1])});
      return;
    }
    if (welcomed_ && f[0] == "start" && attempt >= 0 && (f.size() == 2 || decode_report(f, 2))) {
      deadline_.reset();
      events.push_back({rdzv_event::kind::start, attempt, 0, f.size() > 2 ? decode_report(f, 2) : std::nullopt, {}});
      return;
    }
    if (welcomed_ && f[0] == "failed" && attempt >= 0) {
      if (auto r = decode_report(f, 2)) {
        failed_attempt_ = attempt;
        events.push_back({rdzv_event::kind::failed, attempt, 0, r, {}});
        return;
      }
    }
    if (welcomed_ && f[0] == "end" && attempt >= 0 && f.size() >= 3 && field_int(f[2])) {
      decided_ = true;
      deadline_.reset();
      events.push_back({rdzv_event::kind::end, attempt, static_cast<int>(*field_int(f[2])),
                        f.size() > 3 ? decode_report(f, 3) : std::nullopt, {}});
      return;
    }
    give_up("node 0's tuttirun sent a line this one does not understand ('" + one_field(line.substr(0, 60)) +
            "'): do all nodes run the same tuttirun?");
  }

  // Once an attempt failed, every node is done with it soon: node 0 waits for them until its
  // deadline; this node waits for node 0 a little longer.
  void wait_after_failure() {
    wait_for(to_duration(o_.failure_grace_s + o_.grace_s + o_.rdzv_timeout_s) + drain_after_exit + rdzv_margin,
             "for the next attempt");
  }

  void wait_for(steady_clock::duration d, std::string what) {
    deadline_ = steady_clock::now() + d;
    waiting_for_ = std::move(what);
  }

  void give_up(const std::string& why) {
    decided_ = true;
    deadline_.reset();
    events.push_back({rdzv_event::kind::abort, 0, exit_launcher_error, std::nullopt, why});
  }

  const options o_;
  std::string token_hex_, where_;
  std::unique_ptr<line_conn> conn_;
  bool welcomed_ = false, decided_ = false;
  long long failed_attempt_ = -1;  // the last attempt node 0 said failed
  std::optional<steady_clock::time_point> deadline_;
  std::string waiting_for_;
};

std::unique_ptr<rendezvous> make_rendezvous(const options& o, const job_identity& job) {
  if (!restarts_across_nodes(o)) return nullptr;
  if (o.node_rank == 0) return std::make_unique<rdzv_server>(o, job.token);
  return std::make_unique<rdzv_client>(o, job.token);
}

// ---------------------------------------------------------------------------------------------
// The launcher: starts the ranks, then one poll loop forwards output, signals and exits.

class launcher {
 public:
  launcher(options o, job_identity j, int sigfd, sigset_t child_mask, struct sigaction child_sigpipe,
           std::unique_ptr<rendezvous> rdzv)
      : o_(std::move(o)), job_(std::move(j)), ident_(job_), sigfd_(sigfd), child_mask_(child_mask),
        child_sigpipe_(child_sigpipe), rdzv_(std::move(rdzv)) {}

  int run() {
    const int code = run_attempts();
    if (rdzv_) rdzv_->finish();
    return code;
  }

 private:
  struct attempt_outcome {
    bool restart;
    int exit_code;  // when not restarting
    long long next_attempt = 0;
  };

  // Attempt 0 and, with --max-restarts, the restarts; across nodes, as node 0 decides.
  int run_attempts() {
    if (rdzv_) {
      if (const int sig = rdzv_->join(sigfd_)) {
        say(std::string("received ") + signal_name(sig) + " while joining the other nodes: exiting");
        return 128 + sig;
      }
      const rdzv_event ev = await_decision();
      if (ev.what != rdzv_event::kind::start) return ev.code;
    }
    for (;;) {
      start_all();
      while (!finished()) step();
      const attempt_outcome next = rdzv_ ? end_attempt_across_nodes() : end_attempt();
      if (!next.restart) return next.exit_code;
      begin_attempt(next.next_attempt);
    }
  }

  // One node: restart while restarts are left, unless tuttirun was told to stop (a signal).
  attempt_outcome end_attempt() {
    if (!failure_) return {false, interrupted_ ? 128 + interrupted_ : 0};
    print_summary();
    const failure_report cause = local_cause();
    if (!signalled_ && attempt_ < o_.max_restarts) {
      say(restart_text(attempt_ + 1, cause));
      return {true, 0, attempt_ + 1};
    }
    if (o_.max_restarts > 0) print_root_cause(cause);
    return {false, *failure_};
  }

  // Across nodes: this node says how its part of the attempt ended, and node 0 decides for all.
  attempt_outcome end_attempt_across_nodes() {
    const int code = failure_ ? *failure_ : interrupted_ ? 128 + interrupted_ : 0;
    if (aborted_) {
      print_summary();
      return {false, exit_launcher_error};
    }
    if (code == 0 && !remote_failure_)
      say("this node's ranks finished attempt " + std::to_string(attempt_) + "; waiting for the other nodes");
    rdzv_->report_done(attempt_, code, failure_ ? std::optional(local_cause()) : std::nullopt);
    const rdzv_event ev = await_decision();
    if (failure_ || remote_failure_) print_summary();  // not for a signal (as with one node)
    if (ev.what == rdzv_event::kind::abort) return {false, ev.code};
    if (ev.what == rdzv_event::kind::start) {
      if (ev.report) say(restart_text(ev.attempt, *ev.report));
      return {true, 0, ev.attempt};
    }
    if (ev.report) print_root_cause(*ev.report);
    return {false, failure_ ? *failure_ : interrupted_ ? 128 + interrupted_ : ev.code};
  }

  // Waits for node 0's word: start (an attempt), end or abort, saying why for an abort. A signal
  // to tuttirun meanwhile ends this node's part, and the others are told: an abort, 128 + signal.
  rdzv_event await_decision() {
    for (;;) {
      while (!rdzv_->events.empty()) {
        rdzv_event ev = std::move(rdzv_->events.front());
        rdzv_->events.pop_front();
        if (ev.what == rdzv_event::kind::failed) {
          on_remote_failure(ev);
          continue;
        }
        if (ev.what == rdzv_event::kind::abort) say(ev.why);
        return ev;
      }
      std::vector<pollfd> fds{{sigfd_, POLLIN, 0}};
      rdzv_->add_fds(fds);
      auto next = steady_clock::now() + to_duration(o_.monitor_interval_s);
      if (auto d = rdzv_->deadline(); d && *d < next) next = *d;
      if (::poll(fds.data(), fds.size(), poll_ms_until(next)) < 0 && errno != EINTR)
        throw launcher_error(errno_text("poll"));
      if (fds[0].revents & POLLIN) {
        if (const int sig = take_signal(sigfd_)) {
          const std::string why = std::string("received ") + signal_name(sig) + " while waiting for the other nodes";
          say(why + ": exiting");
          rdzv_->leave(why);
          return {rdzv_event::kind::abort, attempt_, 128 + sig, std::nullopt, why};
        }
      }
      rdzv_->on_poll(fds.data() + 1);
      rdzv_->on_time();
    }
  }

  // A restart: what is left of the attempt before goes, the ranks get the next identity.
  void begin_attempt(long long attempt) {
    close_streams();
    attempt_ = attempt;
    ident_ = attempt_identity(o_, job_, attempt, ident_.port);
    ranks_.clear();
    failure_.reset();
    interrupted_ = 0;
    killed_ = false;
    std::fill(std::begin(sent_), std::end(sent_), false);
    failed_.clear();
    first_failed_.reset();
    term_at_.reset(), kill_at_.reset(), drain_until_.reset();
    local_failure_.reset();
    remote_failure_.reset();
  }

  // Output still held open by what a rank left behind (after the wait for it): its unfinished
  // lines are completed, and the pipes closed.
  void close_streams() {
    for (rank_process& r : ranks_)
      for (output_stream* s : {&r.out, &r.err})
        if (s->fd >= 0) {
          emit_lines(r, *s, true);
          if (s->fd >= 0) ::close(s->fd);
          s->fd = -1;
        }
  }

  std::string restart_text(long long attempt, const failure_report& cause) const {
    return "restart " + std::to_string(attempt) + "/" + std::to_string(o_.max_restarts) + " after " +
           cause_text(cause, o_.nnodes > 1);
  }

  // This node's first failure of the attempt, with the last line its rank wrote since.
  failure_report local_cause() const {
    failure_report c = local_failure_ ? *local_failure_ : base_report(failure_ ? *failure_ : exit_launcher_error);
    if (first_failed_) c.last_line = ranks_[*first_failed_].err.last_line;
    return c;
  }

  failure_report base_report(int exit_code) const {
    failure_report r;
    r.attempt = attempt_;
    r.node = o_.node_rank;
    r.exit_code = exit_code;
    r.unix_ms = unix_ms_now();
    r.what = "tuttirun on node " + std::to_string(o_.node_rank) + " failed (status " + std::to_string(exit_code) + ")";
    return r;
  }

  failure_report rank_report(const rank_process& r) const {
    failure_report f = base_report(exit_code_of(*r.exit_wstatus));
    f.rank = r.rank;
    f.local_rank = static_cast<long long>(&r - ranks_.data());
    f.pid = r.pid;
    f.what = describe_exit(*r.exit_wstatus);
    f.unix_ms = r.exited_unix_ms;
    f.last_line = r.err.last_line;
    return f;
  }

  // The first failure on this node in this attempt: across nodes, the others learn it at once.
  void note_local_failure(const failure_report& r) {
    local_failure_ = r;
    if (rdzv_) rdzv_->report_failure(r);
  }

  // Node 0 says attempt k failed (on another node, or this one: then nothing is new).
  void on_remote_failure(const rdzv_event& ev) {
    if (ev.attempt != attempt_ || !ev.report || ev.report->node == o_.node_rank) return;
    if (failure_ || interrupted_ || remote_failure_ || aborted_) return;
    remote_failure_ = ev.report;
    say("node " + std::to_string(ev.report->node) + " reports the first failure of attempt " +
        std::to_string(attempt_) + ": " + cause_text(*ev.report, true));
    wind_down(true, "this node's ranks");
  }

  // Node 0's rendezvous ends the job (a node gone or late): the ranks stop now.
  void on_abort(const std::string& why) {
    if (aborted_) return;
    aborted_ = true;
    say(why);
    for (rank_process& r : ranks_)
      if (r.running && r.stopped_by) kill_stopped(r);
    term_at_.reset();
    if (std::any_of(ranks_.begin(), ranks_.end(), [](const rank_process& r) { return r.running; }))
      stop_others("stopping this node's ranks");
  }

  // Acts on what node 0's rendezvous said while the ranks run; start and end come only between
  // attempts (node 0 waits for this node's report first), and stay queued.
  void on_rdzv_events() {
    auto& events = rdzv_->events;
    for (auto it = events.begin(); it != events.end();) {
      if (it->what == rdzv_event::kind::failed) on_remote_failure(*it);
      else if (it->what == rdzv_event::kind::abort) on_abort(it->why);
      else { ++it; continue; }
      it = events.erase(it);
    }
  }

  // Across nodes, a signal to tuttirun ends the job: the first is reported as a failure that no
  // restart follows.
  void note_signal(int sig) {
    if (signalled_) return;
    signalled_ = sig;
    if (!rdzv_) return;
    failure_report r = base_report(128 + sig);
    r.what = "tuttirun on node " + std::to_string(o_.node_rank) + " received " + signal_name(sig);
    r.no_restart = true;
    rdzv_->report_failure(r);
  }

  // The root cause, as torchrun prints it: the first failure of the last attempt.
  void print_root_cause(const failure_report& r) const {
    const bool nodes = o_.nnodes > 1;
    const std::string on_node = nodes ? " on node " + std::to_string(r.node) : "";
    std::string text = "tuttirun: Root Cause (first observed failure):\n";
    auto row = [&](std::string_view name, const std::string& value) {
      text += "tuttirun:   " + std::string(name) + value + "\n";
    };
    row("rank:       ", r.rank >= 0 ? std::to_string(r.rank) + " (local rank " + std::to_string(r.local_rank) + on_node + ")"
                                    : "none (" + r.what + ")");
    row("exit code:  ", std::to_string(r.exit_code) + (r.rank >= 0 ? " (" + r.what + ")" : ""));
    row("time:       ", wall_time_text(r.unix_ms) + (nodes && r.node != o_.node_rank ? " (node " + std::to_string(r.node) + "'s clock)" : ""));
    row("attempt:    ", std::to_string(r.attempt) + " (TUTTI_RESTART_COUNT; " + std::to_string(r.attempt) + " of --max-restarts=" +
                            std::to_string(o_.max_restarts) + " restarts used)");
    if (r.pid > 0) row("pid:        ", std::to_string(r.pid) + on_node);
    if (r.rank >= 0) row("stderr:     ", r.last_line.empty() ? "nothing" : "last line: " + r.last_line);
    write_all(STDERR_FILENO, text);
  }

  void start_all() {
    int devnull = -1;
    if (::isatty(STDIN_FILENO)) devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ranks_.resize(static_cast<std::size_t>(o_.nproc_per_node));
    for (long long i = 0; i < o_.nproc_per_node; ++i) {
      rank_process& r = ranks_[static_cast<std::size_t>(i)];
      r.rank = o_.node_rank * o_.nproc_per_node + i;
      try {
        start(r, i, devnull);
      } catch (const launcher_error& e) {
        say("cannot start rank " + std::to_string(r.rank) + ": " + e.what());
        failure_report f = base_report(exit_launcher_error);
        f.rank = r.rank, f.local_rank = i, f.what = std::string("could not be started: ") + e.what();
        note_local_failure(f);
        // The ranks started so far would wait for this one until their deadline: no failure grace.
        fail(exit_launcher_error, /*wait_first=*/false);
        break;
      }
    }
    if (devnull >= 0) ::close(devnull);
  }

  void start(rank_process& r, long long local_rank, int stdin_fd) {
    std::vector<std::string> env = rank_environment(o_, ident_, local_rank, attempt_);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    pipe_ends out = make_pipe();
    pipe_ends err;
    try {
      err = make_pipe();
    } catch (...) {
      ::close(out.read), ::close(out.write);
      throw;
    }
    child_setup setup{::getpid(), stdin_fd, out.write, err.write, child_mask_, child_sigpipe_,
                     o_.program.data(), envp.data()};
    pid_t pid = ::fork();
    if (pid == 0) exec_child(setup);
    int fork_errno = errno;
    ::close(out.write), ::close(err.write);
    if (pid < 0) {
      ::close(out.read), ::close(err.read);
      errno = fork_errno;
      throw launcher_error(errno_text("fork"));
    }
    ::setpgid(pid, pid);  // also here, so that signals reach the group before the child runs
    r.pid = pid;
    r.running = true;
    r.out = {out.read, STDOUT_FILENO, {}, false, {}};
    r.err = {err.read, STDERR_FILENO, {}, true, {}};
  }

  bool finished() const {
    bool any_running = std::any_of(ranks_.begin(), ranks_.end(), [](const rank_process& r) { return r.running; });
    if (any_running) return false;
    if (drain_until_ && steady_clock::now() >= *drain_until_) return true;
    return std::none_of(ranks_.begin(), ranks_.end(),
                        [](const rank_process& r) { return r.out.fd >= 0 || r.err.fd >= 0; });
  }

  // One round of the loop: it wakes on a signal (SIGCHLD too: a rank's exit), a rank's output,
  // the rendezvous, a deadline, or --monitor-interval after the last round, whichever comes first.
  void step() {
    std::vector<pollfd> fds{{sigfd_, POLLIN, 0}};
    const std::size_t rdzv_at = fds.size();
    if (rdzv_) rdzv_->add_fds(fds);
    const std::size_t ranks_at = fds.size();
    std::vector<std::pair<rank_process*, output_stream*>> owners;
    for (rank_process& r : ranks_)
      for (output_stream* s : {&r.out, &r.err})
        if (s->fd >= 0) fds.push_back({s->fd, POLLIN, 0}), owners.emplace_back(&r, s);

    if (::poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR)
      throw launcher_error(errno_text("poll"));

    if (fds[0].revents & POLLIN) read_signals();
    for (std::size_t i = ranks_at; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[i - ranks_at].first, *owners[i - ranks_at].second);
    reap();
    if (rdzv_) {
      rdzv_->on_poll(fds.data() + rdzv_at);
      rdzv_->on_time();
      on_rdzv_events();
    }
    on_deadlines();
  }

  int poll_timeout_ms() const {
    auto next = steady_clock::now() + to_duration(o_.monitor_interval_s);
    for (const auto& t : {term_at_, kill_at_, drain_until_, rdzv_ ? rdzv_->deadline() : std::nullopt})
      if (t && *t < next) next = *t;
    return poll_ms_until(next);
  }

  // --- output

  void pump(rank_process& r, output_stream& s) {
    if (s.fd < 0) return;  // closed by close_destination() earlier in this round
    char buf[65536];
    ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) return;
    if (n > 0) {
      s.pending.append(buf, static_cast<std::size_t>(n));
      emit_lines(r, s, false);
      return;
    }
    emit_lines(r, s, true);
    if (s.fd >= 0) ::close(s.fd);
    s.fd = -1;
  }

  // Writes the complete lines of `s` with one write() per read, so lines are never split
  // between ranks. At EOF, an unterminated last line is completed (unchanged with --no-prefix).
  void emit_lines(const rank_process& r, output_stream& s, bool eof) {
    std::string out, prefix = o_.prefix ? "[rank " + std::to_string(r.rank) + "] " : "";
    std::size_t begin = 0;
    std::string_view last;  // the last line of this batch that is not blank
    while (begin < s.pending.size()) {
      std::size_t nl = s.pending.find('\n', begin);
      std::size_t end = nl == std::string::npos ? s.pending.size() : nl + 1;
      bool complete = nl != std::string::npos;
      if (!complete && !eof && end - begin < max_line) break;
      out += prefix;
      out.append(s.pending, begin, end - begin);
      if (!complete && (o_.prefix || !eof)) out += '\n';
      std::string_view line(s.pending.data() + begin, end - begin);
      if (line.find_first_not_of(" \t\r\n") != std::string_view::npos) last = line;
      begin = end;
    }
    if (s.keeps_last_line && !last.empty()) {
      while (last.ends_with('\n') || last.ends_with('\r')) last.remove_suffix(1);
      s.last_line.assign(last.substr(0, max_quoted_line));
      if (last.size() > max_quoted_line) s.last_line += "...";
    }
    s.pending.erase(0, begin);
    if (!write_all(s.dest, out) && errno == EPIPE) close_destination(s.dest);
  }

  // Our stdout (or stderr) is a closed pipe, as in `tuttirun prog | head`: closing the ranks'
  // pipes too lets them get SIGPIPE, as they would writing to that pipe directly.
  void close_destination(int dest) {
    for (rank_process& r : ranks_)
      for (output_stream* s : {&r.out, &r.err})
        if (s->dest == dest && s->fd >= 0) {
          ::close(s->fd);
          s->fd = -1;
          s->pending.clear();
        }
  }

  // --- signals and exits

  void read_signals() {
    signalfd_siginfo si;
    while (::read(sigfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      int sig = static_cast<int>(si.ssi_signo);
      if (sig == SIGCHLD) continue;  // reap() runs after every poll
      on_signal(sig);
    }
  }

  void on_signal(int sig) {
    if (sig == SIGUSR1) {  // "where is everybody": the ranks print their flight recorders
      say("received SIGUSR1, forwarding it to the ranks");
      signal_ranks(SIGUSR1);
      return;
    }
    if (sig == SIGINT && ++sigints_ >= 2) {
      note_signal(sig);
      say("second SIGINT: killing the ranks");
      signal_ranks(SIGKILL);
      return;
    }
    say(std::string("received ") + signal_name(sig) + ", forwarding it to the ranks");
    note_signal(sig);
    if (!failure_ && !interrupted_ && !remote_failure_) interrupted_ = sig;
    term_at_.reset();  // the forwarded signal stops them instead of the SIGTERM after the failure grace
    signal_ranks(sig);
    signal_ranks(SIGCONT);
    arm_kill_timer();
  }

  void reap() {
    int wstatus = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &wstatus, WNOHANG | WUNTRACED | WCONTINUED)) > 0) {
      auto r = std::find_if(ranks_.begin(), ranks_.end(), [&](const rank_process& x) { return x.pid == pid; });
      if (r == ranks_.end()) continue;
      const std::string who = "rank " + std::to_string(r->rank) + " (pid " + std::to_string(pid) + ") ";
      if (WIFSTOPPED(wstatus)) {
        // A stopped rank holds its peers up until their deadline; say which one it is.
        r->stopped_by = WSTOPSIG(wstatus);
        say(who + "was stopped by signal " + std::to_string(r->stopped_by) + " (" + signal_name(r->stopped_by) + ")");
        if (failure_ || interrupted_) kill_stopped(*r);
        continue;
      }
      if (WIFCONTINUED(wstatus)) {
        r->stopped_by = 0;
        continue;
      }
      if (!(WIFEXITED(wstatus) || WIFSIGNALED(wstatus))) continue;
      r->running = false;
      r->stopped_by = 0;
      r->exit_wstatus = wstatus;
      r->exited_unix_ms = unix_ms_now();
      if (exit_code_of(wstatus) == 0) continue;
      failed_.push_back(static_cast<std::size_t>(r - ranks_.begin()));
      if (!failure_ && !interrupted_ && !remote_failure_ && !aborted_) {
        say(who + describe_exit(wstatus));
        first_failed_ = failed_.back();
        note_local_failure(rank_report(*r));
        fail(exit_code_of(wstatus));
      } else if ((o_.keep_going && !interrupted_) || (WIFSIGNALED(wstatus) && !sent_[WTERMSIG(wstatus)])) {
        // With --keep-going every failure is news; otherwise one by a signal tuttirun did not
        // send, after the first failure, is a cause too.
        say(who + describe_exit(wstatus));
      }
    }
    bool any_running = std::any_of(ranks_.begin(), ranks_.end(), [](const rank_process& x) { return x.running; });
    // --keep-going: once the ranks that run on have exited, a stopped one would hold the job forever.
    const bool only_stopped_left =
        std::all_of(ranks_.begin(), ranks_.end(), [](const rank_process& x) { return !x.running || x.stopped_by; }) &&
        std::any_of(ranks_.begin(), ranks_.end(), [](const rank_process& x) { return !x.running; });
    if (o_.keep_going && any_running && only_stopped_left) {
      say("only stopped ranks are left");
      for (rank_process& r : ranks_)
        if (r.running && r.stopped_by) kill_stopped(r);
      if (!failure_) {
        failure_ = 128 + SIGKILL;
        failure_report f = base_report(*failure_);
        f.what = "only stopped ranks were left on node " + std::to_string(o_.node_rank) + " (killed)";
        note_local_failure(f);
      }
    }
    if (!any_running && !drain_until_) drain_until_ = steady_clock::now() + drain_after_exit;
  }

  // The first failure. Unless `wait_first` is false or --failure-grace=0, the other ranks get the
  // failure grace before SIGTERM: tutti ranks whose peer failed raise peer_lost within
  // milliseconds, and each should get to print why before it is stopped.
  void fail(int exit_code, bool wait_first = true) {
    failure_ = exit_code;
    wind_down(wait_first, "the other ranks");
  }

  // After a failure (this node's, or across nodes another's): the ranks still running (`who`)
  // get the failure grace, then SIGTERM.
  void wind_down(bool wait_first, const std::string& who) {
    if (std::none_of(ranks_.begin(), ranks_.end(), [](const rank_process& r) { return r.running; })) return;
    // A rank stopped by a signal (SIGSTOP, SIGTSTP, ...) was not stopped by tuttirun: continued,
    // it would run on against peers that are gone, or hang again. It is killed, not resumed.
    for (rank_process& r : ranks_)
      if (r.running && r.stopped_by) kill_stopped(r);
    if (o_.keep_going) {
      say("--keep-going: " + who + " run on");
      return;
    }
    if (wait_first && o_.failure_grace_s > 0) {
      say("waiting up to " + seconds_text(o_.failure_grace_s) + " s for " + who +
          " to exit on their own (--failure-grace)");
      term_at_ = steady_clock::now() + to_duration(o_.failure_grace_s);
      return;
    }
    stop_others("stopping " + who);
  }

  void stop_others(std::string_view why) {
    say(why);
    signal_ranks(SIGTERM);
    signal_ranks(SIGCONT);  // a rank that stops after this acts on SIGTERM only once continued
    arm_kill_timer();
  }

  // Every rank that failed, the first one first, with its exit status and last line on stderr.
  void print_summary() const {
    if (failed_.empty()) return;
    std::string text = "tuttirun: " + std::to_string(failed_.size()) + " of " + std::to_string(ranks_.size()) +
                       (ranks_.size() == 1 ? " rank" : " ranks") + (o_.nnodes > 1 ? " on this node" : "") +
                       " failed" +
                       (first_failed_ ? ", rank " + std::to_string(ranks_[*first_failed_].rank) + " first" : "") +
                       (failure_          ? " (exit status " + std::to_string(*failure_) + ")"
                        : remote_failure_ ? " after the failure on node " + std::to_string(remote_failure_->node)
                                          : "") +
                       ":\n";
    for (std::size_t i : failed_) {
      const rank_process& r = ranks_[i];
      const int wstatus = *r.exit_wstatus;
      text += "tuttirun:   rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") " +
              describe_exit(wstatus);
      if (WIFSIGNALED(wstatus) && sent_[WTERMSIG(wstatus)] && i != first_failed_) text += ", sent by tuttirun";
      text += r.err.last_line.empty() ? "; nothing on stderr" : "; last line on stderr: " + r.err.last_line;
      text += '\n';
    }
    write_all(STDERR_FILENO, text);
  }

  void kill_stopped(rank_process& r) {
    say("rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") is stopped: killing it (SIGKILL)");
    sent_[SIGKILL] = true;
    ::kill(-r.pid, SIGKILL);
  }

  void arm_kill_timer() {
    if (kill_at_ || killed_) return;
    kill_at_ = steady_clock::now() + to_duration(o_.grace_s);
  }

  void on_deadlines() {
    if (term_at_ && steady_clock::now() >= *term_at_) {
      term_at_.reset();
      if (std::any_of(ranks_.begin(), ranks_.end(), [](const rank_process& r) { return r.running; })) {
        stop_others(failure_ || !remote_failure_ ? "failure grace over: stopping the other ranks"
                                                 : "failure grace over: stopping this node's ranks");
      }
    }
    if (kill_at_ && steady_clock::now() >= *kill_at_) {
      kill_at_.reset();
      killed_ = true;
      if (std::any_of(ranks_.begin(), ranks_.end(), [](const rank_process& r) { return r.running; })) {
        say("grace period over: killing the remaining ranks");
        signal_ranks(SIGKILL);
      }
    }
  }

  // Signals whole process groups, so that a rank's own children get them as well.
  void signal_ranks(int sig) {
    sent_[sig] = true;
    for (const rank_process& r : ranks_)
      if (r.running) ::kill(-r.pid, sig);
  }

  options o_;
  job_identity job_;    // the job's identity (attempt 0's)
  job_identity ident_;  // the current attempt's (attempt_identity)
  int sigfd_;
  sigset_t child_mask_;
  struct sigaction child_sigpipe_;
  std::unique_ptr<rendezvous> rdzv_;  // with --nnodes > 1 and --max-restarts
  long long attempt_ = 0;             // TUTTI_RESTART_COUNT of the ranks running
  std::vector<rank_process> ranks_;
  std::optional<int> failure_;  // exit status decided by the first failing rank
  int interrupted_ = 0;         // first signal forwarded before any failure
  int signalled_ = 0;           // first signal forwarded, failure or not: no more restarts
  int sigints_ = 0;
  std::optional<failure_report> local_failure_;   // this attempt's first failure on this node
  std::optional<failure_report> remote_failure_;  // another node's, when it came first
  bool aborted_ = false;                          // the rendezvous ended the job
  bool killed_ = false;
  bool sent_[65] = {};  // signals tuttirun has sent to the ranks
  std::vector<std::size_t> failed_;          // indices into ranks_ of the ranks that failed, in order
  std::optional<std::size_t> first_failed_;  // the one whose failure decided failure_, if a rank's did
  // SIGTERM to the ranks after the first failure (--failure-grace), SIGKILL after SIGTERM (--grace),
  // the end of the wait for output once every rank has exited.
  std::optional<steady_clock::time_point> term_at_, kill_at_, drain_until_;
};

// Routes the signals tuttirun handles to a signalfd, so that the poll loop sees them. Returns the
// signal mask and SIGPIPE disposition the ranks should start with.
int setup_signals(sigset_t& child_mask, struct sigaction& child_sigpipe) {
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGCHLD, &dfl, nullptr);  // an inherited SIG_IGN would make waitpid useless

  struct sigaction ign{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &child_sigpipe);  // a closed stdout must not kill tuttirun

  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1}) sigaddset(&set, sig);
  ::sigprocmask(SIG_BLOCK, &set, &child_mask);
  int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) throw launcher_error(errno_text("signalfd"));
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  options opts;
  try {
    opts = parse_args(argc, argv);
  } catch (const usage_error& e) {
    say(e.what());
    write_all(STDERR_FILENO, "Try 'tuttirun --help' for more information.\n");
    return exit_usage;
  }
  try {
    sigset_t child_mask;
    struct sigaction child_sigpipe{};
    int sigfd = setup_signals(child_mask, child_sigpipe);
    job_identity job = make_identity(opts);
    std::unique_ptr<rendezvous> rdzv = make_rendezvous(opts, job);
    return launcher(std::move(opts), std::move(job), sigfd, child_mask, child_sigpipe, std::move(rdzv)).run();
  } catch (const launcher_error& e) {
    say(e.what());
    return exit_launcher_error;
  }
}
