/// \file
/// What a rank raised in a conformance case, and the two ways of running a case on every rank
/// of a fresh communicator: as threads of this process (`thread_runner`, for transports whose
/// ranks a launcher starts as threads, as `inproc::run` does) and as the processes of a job
/// (`process_runner`: every rank calls the suite; a control communicator that no case breaks
/// gathers what each rank saw).
#pragma once

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/view.hpp"
#include "tutti/testing/report.hpp"

namespace tutti::testing {

/// What a rank raised, by type.
enum class kind : char { none, mismatch, peer_lost, timeout, usage, config, aborted, other_tutti, other };

inline std::string kind_name(kind k) {
  switch (k) {
    case kind::none: return "nothing";
    case kind::mismatch: return "mismatch_error";
    case kind::peer_lost: return "peer_lost";
    case kind::timeout: return "timeout_error";
    case kind::usage: return "usage_error";
    case kind::config: return "config_error";
    case kind::aborted: return "tutti::error(aborted)";
    case kind::other_tutti: return "tutti::error(other)";
    case kind::other: return "a non-tutti exception";
  }
  return "?";
}

/// Classifies an exception; `what` gets its message.
inline kind classify(std::exception_ptr e, std::string& what) {
  try {
    std::rethrow_exception(e);
  } catch (const timeout_error& x) {
    what = x.what();
    return kind::timeout;
  } catch (const peer_lost& x) {
    what = x.what();
    return kind::peer_lost;
  } catch (const mismatch_error& x) {
    what = x.what();
    return kind::mismatch;
  } catch (const usage_error& x) {
    what = x.what();
    return kind::usage;
  } catch (const config_error& x) {
    what = x.what();
    return kind::config;
  } catch (const tutti::error& x) {
    what = x.what();
    return x.code() == errc::aborted ? kind::aborted : kind::other_tutti;
  } catch (const std::exception& x) {
    what = x.what();
    return kind::other;
  } catch (...) {
    what = "(not a std::exception)";
    return kind::other;
  }
}

/// The numbers N of every "rank N" in a message.
inline std::set<int> ranks_named(const std::string& s) {
  std::set<int> out;
  for (auto pos = s.find("rank "); pos != std::string::npos; pos = s.find("rank ", pos + 1)) {
    std::size_t i = pos + 5;
    int v = 0;
    bool digits = false;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      v = v * 10 + (s[i] - '0');
      digits = true;
      ++i;
    }
    if (digits) out.insert(v);
  }
  return out;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// What one rank raised in one case.
struct outcome {
  kind k = kind::none;
  std::string what;
  int phase = 0;           ///< where: 1 the call under test, 2 and 3 the barriers after it
  kind next = kind::none;       ///< what the next collective on the (then broken) communicator raised
  kind next_send = kind::none;  ///< what a send after it raised
  bool next_repeats = true;     ///< whether the next collective's message repeats the original one
  double seconds = 0;           ///< how long the call under test took
};

/// Runs `call(comm)` then two barriers on this rank and records what it raised; after a
/// failure, one more barrier and a send, which must be refused at once (errc::aborted, quoting
/// the original failure) without communication. Two barriers: over buffered transports a rank whose part of the call went
/// through can also finish the first barrier, when its peers find the disagreement only after
/// they posted their part of it; the second barrier then raises peer_lost.
template <class Comm, class Call>
outcome attempt(Comm& comm, Call& call, bool barriers = true) {
  outcome o;
  int phase = 1;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    call(comm);
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (barriers) {
      phase = 2;
      comm.barrier();
      phase = 3;
      comm.barrier();
    }
  } catch (...) {
    if (phase == 1) o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    o.k = classify(std::current_exception(), o.what);
    o.phase = phase;
    if (comm.size() > 1) {
      std::string next;
      try {
        comm.barrier();
      } catch (...) {
        o.next = classify(std::current_exception(), next);
      }
      o.next_repeats = o.k == kind::aborted || contains(next, o.what);
      try {
        int x = 0;
        comm.send(view(&x, 1), (comm.rank() + 1) % comm.size());
      } catch (...) {
        std::string ignored;
        o.next_send = classify(std::current_exception(), ignored);
      }
    }
  }
  return o;
}

/// Runs `f` on a helper thread and rethrows what it threw. If it has not ended within `limit`
/// it is a hang: `on_hang()` says so, and the process ends (blocked threads cannot be joined).
template <class F, class OnHang>
void watched(std::chrono::seconds limit, F&& f, OnHang&& on_hang) {
  std::exception_ptr err;
  std::promise<void> done;
  auto finished = done.get_future();
  std::thread t([&] {
    try {
      f();
    } catch (...) {
      err = std::current_exception();
    }
    done.set_value();
  });
  if (finished.wait_for(limit) != std::future_status::ready) {
    on_hang();
    std::fflush(nullptr);
    std::_Exit(3);
  }
  t.join();
  if (err) std::rethrow_exception(err);
}

/// A case that has not ended within `limit` is a hang: the suite says so on stderr and ends the
/// process: a transport that hangs fails the suite loudly.
template <class F>
void within(std::chrono::seconds limit, const std::string& what, F&& f) {
  watched(limit, std::forward<F>(f), [&] {
    std::fprintf(stderr, "tutti::testing: HANG: %s was still blocked after %lld s; ending the process\n", what.c_str(),
                 static_cast<long long>(limit.count()));
  });
}

/// Runs each case as `n` threads: `launch(n, body)` runs `body(comm)` on n threads, each with a
/// communicator of a fresh group of n ranks over `Transport` (`inproc::run`, or
/// `inproc::run_wrapped` for a transport built on it), and returns when all have; what it throws
/// is ignored (each rank's outcome is recorded by the case). `deadline` is the timeout the cases
/// that expect a failure give their communicators.
template <class Transport, class Launch>
class thread_runner {
 public:
  using transport_type = Transport;
  thread_runner(int n, Launch launch, std::chrono::milliseconds deadline = std::chrono::seconds(5),
                std::chrono::seconds limit = std::chrono::seconds(300))
      : n_(n), launch_(std::move(launch)), deadline_(deadline), limit_(limit) {}
  int size() const { return n_; }
  bool judges() const { return true; }
  std::chrono::milliseconds deadline() const { return deadline_; }

  /// Runs `body(comm)` (returning an outcome) on every rank of a fresh group.
  template <class Body>
  std::vector<outcome> run(Body& body, const std::string& label) {
    std::vector<outcome> out(static_cast<std::size_t>(n_));
    within(limit_, label + " on " + std::to_string(n_) + " threads", [&] {
      try {
        launch_(n_, [&](auto& comm) { out[static_cast<std::size_t>(comm.rank())] = body(comm); });
      } catch (...) {
      }
    });
    return out;
  }

  /// Runs `f(comm, report)` on every rank of a fresh group, each with a report of its own, and
  /// merges them into `into`.
  template <class F>
  void each(F& f, report& into, const std::string& label) {
    std::vector<report> reports(static_cast<std::size_t>(n_));
    within(limit_, label + " on " + std::to_string(n_) + " threads", [&] {
      try {
        launch_(n_, [&](auto& comm) {
          auto& mine = reports[static_cast<std::size_t>(comm.rank())];
          try {
            f(comm, mine);
          } catch (const std::exception& e) {
            mine.fail(label, comm.rank(), std::string("threw: ") + e.what());
            throw;
          }
        });
      } catch (...) {
      }
    });
    for (auto& r : reports) into.merge(r);
  }

 private:
  int n_;
  Launch launch_;
  std::chrono::milliseconds deadline_;
  std::chrono::seconds limit_;
};

template <class Transport, class Launch>
thread_runner<Transport, Launch> make_thread_runner(int n, Launch launch,
                                                    std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
  return thread_runner<Transport, Launch>(n, std::move(launch), deadline);
}

/// Runs each case on every process of a job: every rank calls the suite; `make()` (called by
/// every rank together) gives a fresh communicator of the job's ranks for each case, and
/// `control`, which no case breaks, gathers what every rank saw (rank 0 judges).
template <class Comm, class Make>
class process_runner {
 public:
  using transport_type = typename Comm::transport_type;
  process_runner(Comm& control, Make make, std::chrono::milliseconds deadline = std::chrono::seconds(5))
      : control_(control), make_(std::move(make)), deadline_(deadline) {}
  int size() const { return control_.size(); }
  bool judges() const { return control_.rank() == 0; }
  std::chrono::milliseconds deadline() const { return deadline_; }

  template <class Body>
  std::vector<outcome> run(Body& body, const std::string&) {
    outcome mine;
    {
      auto comm = make_();
      mine = body(comm);
    }
    // One fixed-size record per rank: kind, phase, next, next_send, next_repeats, seconds, then
    // the message (cut).
    constexpr std::size_t rec = 2048, head = 5;
    std::vector<char> me(rec, '\0'), all(rec * static_cast<std::size_t>(size()));
    me[0] = static_cast<char>(mine.k);
    me[1] = static_cast<char>(mine.phase);
    me[2] = static_cast<char>(mine.next);
    me[3] = static_cast<char>(mine.next_send);
    me[4] = static_cast<char>(mine.next_repeats);
    std::memcpy(me.data() + head, &mine.seconds, sizeof mine.seconds);
    std::memcpy(me.data() + head + sizeof mine.seconds, mine.what.data(),
                std::min(mine.what.size(), rec - 1 - head - sizeof mine.seconds));
    control_.all_gather(view<const char>(me.data(), me.size()), view(all.data(), all.size()));
    std::vector<outcome> out(static_cast<std::size_t>(size()));
    for (std::size_t r = 0; r < out.size(); ++r) {
      const char* p = all.data() + r * rec;
      out[r].k = static_cast<kind>(p[0]);
      out[r].phase = p[1];
      out[r].next = static_cast<kind>(p[2]);
      out[r].next_send = static_cast<kind>(p[3]);
      out[r].next_repeats = p[4] != 0;
      std::memcpy(&out[r].seconds, p + head, sizeof out[r].seconds);
      out[r].what = std::string(p + head + sizeof out[r].seconds);
    }
    return out;
  }

  /// Runs `f(comm, report)` on every rank with a fresh communicator; rank 0's `into` gets every
  /// rank's findings.
  template <class F>
  void each(F& f, report& into, const std::string& label) {
    report mine;
    try {
      auto comm = make_();
      f(comm, mine);
    } catch (const std::exception& e) {
      mine.fail(label, control_.rank(), std::string("threw: ") + e.what());
    }
    const std::string text = mine.serialize();
    const auto counts = control_.all_gather_counts(text.size());
    std::size_t total = 0;
    for (auto c : counts) total += c;
    std::vector<char> all(total);
    control_.all_gather_v(view<const char>(text.data(), text.size()), view(all.data(), all.size()), counts);
    if (!judges()) return;
    std::size_t at = 0;
    for (auto c : counts) {
      into.merge_serialized(std::string(all.data() + at, c));
      at += c;
    }
  }

 private:
  Comm& control_;
  Make make_;
  std::chrono::milliseconds deadline_;
};

template <class Comm, class Make>
process_runner<Comm, Make> make_process_runner(Comm& control, Make make,
                                               std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
  return process_runner<Comm, Make>(control, std::move(make), deadline);
}

}  // namespace tutti::testing
