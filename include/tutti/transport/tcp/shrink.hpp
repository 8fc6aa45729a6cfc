/// \file
/// How the survivors of a tcp job agree on who carries on (`communicator::shrink`), and start
/// a new job among themselves. The old connections are no use for it (every rank that failed
/// closed them); each rank's acceptor still listens, and a process that is gone refuses a
/// connection at once. So:
///
/// 1. **The coordinator is the lowest rank alive that calls shrink.** Each survivor tries the
///    ranks in order, from 0, with a fresh connection and a *probe* (a group hello of this
///    world, context `probe_context`): a refused connection, or one closed before an answer,
///    is a rank gone; one silent until `timeout` (a stopped rank) counts as gone too. A rank
///    that reaches itself is the coordinator.
/// 2. **The coordinator collects** the probes of the others, answering each at once "hold" (the
///    prober then waits for the decision rather than for a silent rank); for each higher rank not yet heard
///    it opens a *watch* connection (context `watch_context`): refused or closed, the rank is
///    gone. When every rank is heard or gone, or `timeout` after it took the role, it decides:
///    the members (old order), the store of the new job (it serves one on a fresh port), and the
///    new job id. Each member gets the decision on its probe; each rank still silent gets "out"
///    on its watch, which waits in its acceptor's queue: if it calls shrink later it reads it and
///    raises "left out" instead of forming a job of its own.
/// 3. A rank that is probed while it follows another answers "ask rank c", its coordinator.
/// 4. The members make the new job's connections as at start-up (`connect_all`), ranked in
///    their old order, with the same token and options.
///
/// Everything is bounded: a probe that is not answered waits at most `timeout`, the search for a
/// coordinator at most twice that, a held prober `timeout` past the coordinator's own deadline;
/// then `timeout_error`.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/bootstrap/store.hpp"
#include "tutti/core/error.hpp"
#include "tutti/transport/tcp/sockets.hpp"
#include "tutti/transport/tcp/startup.hpp"
#include "tutti/transport/tcp/wire.hpp"

namespace tutti::detail::tcp_impl {

inline constexpr std::uint64_t probe_context = 0x5348524b50000000ull;  // "SHRKP...": | generation
inline constexpr std::uint64_t watch_context = 0x5348524b57000000ull;  // "SHRKW...": | generation
inline constexpr std::uint32_t decision_magic = 0x44524b53u;           // "SKRD"

/// The coordinator's answer: in (with the new job), out, or ask another rank.
struct decision {
  enum class verdict : std::uint8_t { in = 0, out = 1, ask = 2, hold = 3 };
  verdict v = verdict::out;
  int ask = -1;              // ask: the rank to ask instead
  std::vector<int> members;  // in: old world ranks, ascending
  std::string store_host;    // in: the new job's store
  std::uint16_t store_port = 0;
  std::string job_id;        // in: the new job's id
};

/// magic u32, verdict u8, ask i32, members (u32 count + i32 each), host, port u16, job id.
TUTTI_DECL std::string decision_text(const decision& d);

/// Parses a decision at the front of `in`: empty while incomplete; `malformed` otherwise.
TUTTI_DECL std::optional<decision> parse_decision(std::string_view in, int world);

/// One agreement among the survivors of world `w` (see the file comment).
class shrink_agreement {
 public:
  using clock = std::chrono::steady_clock;

  shrink_agreement(connections& w, std::chrono::milliseconds timeout)
      : w_(w), me_(w.world_rank), P_(w.world_size), timeout_(timeout), start_(clock::now()),
        overall_(start_ + 2 * timeout) {
    generation_ = ++w.shrinks;
  }

  /// The new job's connections; `kept` gets the members' old ranks.
  std::shared_ptr<connections> run(std::vector<int>* kept);

 private:
  struct held {
    int from = -1;
    std::unique_ptr<link> l;
    std::string in;      // bytes read past the hello (a watch's verdict)
    bool told = false;   // a probe answered "hold"
  };

  std::string where() const { return "tcp shrink: rank " + std::to_string(me_); }

  [[noreturn]] void left_out(const std::string& why) const {
    throw error(errc::aborted, where() + " was left out of the new job: " + why);
  }

  std::uint64_t probe_ctx() const { return probe_context | generation_; }
  std::uint64_t watch_ctx() const { return watch_context | generation_; }

  /// One attempt to connect to `rank`: null if refused or unreachable by `until` (gone).
  std::unique_ptr<link> reach(int rank, std::uint64_t context, clock::time_point until);

  /// Reads what has arrived on `l` into `in`: false once the peer closed or reset it.
  static bool pull(link& l, std::string& in);

  void answer(held& p, const decision& d);

  /// Serves what waits on this rank's acceptor (`hello_queue`, without blocking): probes (kept,
  /// for the coordinator or to be redirected), watches (kept; an "out" on one ends this rank's
  /// part). Other connections of this job (a group's, being made) are left for their group,
  /// strangers are refused.
  void serve();

  /// Waits on the fds of `extra`, the acceptor, the connections waiting on it and the watches,
  /// up to `until` (at most 50 ms).
  void idle(std::vector<pollfd> fds, clock::time_point until);

  /// Asks rank `c` to coordinate: its decision, or empty when it is gone or silent.
  std::optional<decision> probe(int c);

  /// This rank coordinates: collects the others, decides, tells them (see the file comment).
  decision coordinate(std::shared_ptr<store_server>& server);

  connections& w_;
  const int me_, P_;
  const std::chrono::milliseconds timeout_;
  const clock::time_point start_, overall_;
  std::uint64_t generation_ = 0;
  std::vector<held> probes_, watches_;  // connections others made to this rank
};

}  // namespace tutti::detail::tcp_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/tcp/shrink.ipp"
#endif
