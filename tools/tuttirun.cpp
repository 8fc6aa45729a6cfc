// tuttirun: start N ranks of a tutti program on this node, the equivalent of
// `torchrun --nproc-per-node=N`. Linux only; needs nothing beyond libc and the standard library.

#include <fcntl.h>
#include <netdb.h>
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
  -h, --help          print this help and exit
  --version           print the version and exit

Environment of local rank i (0..N-1):
  RANK=K*N+i  WORLD_SIZE=M*N  LOCAL_RANK=i  LOCAL_WORLD_SIZE=N
  GROUP_RANK=K  NODE_RANK=K  MASTER_ADDR=A  MASTER_PORT=P
  TUTTI_LAUNCHER=tuttirun
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

Exit status:
  0       every rank exited with status 0
  S       the first rank to fail exited with status S
  128+n   the first rank to fail was killed by signal n, or (if no rank had
          failed before) tuttirun itself received signal n
  127     a rank's program was not found (126: found but not executable)
  2       bad command line
  1       tuttirun itself failed (pipes, processes, picking a port)
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
  std::vector<char*> program;  // argv of the ranks, null-terminated
};

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

double parse_seconds(std::string_view flag, std::string_view v) {
  double x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x, std::chars_format::fixed);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !std::isfinite(x))
    throw usage_error(std::string(flag) + ": '" + std::string(v) + "' is not a number of seconds");
  if (x < 0 || x > 86400) throw usage_error(std::string(flag) + ": " + std::string(v) + " is out of range (0-86400)");
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
std::vector<std::string> rank_environment(const options& o, const job_identity& j, long long local_rank) {
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
  output_stream out, err;
};

// ---------------------------------------------------------------------------------------------
// The launcher: starts the ranks, then one poll loop forwards output, signals and exits.

class launcher {
 public:
  launcher(options o, job_identity j, int sigfd, sigset_t child_mask, struct sigaction child_sigpipe)
      : o_(std::move(o)), job_(std::move(j)), sigfd_(sigfd), child_mask_(child_mask),
        child_sigpipe_(child_sigpipe) {}

  int run() {
    start_all();
    while (!finished()) step();
    if (failure_) {
      print_summary();
      return *failure_;
    }
    return interrupted_ ? 128 + interrupted_ : 0;
  }

 private:
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
        // The ranks started so far would wait for this one until their deadline: no failure grace.
        fail(exit_launcher_error, /*wait_first=*/false);
        break;
      }
    }
    if (devnull >= 0) ::close(devnull);
  }

  void start(rank_process& r, long long local_rank, int stdin_fd) {
    std::vector<std::string> env = rank_environment(o_, job_, local_rank);
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

  void step() {
    std::vector<pollfd> fds{{sigfd_, POLLIN, 0}};
    std::vector<std::pair<rank_process*, output_stream*>> owners{{nullptr, nullptr}};
    for (rank_process& r : ranks_)
      for (output_stream* s : {&r.out, &r.err})
        if (s->fd >= 0) fds.push_back({s->fd, POLLIN, 0}), owners.emplace_back(&r, s);

    if (::poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR)
      throw launcher_error(errno_text("poll"));

    if (fds[0].revents & POLLIN) read_signals();
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[i].first, *owners[i].second);
    reap();
    on_deadlines();
  }

  int poll_timeout_ms() const {
    std::optional<steady_clock::time_point> next = kill_at_;
    for (const auto& t : {term_at_, drain_until_})
      if (t && (!next || *t < *next)) next = t;
    if (!next) return -1;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - steady_clock::now()).count();
    return static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
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
      say("second SIGINT: killing the ranks");
      signal_ranks(SIGKILL);
      return;
    }
    say(std::string("received ") + signal_name(sig) + ", forwarding it to the ranks");
    if (!failure_ && !interrupted_) interrupted_ = sig;
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
      if (exit_code_of(wstatus) == 0) continue;
      failed_.push_back(static_cast<std::size_t>(r - ranks_.begin()));
      if (!failure_ && !interrupted_) {
        say(who + describe_exit(wstatus));
        first_failed_ = failed_.back();
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
      if (!failure_) failure_ = 128 + SIGKILL;
    }
    if (!any_running && !drain_until_) drain_until_ = steady_clock::now() + drain_after_exit;
  }

  // The first failure. Unless `wait_first` is false or --failure-grace=0, the other ranks get the
  // failure grace before SIGTERM: tutti ranks whose peer failed raise peer_lost within
  // milliseconds, and each should get to print why before it is stopped.
  void fail(int exit_code, bool wait_first = true) {
    failure_ = exit_code;
    if (std::none_of(ranks_.begin(), ranks_.end(), [](const rank_process& r) { return r.running; })) return;
    // A rank stopped by a signal (SIGSTOP, SIGTSTP, ...) was not stopped by tuttirun: continued,
    // it would run on against peers that are gone, or hang again. It is killed, not resumed.
    for (rank_process& r : ranks_)
      if (r.running && r.stopped_by) kill_stopped(r);
    if (o_.keep_going) {
      say("--keep-going: the other ranks run on");
      return;
    }
    if (wait_first && o_.failure_grace_s > 0) {
      say("waiting up to " + seconds_text(o_.failure_grace_s) +
          " s for the other ranks to exit on their own (--failure-grace)");
      term_at_ = steady_clock::now() + to_duration(o_.failure_grace_s);
      return;
    }
    stop_others("stopping the other ranks");
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
                       " (exit status " + std::to_string(*failure_) + "):\n";
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
        stop_others("failure grace over: stopping the other ranks");
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
  job_identity job_;
  int sigfd_;
  sigset_t child_mask_;
  struct sigaction child_sigpipe_;
  std::vector<rank_process> ranks_;
  std::optional<int> failure_;  // exit status decided by the first failing rank
  int interrupted_ = 0;         // first signal forwarded before any failure
  int sigints_ = 0;
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
    return launcher(std::move(opts), std::move(job), sigfd, child_mask, child_sigpipe).run();
  } catch (const launcher_error& e) {
    say(e.what());
    return exit_launcher_error;
  }
}
