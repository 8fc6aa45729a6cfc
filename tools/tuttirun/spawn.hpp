// tuttirun: starting a rank (whether its program can run, the fork into a process group of its
// own, the exec), tuttirun as the parent of what ranks leave behind, and the signals tuttirun
// routes to its poll loop.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "common.hpp"

namespace tuttirun {

// Whether execvpe() could run `file`, checked before any rank starts: 0 if so, else the errno it
// would fail with (ENOENT: nowhere to be found; EACCES: found, but no executable file). A name
// without '/' is looked for in `path` (PATH, or execvpe's default when null) as execvpe does:
// an empty entry is the current directory, and a match that is not executable is passed over
// for a later one. The exec itself may still fail (a missing ELF interpreter, say): the rank
// then exits with 127 or 126 (exec_child).
inline int program_error(std::string_view file, const char* path) {
  auto exec_error = [](const std::string& candidate) {
    struct stat st {};
    if (::stat(candidate.c_str(), &st) != 0) return errno;
    if (!S_ISREG(st.st_mode)) return EACCES;  // as execve() for a directory
    return ::faccessat(AT_FDCWD, candidate.c_str(), X_OK, AT_EACCESS) == 0 ? 0 : errno;
  };
  if (file.empty()) return ENOENT;
  if (file.find('/') != std::string_view::npos) return exec_error(std::string(file));
  std::string_view dirs = path ? path : "/bin:/usr/bin";
  bool found_not_executable = false;
  for (std::size_t begin = 0;;) {
    const std::size_t colon = dirs.find(':', begin);
    const std::string_view dir = dirs.substr(begin, colon == std::string_view::npos ? colon : colon - begin);
    const int err = exec_error(dir.empty() ? std::string(file) : std::string(dir) + "/" + std::string(file));
    if (err == 0) return 0;
    if (err == EACCES) found_not_executable = true;
    else if (err != ENOENT && err != ENOTDIR && err != ESTALE && err != ENODEV && err != ETIMEDOUT) return err;
    if (colon == std::string_view::npos) break;
    begin = colon + 1;
  }
  return found_not_executable ? EACCES : ENOENT;
}

// A rank's exit status when its program cannot be run, as a shell's: 127 not found, else 126.
inline int exit_code_of_exec_error(int err) { return err == ENOENT ? 127 : 126; }

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

[[noreturn]] inline void exec_child(const child_setup& s) {
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
  ::_exit(exit_code_of_exec_error(err));
}

struct pipe_ends {
  int read = -1, write = -1;
};

inline pipe_ends make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw launcher_error(errno_text("pipe"));
  return {fds[0], fds[1]};
}

// A rank just started: its pid, which is also its process group's id, and the read ends of the
// pipes that are its stdout and stderr.
struct spawned_process {
  pid_t pid;
  int out_fd, err_fd;
};

// Forks and runs `argv` (searched in PATH) with `envp`, as the leader of a process group of its
// own, with `mask` and `sigpipe` restored and stdin from `stdin_fd` (-1: tuttirun's). Throws
// launcher_error when a pipe or the fork fails; a failed exec is the child's exit status.
inline spawned_process spawn(char* const* argv, char* const* envp, int stdin_fd, const sigset_t& mask,
                             const struct sigaction& sigpipe) {
  pipe_ends out = make_pipe();
  pipe_ends err;
  try {
    err = make_pipe();
  } catch (...) {
    ::close(out.read), ::close(out.write);
    throw;
  }
  child_setup setup{::getpid(), stdin_fd, out.write, err.write, mask, sigpipe, argv, envp};
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
  return {pid, out.read, err.read};
}

// Makes tuttirun the parent of what the ranks leave behind: a process whose parent exits (a
// rank's `cmd &` once the rank's shell is gone) is reparented to tuttirun rather than to init, so
// that tuttirun reaps it as soon as it exits (reap() in launcher.hpp), and a rank's process group
// is seen empty at once rather than when init gets round to its zombies. Not inherited by the
// ranks. Where the kernel refuses (before Linux 3.4), init reaps them, later.
inline void adopt_orphans() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

// Routes the signals tuttirun handles to a signalfd, so that the poll loop sees them. Returns the
// signal mask and SIGPIPE disposition the ranks should start with.
inline int setup_signals(sigset_t& child_mask, struct sigaction& child_sigpipe) {
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

}  // namespace tuttirun
