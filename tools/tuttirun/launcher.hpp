// tuttirun: the launcher: starts the ranks, then one poll loop forwards output, signals and exits,
// and, with --max-restarts, starts them again.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common.hpp"
#include "failure.hpp"
#include "hang_report.hpp"
#include "job.hpp"
#include "options.hpp"
#include "output.hpp"
#include "rendezvous.hpp"
#include "spawn.hpp"

extern char** environ;

namespace tuttirun {

struct rank_process {
  long long rank = 0;
  pid_t pid = -1;  // also its process group's id
  bool running = false;
  // Its process group is empty: once the rank has exited, what it started there has too. The id
  // may then be reused by an unrelated group, so it is never signalled again.
  bool group_gone = false;
  int stopped_by = 0;               // the signal that stopped it while it is stopped, else 0
  std::optional<int> exit_wstatus;  // once it has exited
  long long exited_unix_ms = 0;     // when tuttirun saw it exit
  output_stream out, err;
};

class launcher {
 public:
  launcher(options o, job_identity j, int sigfd, sigset_t child_mask, struct sigaction child_sigpipe,
           std::unique_ptr<rendezvous> rdzv)
      : o_(std::move(o)), job_(std::move(j)), ident_(job_), sigfd_(sigfd), child_mask_(child_mask),
        child_sigpipe_(child_sigpipe), rdzv_(std::move(rdzv)) {}

  int run() {
    make_flight_dir();
    write_rendezvous_note();
    if (rdzv_) rdzv_->local_records = [this] { return local_records(); };
    const int code = run_attempts();
    settle_reports();
    if (rdzv_) rdzv_->finish();
    remove_flight_dir();
    return code;
  }

 private:
  // A job report being gathered (node 0) or awaited (another node) when the ranks are done is
  // finished first, for at most report_wait + report_margin (new questions meanwhile may go
  // unanswered), or until a signal.
  void settle_reports() {
    const auto until = steady_clock::now() + report_wait + report_margin;
    while (rdzv_ && rdzv_->busy() && steady_clock::now() < until) {
      std::vector<pollfd> fds{{sigfd_, POLLIN, 0}};
      rdzv_->add_fds(fds);
      auto next = until;
      if (const auto d = rdzv_->deadline(); d && *d < next) next = *d;
      if (::poll(fds.data(), fds.size(), poll_ms_until(next)) < 0 && errno != EINTR) return;
      if ((fds[0].revents & POLLIN) && take_signal(sigfd_)) return;
      rdzv_->on_poll(fds.data() + 1);
      rdzv_->on_time();
    }
  }

  // Across nodes with --max-restarts, node 0's rendezvous decides every attempt; without, it
  // carries the hang report only.
  bool coordinated() const { return rdzv_ && restarts_across_nodes(o_); }

  struct attempt_outcome {
    bool restart;
    int exit_code;  // when not restarting
    long long next_attempt = 0;
  };

  // Attempt 0 and, with --max-restarts, the restarts; across nodes, as node 0 decides.
  int run_attempts() {
    if (rdzv_ && !coordinated()) rdzv_->join(sigfd_);  // returns at once: it only carries reports
    if (coordinated()) {
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
      const attempt_outcome next = coordinated() ? end_attempt_across_nodes() : end_attempt();
      if (!next.restart) return next.exit_code;
      begin_attempt(next.next_attempt);
    }
  }

  // One node: restart while restarts are left, unless tuttirun was told to stop (a signal) or the
  // failure would come again (a program that cannot be run).
  attempt_outcome end_attempt() {
    if (!failure_) return {false, interrupted_ ? 128 + interrupted_ : 0};
    const std::vector<failure_report> seen = failures_seen();
    const failure_report cause = pick_cause(seen).value_or(local_cause());
    print_summary(cause, job_status(cause, seen));
    if (!signalled_ && attempt_ < o_.max_restarts) {
      if (!cause.no_restart) {
        say(restart_text(attempt_ + 1, cause));
        return {true, 0, attempt_ + 1};
      }
      say("no restart: every attempt would fail the same way");
    }
    if (o_.max_restarts > 0) print_root_cause(cause, job_status(cause, seen));
    return {false, job_status(cause, seen)};
  }

  // Across nodes: this node says how its part of the attempt ended, and node 0 decides for all.
  attempt_outcome end_attempt_across_nodes() {
    const int code = failure_ ? *failure_ : interrupted_ ? 128 + interrupted_ : 0;
    if (aborted_) {
      print_summary(std::nullopt, std::nullopt);
      return {false, exit_launcher_error};
    }
    if (code == 0 && !remote_failure_)
      say("this node's ranks finished attempt " + std::to_string(attempt_) + "; waiting for the other nodes");
    rdzv_->report_done(attempt_, code, code != 0 || remote_failure_ ? failures_seen() : std::vector<failure_report>{});
    const rdzv_event ev = await_decision();
    // Not for a signal (as with one node). The cause is node 0's pick, from every node's part.
    if (failure_ || remote_failure_) {
      const bool ended = ev.what == rdzv_event::kind::end && ev.code != 0;
      print_summary(ev.what != rdzv_event::kind::abort ? ev.report : std::nullopt,
                    ended                                ? std::optional(ev.code)
                    : ev.report && ev.report->exit_code ? std::optional(ev.report->exit_code)
                                                        : std::nullopt);
    }
    if (ev.what == rdzv_event::kind::abort) return {false, ev.code};
    if (ev.what == rdzv_event::kind::start) {
      if (ev.report) say(restart_text(ev.attempt, *ev.report));
      return {true, 0, ev.attempt};
    }
    if (ev.report) print_root_cause(*ev.report, ev.code);
    // Node 0's status for the job (its cause's), the same on every node.
    if (ev.code != 0) return {false, ev.code};
    return {false, failure_ ? *failure_ : interrupted_ ? 128 + interrupted_ : 0};
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
    if (!flight_dir_.empty()) clear_dir(flight_dir_, false);  // the attempt before's maps and tables
    write_rendezvous_note();
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

  // What each rank of this node that exited had to do with the attempt's failure (and tuttirun's
  // own failure on this node, if it had one), once the attempt is over and the ranks' last words
  // are in: a rank whose last words on stderr blame another rank is that rank's victim (tutti's
  // "rank 1 failed, so ... fails too"), one killed by a signal tuttirun sent was stopped, one that
  // exited with status 0 may have left early (pick_cause decides: blamed, or before any failure;
  // the time tuttirun saw it exit does not tell, as its victims may exit before it), and any other
  // that failed is a cause. pick_cause() picks from these, across nodes on node 0.
  std::vector<failure_report> failures_seen() const {
    std::vector<failure_report> seen;
    if (local_failure_ && local_failure_->pid < 0) seen.push_back(*local_failure_);  // no rank's exit
    if (signal_report_ && signal_report_->attempt == attempt_) seen.push_back(*signal_report_);
    for (const rank_process& r : ranks_) {
      if (!r.exit_wstatus) continue;
      const int wstatus = *r.exit_wstatus;
      failure_report f = rank_report(r);
      if (exit_code_of(wstatus) == 0) {
        f.role = failure_role::early_exit;
        f.what = "exited with status 0 at " + wall_time_text(r.exited_unix_ms) +
                 ", before the others finished: the job's failure began there";
      } else if (const long long blamed = blamed_rank(r.err.last_words); blamed >= 0 && blamed != r.rank) {
        f.role = failure_role::victim;
        f.victim_of = blamed;
      } else if (WIFSIGNALED(wstatus) && sent_[WTERMSIG(wstatus)]) {
        f.role = failure_role::stopped;
      }
      seen.push_back(f);
    }
    return seen;
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
    if (coordinated()) rdzv_->report_failure(r);
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
    if (!coordinated()) return;
    failure_report r = base_report(128 + sig);
    r.what = "tuttirun on node " + std::to_string(o_.node_rank) + " received " + signal_name(sig);
    r.no_restart = true;
    signal_report_ = r;
    rdzv_->report_failure(r);
  }

  // The root cause, as torchrun prints it: the cause of the last attempt's failure (pick_cause), which
  // need not be its first failure observed.
  void print_root_cause(const failure_report& r, int status) const {
    const bool nodes = o_.nnodes > 1;
    const std::string on_node = nodes ? " on node " + std::to_string(r.node) : "";
    std::string text = "tuttirun: Root Cause (the failure the others followed):\n";
    auto row = [&](std::string_view name, const std::string& value) {
      text += "tuttirun:   " + std::string(name) + value + "\n";
    };
    row("rank:       ", r.rank >= 0 ? std::to_string(r.rank) + " (local rank " + std::to_string(r.local_rank) + on_node + ")"
                                    : "none (" + r.what + ")");
    row("exit code:  ", std::to_string(r.exit_code) + (r.rank >= 0 ? " (" + r.what + ")" : "") +
                            (status != r.exit_code ? "; the job exits with " + std::to_string(status) + ", its first failure's" : ""));
    row("time:       ", wall_time_text(r.unix_ms) + (nodes && r.node != o_.node_rank ? " (node " + std::to_string(r.node) + "'s clock)" : ""));
    row("attempt:    ", std::to_string(r.attempt) + " (TUTTI_RESTART_COUNT; " + std::to_string(r.attempt) + " of --max-restarts=" +
                            std::to_string(o_.max_restarts) + " restarts used)");
    if (r.pid > 0) row("pid:        ", std::to_string(r.pid) + on_node);
    if (r.rank >= 0) row("stderr:     ", r.last_line.empty() ? "nothing" : "last line: " + r.last_line);
    write_all(STDERR_FILENO, text);
  }

  void start_all() {
    // A program that cannot be run would fail every rank, and every restart, the same way.
    if (const int err = program_error(o_.program[0], std::getenv("PATH"))) {
      const std::string why = std::string("cannot run '") + o_.program[0] + "': " + std::strerror(err);
      say(why);
      failure_ = exit_code_of_exec_error(err);
      failure_report f = base_report(*failure_);
      f.what = why;
      f.no_restart = true;
      note_local_failure(f);
      return;
    }
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
    if (!flight_dir_.empty()) env.push_back("TUTTI_FLIGHT_MAP=" + flight_dir_);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    const spawned_process p = spawn(o_.program.data(), envp.data(), stdin_fd, child_mask_, child_sigpipe_);
    r.pid = p.pid;
    r.running = true;
    r.out = {p.out_fd, STDOUT_FILENO, {}, false, {}, {}};
    r.err = {p.err_fd, STDERR_FILENO, {}, true, {}, {}};
  }

  bool finished() {
    if (any_running()) return false;
    // Once no rank runs, what the ranks left in their process groups is stopped (on_deadlines),
    // and the attempt ends only when it is gone or SIGKILLed.
    if ((term_at_ || kill_at_) && any_group_alive()) return false;
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
  // between ranks (take_lines).
  void emit_lines(const rank_process& r, output_stream& s, bool eof) {
    const std::string out = take_lines(s, o_.prefix ? "[rank " + std::to_string(r.rank) + "] " : "", eof);
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
      print_hang_report("tuttirun received SIGUSR1", false);
      return;
    }
    if (sig == SIGINT && ++sigints_ >= 2) {
      note_signal(sig);
      say("second SIGINT: killing the ranks");
      signal_groups(SIGKILL);
      return;
    }
    say(std::string("received ") + signal_name(sig) + ", forwarding it to the ranks");
    note_signal(sig);
    if (!failure_ && !interrupted_ && !remote_failure_) interrupted_ = sig;
    term_at_.reset();  // the forwarded signal stops them instead of the SIGTERM after the failure grace
    signal_groups(sig);
    signal_groups(SIGCONT);
    arm_kill_timer();
  }

  void reap() {
    int wstatus = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &wstatus, WNOHANG | WUNTRACED | WCONTINUED)) > 0) {
      auto r = std::find_if(ranks_.begin(), ranks_.end(), [&](const rank_process& x) { return x.pid == pid; });
      if (r == ranks_.end()) continue;  // what a rank left behind, adopted (adopt_orphans)
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
        print_hang_report("rank " + std::to_string(r->rank) + " failed", true);  // before stopped ranks are killed
        first_failed_ = failed_.back();
        note_local_failure(rank_report(*r));
        fail(exit_code_of(wstatus));
      } else if ((o_.keep_going && !interrupted_) || (WIFSIGNALED(wstatus) && !sent_[WTERMSIG(wstatus)])) {
        // With --keep-going every failure is news; otherwise one by a signal tuttirun did not
        // send, after the first failure, is a cause too.
        say(who + describe_exit(wstatus));
      }
    }
    const bool ranks_run = any_running();
    // --keep-going: once the ranks that run on have exited, a stopped one would hold the job forever.
    const bool only_stopped_left =
        std::all_of(ranks_.begin(), ranks_.end(), [](const rank_process& x) { return !x.running || x.stopped_by; }) &&
        std::any_of(ranks_.begin(), ranks_.end(), [](const rank_process& x) { return !x.running; });
    if (o_.keep_going && ranks_run && only_stopped_left) {
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
    if (!ranks_run && !drain_until_) drain_until_ = steady_clock::now() + drain_after_exit;
    // Every round, so that a group is known to be empty before its id can be reused.
    for (rank_process& r : ranks_) group_alive(r);
  }

  // The first failure. Unless `wait_first` is false or --failure-grace=0, the other ranks get the
  // failure grace before SIGTERM: tutti ranks whose peer failed raise peer_lost within
  // milliseconds, and each should get to print why before it is stopped.
  void fail(int exit_code, bool wait_first = true) {
    failure_ = exit_code;
    wind_down(wait_first, "the other ranks");
  }

  // After a failure (this node's, or across nodes another's): the ranks still running (`who`)
  // get the failure grace, then SIGTERM. What the ranks left in their process groups gets SIGTERM
  // once no rank runs: the grace is for ranks to say why.
  void wind_down(bool wait_first, const std::string& who) {
    const bool ranks_run = any_running();
    // A rank stopped by a signal (SIGSTOP, SIGTSTP, ...) was not stopped by tuttirun: continued,
    // it would run on against peers that are gone, or hang again. It is killed, not resumed.
    for (rank_process& r : ranks_)
      if (r.running && r.stopped_by) kill_stopped(r);
    if (o_.keep_going) {  // nothing is stopped, as when every rank succeeds
      if (ranks_run) say("--keep-going: " + who + " run on");
      return;
    }
    if (ranks_run && wait_first && o_.failure_grace_s > 0) {
      say("waiting up to " + seconds_text(o_.failure_grace_s) + " s for " + who +
          " to exit on their own (--failure-grace)");
      term_at_ = steady_clock::now() + to_duration(o_.failure_grace_s);
      return;
    }
    stop_others("stopping " + who);
  }

  // SIGTERM to the ranks' process groups, SIGKILL after --grace. Says `why` while a rank runs;
  // once none does, names the groups with something left in them; does nothing if none has.
  void stop_others(const std::string& why) {
    if (any_running()) say(why);
    else if (any_group_alive()) say("stopping " + left_behind_text());
    else return;
    signal_groups(SIGTERM);
    signal_groups(SIGCONT);  // a rank that stops after this acts on SIGTERM only once continued
    arm_kill_timer();
  }

  // Every rank that failed, the cause first, then in the order they failed, with its exit status
  // and last line on stderr; the header gives the job's `status` (the cause's) where known. The
  // cause (pick_cause; across nodes node 0's pick) is named on a line of its own first where it
  // is not the rank that failed first here: it may have failed later, on another node, or
  // exited with status 0.
  void print_summary(const std::optional<failure_report>& cause, std::optional<int> status) const {
    const bool nodes = o_.nnodes > 1;
    auto is_cause = [&](const rank_process& r) {
      return cause && cause->rank >= 0 && cause->rank == r.rank && cause->node == o_.node_rank;
    };
    const bool cause_first = first_failed_ && is_cause(ranks_[*first_failed_]);
    std::string text;
    if (cause && !cause_first) text += "tuttirun: the cause: " + cause_text(*cause, nodes) + "\n";
    // Only victims here, of a rank of another node (without --max-restarts the nodes do not
    // compare notes): that rank is named, though its status is not known here.
    if (cause && cause->role == failure_role::victim && cause->victim_of >= 0 &&
        cause->victim_of / o_.nproc_per_node != o_.node_rank)
      text += "tuttirun: the cause: rank " + std::to_string(cause->victim_of) + " (node " +
              std::to_string(cause->victim_of / o_.nproc_per_node) + "), which the ranks here lost\n";
    if (failed_.empty()) {
      write_all(STDERR_FILENO, text);
      return;
    }
    text += "tuttirun: " + std::to_string(failed_.size()) + " of " + std::to_string(ranks_.size()) +
            (ranks_.size() == 1 ? " rank" : " ranks") + (nodes ? " on this node" : "") + " failed" +
            (first_failed_ ? ", rank " + std::to_string(ranks_[*first_failed_].rank) + " first" : "") +
            (failure_          ? " (exit status " + std::to_string(status.value_or(*failure_)) + ")"
             : remote_failure_ ? " after the failure on node " + std::to_string(remote_failure_->node)
                               : "") +
            ":\n";
    std::vector<std::size_t> order = failed_;
    std::stable_partition(order.begin(), order.end(), [&](std::size_t i) { return is_cause(ranks_[i]); });
    for (std::size_t i : order) {
      const rank_process& r = ranks_[i];
      const int wstatus = *r.exit_wstatus;
      text += "tuttirun:   rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") " +
              describe_exit(wstatus);
      if (WIFSIGNALED(wstatus) && sent_[WTERMSIG(wstatus)] && i != first_failed_) text += ", sent by tuttirun";
      if (is_cause(r) && !cause_first) text += " (the cause)";
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
    // The failure grace ends early once no rank runs: what the ranks left is stopped at once.
    if (term_at_ && (steady_clock::now() >= *term_at_ || !any_running())) {
      term_at_.reset();
      stop_others(failure_ || !remote_failure_ ? "failure grace over: stopping the other ranks"
                                               : "failure grace over: stopping this node's ranks");
    }
    if (kill_at_ && steady_clock::now() >= *kill_at_) {
      kill_at_.reset();
      killed_ = true;
      const bool ranks_run = any_running();
      if (ranks_run || any_group_alive()) {
        say("grace period over: killing " + (ranks_run ? std::string("the remaining ranks") : left_behind_text()));
        signal_groups(SIGKILL);
      }
    }
    // Every rank has exited, with status 0 too: the attempt is over, and so is what the ranks
    // left in their process groups (SIGTERM, SIGKILL after --grace), so that nothing of the job
    // outlives tuttirun to hold its GPU, its shared memory or its port, or to write to a pipe
    // that no one reads. A process meant to outlive the job leaves its rank's group (setsid)
    // before the rank exits. Nothing is sent if every group is empty, nor again once the groups
    // are being stopped; stop_others names the groups (no rank runs, so "" is never said).
    if (!any_running() && !term_at_ && !kill_at_ && !killed_) stop_others("");
  }

  bool any_running() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const rank_process& r) { return r.running; });
  }

  // Whether anything of rank r's process group is left: the rank, or what it started there and
  // left behind (a `sh -c 'cmd &'`, say, whose job ignores SIGINT and outlives the rank).
  bool group_alive(rank_process& r) {
    if (r.running) return true;
    if (r.pid <= 0 || r.group_gone) return false;
    if (::kill(-r.pid, 0) == 0) return true;
    r.group_gone = true;  // ESRCH; or EPERM: nothing in it that tuttirun could signal
    return false;
  }

  bool any_group_alive() {
    bool any = false;
    for (rank_process& r : ranks_) any = group_alive(r) || any;
    return any;
  }

  // "what is left in the process groups of ranks 0, 2": the groups whose ranks have exited.
  std::string left_behind_text() {
    std::string ranks;
    std::size_t n = 0;
    for (rank_process& r : ranks_)
      if (!r.running && group_alive(r)) ranks += (n++ ? ", " : "") + std::to_string(r.rank);
    return "what is left in the process " + std::string(n == 1 ? "group of rank " : "groups of ranks ") + ranks;
  }

  // --- the hang report (hang_report.hpp)

  // The directory where the ranks' tutti say where their flight tables lie (TUTTI_FLIGHT_MAP),
  // TMPDIR/tuttirun-flight.<host>.<pid>.XXXXXX, emptied for each attempt and removed when
  // tuttirun exits; those this host's tuttiruns left when they died (SIGKILL) are removed here.
  // Without one (no TMPDIR or /tmp), no report: the job runs as before.
  void make_flight_dir() {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = tmp && *tmp ? tmp : "/tmp";
    remove_stale_flight_dirs(base);
    std::string pattern = base + "/" + flight_dir_prefix() + std::to_string(::getpid()) + ".XXXXXX";
    if (::mkdtemp(pattern.data())) flight_dir_ = pattern;
  }
  // Empties directory `dir` (its own plain files: it is opened without following a link, and
  // files are removed relative to it) and, with `remove`, removes it.
  static void clear_dir(const std::string& dir, bool remove) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    if (DIR* d = ::fdopendir(fd)) {
      while (dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') ::unlinkat(::dirfd(d), e->d_name, 0);
      ::closedir(d);  // closes fd
    } else {
      ::close(fd);
    }
    if (remove) ::rmdir(dir.c_str());
  }
  // This host's flight directories whose tuttirun is gone: real directories (not links) of this
  // user.
  static void remove_stale_flight_dirs(const std::string& base) {
    DIR* d = ::opendir(base.c_str());
    if (!d) return;
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      struct stat st {};
      if (flight_dir_pid(name) > 0 && !flight_dir_owner_alive(name) &&
          ::lstat((base + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::getuid())
        stale.push_back(base + "/" + name);
    }
    ::closedir(d);
    for (const std::string& dir : stale) clear_dir(dir, true);
  }
  void remove_flight_dir() {
    if (flight_dir_.empty()) return;
    clear_dir(flight_dir_, true);
    flight_dir_.clear();
  }

  // What this node's ranks are doing, from their flight tables (live where the process is, as
  // saved where it failed and exited).
  std::vector<flight_process> local_records() const {
    std::vector<flight_process> procs;
    if (flight_dir_.empty()) return procs;
    const std::vector<flight_map_entry> maps = read_flight_maps(flight_dir_);
    for (const rank_process& r : ranks_) {
      flight_process p;
      p.job_rank = r.rank;
      p.pid = r.pid;
      p.status = r.stopped_by ? std::string("stopped by ") + signal_name(r.stopped_by)
                 : r.running  ? "running"
                 : r.exit_wstatus ? describe_exit(*r.exit_wstatus)
                                  : "not started";
      // The tutti process of the rank: the map written by a process with this job rank (the rank's
      // own pid, or a process it runs under a wrapper such as valgrind).
      const flight_map_entry* m = nullptr;
      for (const flight_map_entry& e : maps)
        if (e.job_rank == r.rank && (!m || e.pid == r.pid)) m = &e;
      if (m) read_records(p, *m, flight_dir_, r.running);
      else p.source = "no tutti communicator seen in it";
      procs.push_back(std::move(p));
    }
    return procs;
  }

  // The hang report, on stderr: the job's, gathered by node 0's tuttirun through the rendezvous
  // (every node's records, taken now), or this node's alone when there is no other node or node
  // 0's cannot be reached. `failure`: a rank of this attempt failed (else: SIGUSR1).
  void print_hang_report(const std::string& why, bool failure) {
    if (flight_dir_.empty()) return;
    const std::string on_node = o_.nnodes > 1 ? " on node " + std::to_string(o_.node_rank) : "";
    if (rdzv_ && rdzv_->want_report(why + on_node, failure, attempt_)) return;
    say_lines(titled_report("hang report (" + why + "): what each rank of node " + std::to_string(o_.node_rank) +
                                " was doing",
                            local_records(), tutti::detail::realtime_ns()));
  }

  // With a rendezvous, `tuttirun --dump` on this node asks node 0's tuttirun for the job's report:
  // DIR/rendezvous says where it is and the job's token (DIR is this user's alone, 0700).
  void write_rendezvous_note() const {
    if (flight_dir_.empty() || !rdzv_ || !o_.rdzv_port) return;
    const std::string path = flight_dir_ + "/rendezvous";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return;
    const auto* t = reinterpret_cast<const unsigned char*>(job_.token.data());
    write_all(fd, o_.master_addr + "\t" + std::to_string(*o_.rdzv_port) + "\t" + to_hex(t, job_.token.size()) + "\n");
    ::close(fd);
  }

  // SIGUSR1 goes to the running ranks' process groups, so that their own children get it too.
  void signal_ranks(int sig) {
    sent_[sig] = true;
    for (const rank_process& r : ranks_)
      if (r.running) ::kill(-r.pid, sig);
  }

  // Stopping: every rank's process group that is not empty, its rank exited or not, so that what
  // a rank started and left behind is stopped with it.
  void signal_groups(int sig) {
    sent_[sig] = true;
    for (rank_process& r : ranks_)
      if (group_alive(r)) ::kill(-r.pid, sig);
  }

  options o_;
  job_identity job_;    // the job's identity (attempt 0's)
  job_identity ident_;  // the current attempt's (attempt_identity)
  int sigfd_;
  sigset_t child_mask_;
  struct sigaction child_sigpipe_;
  std::unique_ptr<rendezvous> rdzv_;  // with --nnodes > 1 (restarts with --max-restarts, reports)
  long long attempt_ = 0;             // TUTTI_RESTART_COUNT of the ranks running
  std::vector<rank_process> ranks_;
  std::optional<int> failure_;  // exit status decided by the first failing rank
  int interrupted_ = 0;         // first signal forwarded before any failure
  int signalled_ = 0;           // first signal forwarded, failure or not: no more restarts
  int sigints_ = 0;
  std::optional<failure_report> local_failure_;   // this attempt's first failure on this node
  std::optional<failure_report> remote_failure_;  // another node's, when it came first
  std::optional<failure_report> signal_report_;   // across nodes, the signal that ends the job
  bool aborted_ = false;                          // the rendezvous ended the job
  bool killed_ = false;
  bool sent_[65] = {};  // signals tuttirun has sent to the ranks
  std::vector<std::size_t> failed_;          // indices into ranks_ of the ranks that failed, in order
  std::optional<std::size_t> first_failed_;  // the one whose failure decided failure_, if a rank's did
  // SIGTERM to the ranks after the first failure (--failure-grace), SIGKILL after SIGTERM (--grace),
  // the end of the wait for output once every rank has exited.
  std::optional<steady_clock::time_point> term_at_, kill_at_, drain_until_;
  std::string flight_dir_;  // TUTTI_FLIGHT_MAP of the ranks (hang_report.hpp); empty: none
};

}  // namespace tuttirun
