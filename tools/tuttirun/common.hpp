// tuttirun: what every part of the launcher uses: exit statuses, its two kinds of error, writing
// to a descriptor, signal names, exit statuses in words, durations.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tuttirun {

using std::chrono::steady_clock;

inline constexpr int exit_launcher_error = 1;
inline constexpr int exit_usage = 2;
// How long to wait for output still held by a rank's descendants once every rank has exited.
inline constexpr auto drain_after_exit = std::chrono::seconds(1);

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct launcher_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Writes everything, also to a non-blocking or slow descriptor. False (errno set) on an error.
inline bool write_all(int fd, std::string_view s) {
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

inline void say(std::string_view msg) { write_all(STDERR_FILENO, "tuttirun: " + std::string(msg) + "\n"); }

inline std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

inline const char* signal_name(int sig) {
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

inline int exit_code_of(int wstatus) {
  return WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : WEXITSTATUS(wstatus);
}

inline std::string describe_exit(int wstatus) {
  if (!WIFSIGNALED(wstatus)) return "exited with status " + std::to_string(WEXITSTATUS(wstatus));
  int sig = WTERMSIG(wstatus);
  return "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")" +
         (WCOREDUMP(wstatus) ? " (core dumped)" : "");
}

inline steady_clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<steady_clock::duration>(std::chrono::duration<double>(seconds));
}

// 3 -> "3", 0.25 -> "0.25": the shortest text that reads back as `seconds`.
inline std::string seconds_text(double seconds) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, seconds);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(seconds);
}

// Reads the signals waiting on tuttirun's signalfd; returns the first that ends tuttirun's wait
// (SIGINT, SIGTERM, SIGHUP), or 0. Used while no rank runs: SIGCHLD and SIGUSR1 are dropped.
inline int take_signal(int sigfd) {
  int first = 0;
  signalfd_siginfo si;
  while (::read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    const int sig = static_cast<int>(si.ssi_signo);
    if (!first && (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)) first = sig;
  }
  return first;
}

inline int poll_ms_until(steady_clock::time_point t) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - steady_clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
}

}  // namespace tuttirun
