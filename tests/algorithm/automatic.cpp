// automatic's TUTTI_ALGO grammar (ranges), its precedence (TUTTI_ALGO > tuned table > rule),
// comm.explain and the per-call choice that TUTTI_DEBUG=info logs.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <tutti/tutti.hpp>

#include "../support/probes.hpp"

namespace {

using tutti::collective;
using tutti::config_error;
using tutti::algo::automatic;
constexpr std::size_t K = 1024, M = 1024 * 1024;
std::size_t idx(collective c) { return static_cast<std::size_t>(c); }
bool has(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

/// Transports for the plans (declarations only: never made): plain, with windows, and with a
/// tuning kind of the table.
using plain = tutti::detail::probe_transport;
using tutti::test::window_probe;
struct shm_kind : window_probe {
  static constexpr std::string_view tuning_kind = "shm";
  shm_kind sub(std::span<const int>, std::uint64_t) const;
};
struct tcp_kind : plain {
  static constexpr std::string_view tuning_kind = "tcp";
  tcp_kind sub(std::span<const int>, std::uint64_t) const;
};
struct inproc_kind : plain {
  static constexpr std::string_view tuning_kind = "inproc";
  inproc_kind sub(std::span<const int>, std::uint64_t) const;
};

/// The algorithm `text` picks for (c, bytes) on p ranks of transport T.
template <class T = plain>
std::string_view pick(const std::string& text, collective c, std::size_t bytes, int p = 4, std::string* why = nullptr) {
  return automatic::names[automatic{}.choose(automatic::make_plan<T>(text, p), c, bytes, why)];
}
/// The algorithm automatic runs without TUTTI_ALGO and table: the rule.
std::string_view rule(collective c, std::size_t bytes, int p = 4) { return pick("", c, bytes, p); }

/// Calls f(T{}) with the probe transport of tuning kind `k`.
template <class F>
void with_kind(std::string_view k, F&& f) {
  if (k == "shm") f(shm_kind{});
  else if (k == "tcp") f(tcp_kind{});
  else if (k == "inproc") f(inproc_kind{});
  else FAIL("tuned table row of unknown kind " << std::string(k));
}

}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("TUTTI_ALGO ranges: every operator, with K/M/G suffixes, picks per size") {
  const std::string t = "all_reduce=ring@>1M,recursive_doubling@<=1M";
  CHECK(pick(t, collective::all_reduce, 0) == "recursive_doubling");
  CHECK(pick(t, collective::all_reduce, M) == "recursive_doubling");
  CHECK(pick(t, collective::all_reduce, M + 1) == "ring");
  CHECK(pick(t, collective::all_reduce, 64 * M) == "ring");

  const std::string u = "broadcast=tree@<64K, ring@64K..1G ,direct@>=2G";
  CHECK(pick(u, collective::broadcast, 64 * K - 1) == "tree");
  CHECK(pick(u, collective::broadcast, 64 * K) == "ring");
  CHECK(pick(u, collective::broadcast, std::size_t{1} << 30) == "ring");
  CHECK(pick(u, collective::broadcast, (std::size_t{2} << 30)) == "direct");
  // Between 1G and 2G no range applies: the rule (p 4, >= 256 KiB: ring)
  std::string why;
  CHECK(pick(u, collective::broadcast, (std::size_t{1} << 30) + 1, 4, &why) == rule(collective::broadcast, (std::size_t{1} << 30) + 1));
  CHECK(has(why, "rule:"));
  // other collectives are untouched
  CHECK(pick(u, collective::all_reduce, 100) == rule(collective::all_reduce, 100));

  const auto table = automatic::override_table::parse("all_gather=direct@4096..8191,ring@8K..16K");
  REQUIRE(table.per_size[idx(collective::all_gather)].size() == 2);
  CHECK(table.per_size[idx(collective::all_gather)][0].range.lo == 4096);
  CHECK(table.per_size[idx(collective::all_gather)][0].range.hi == 8191);
  CHECK(table.per_size[idx(collective::all_gather)][1].range.lo == 8 * K);
  CHECK(table.per_size[idx(collective::all_gather)][1].range.hi == 16 * K);
  // the v-collectives whose sizes every rank knows take ranges too (by their largest block)
  CHECK(pick("all_gather_v=ring@>=1K,direct@<1K", collective::all_gather_v, 2 * K) == "ring");
  CHECK(pick("all_gather_v=ring@>=1K,direct@<1K", collective::all_gather_v, 10) == "direct");
}

TEST_CASE("TUTTI_ALGO: a bare name is the default, collective items and ranges win over it") {
  const std::string t = "tree, all_reduce=ring@>=1M";
  CHECK(pick(t, collective::all_reduce, M) == "ring");
  CHECK(pick(t, collective::all_reduce, M - 1) == "tree");  // uncovered: the bare name
  CHECK(pick(t, collective::broadcast, 5) == "tree");
  // all_to_all has no tree schedule: the bare name leaves it to the rule
  CHECK(pick(t, collective::all_to_all, 5) == rule(collective::all_to_all, 5));
  const auto u = automatic::override_table::parse("direct, broadcast=ring");
  CHECK(automatic::names[*u.per_collective[idx(collective::broadcast)]] == "ring");
  CHECK(automatic::names[*u.per_collective[idx(collective::gather)]] == "direct");
  std::string why;
  (void)pick("all_reduce=ring@<=4K", collective::all_reduce, 4 * K, 4, &why);
  CHECK(why == "TUTTI_ALGO all_reduce=ring@<=4K");
  (void)pick("broadcast=ring", collective::broadcast, 1, 4, &why);
  CHECK(why == "TUTTI_ALGO broadcast=ring");
  (void)pick("tree", collective::broadcast, 1, 4, &why);
  CHECK(why == "TUTTI_ALGO tree");
}

TEST_CASE("TUTTI_ALGO: malformed values raise config_error quoting the bad part") {
  struct bad {
    const char* text;
    const char* says;
  };
  const bad cases[] = {
      {"all_reduce=ring@>1X", "'1X'"},
      {"all_reduce=ring@>1MB", "'1MB'"},
      {"all_reduce=ring@>", "expected digits"},
      {"all_reduce=ring@=1M", "is not a size range"},
      {"all_reduce=ring@1M", "is not a size range"},
      {"all_reduce=ring@4K..1K", "is empty"},
      {"all_reduce=ring@<0", "no size is < 0"},
      {"all_reduce=ring@>1M,tree@>=1M", "overlaps 'all_reduce=ring@>1M'"},
      {"all_reduce=ring@<=1M,recursive_doubling@1K..2K", "overlaps"},
      {"all_reduce=ring@>1M,all_reduce=tree@<1K", "named twice"},
      {"all_reduce=ring,tree@<1K", "already has an algorithm for every size"},
      {"all_reduce=ring@>1M,tree", "must come first"},
      {"ring@>1M", "needs a collective"},
      {"all_reduce=rign@>1M", "unknown algorithm 'rign'"},
      {"allreduce=ring", "unknown collective 'allreduce'"},
      {"all_to_all=tree@<1K", "tree has no all_to_all schedule"},
      {"all_reduce=ring@>1M,,tree@<1K", "empty item"},
      {"all_reduce=ring@>1M,", "empty item"},
      {"ring,tree", "only one bare algorithm name"},
      {"all_reduce=automatic@<1K", "'automatic' is the default"},
      {"all_reduce=ring@>99999999999999999999", "too large"},
      {"all_reduce=ring@>99999999999G", "too large"},
      {"scatter_v=direct@<1K", "takes no size range"},
  };
  for (const auto& b : cases) {
    CAPTURE(b.text);
    try {
      (void)automatic::override_table::parse(b.text);
      FAIL_CHECK("no config_error");
    } catch (const config_error& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(has(what, std::string("TUTTI_ALGO=") + b.text));
      CHECK(has(what, b.says));
    }
  }
}

TEST_CASE("automatic precedence: TUTTI_ALGO > tuned table > windows > rule") {
  // Every tuned row is honoured for its kind, group size and bytes (unless TUTTI_ALGO says otherwise).
  for (const auto& r : tutti::algo::tuned::rows) {
    if (r.p_lo > r.p_hi || r.p_lo < 2) continue;
    const std::size_t bytes = static_cast<std::size_t>(r.lo);
    const std::string coll(tutti::collective_name(r.coll));
    CAPTURE(coll);
    CAPTURE(bytes);
    CAPTURE(r.p_lo);
    with_kind(r.kind, [&](auto k) {
      using T = decltype(k);
      std::string why;
      CHECK(pick<T>("", r.coll, bytes, r.p_lo, &why) == r.algorithm);
      CHECK(has(why, "tuned table for " + std::string(r.kind)));
      // and a TUTTI_ALGO item for the collective beats the row: another candidate that runs it here
      std::string_view other;
      for (std::size_t i = 0; i < automatic::candidate_count && other.empty(); ++i)
        if (automatic::names[i] != r.algorithm && automatic::support<T>[i][idx(r.coll)] && !automatic::explicit_only[i])
          other = automatic::names[i];
      if (other.empty()) other = r.algorithm;  // the only candidate here: TUTTI_ALGO still decides
      const bool sized = tutti::info(r.coll).size != tutti::size_basis::none && tutti::info(r.coll).size != tutti::size_basis::unknown;
      const std::string over = coll + "=" + std::string(other) + (sized ? "@>=0" : "");
      CHECK(pick<T>(over, r.coll, bytes, r.p_lo, &why) == other);
      CHECK(has(why, "TUTTI_ALGO "));
    });
  }
  // No table for a kind-less transport: windows, then the rule.
  std::string why;
  CHECK(pick<window_probe>("", collective::all_reduce, 100, 4, &why) == "shared_memory");
  CHECK(has(why, "shared windows"));
  CHECK(pick("", collective::all_reduce, 100, 3, &why) == "recursive_doubling");
  CHECK(why == "rule: bytes < 16K -> recursive_doubling");
  CHECK(pick("", collective::all_reduce, 64 * K, 3, &why) == "ring");
  CHECK(why == "rule: bytes >= 16K, 3 ranks not a power of two -> ring");
  // TUTTI_ALGO beats the table for every kind
  for (int p : {2, 3, 4, 5}) {
    CHECK(pick<shm_kind>("all_reduce=direct@<=1M", collective::all_reduce, 1000, p, &why) == "direct");
    CHECK(why == "TUTTI_ALGO all_reduce=direct@<=1M");
    CHECK(pick<tcp_kind>("all_reduce=direct@<=1M", collective::all_reduce, 1000, p, &why) == "direct");
    CHECK(pick<inproc_kind>("all_reduce=direct@<=1M", collective::all_reduce, 1000, p, &why) == "direct");
  }
  // A row naming an algorithm that is not a candidate is skipped.
  using no_tree = tutti::algo::automatic_of<tutti::algo::ring, tutti::algo::direct, tutti::algo::shared_memory>;
  for (const auto& r : tutti::algo::tuned::rows)
    if (r.kind == "shm" && r.algorithm == "tree" && r.p_lo == 2) {
      const auto pl = no_tree::make_plan<shm_kind>("", 2);
      const std::size_t i = no_tree{}.choose(pl, r.coll, static_cast<std::size_t>(r.lo), &why);
      CHECK(no_tree::names[i] != "tree");
      CHECK(!has(why, "tuned table"));
      break;
    }
}

TEST_SUITE_END();

TEST_SUITE_BEGIN("multirank");

namespace {
/// Runs `body(comm)` on n threads over inproc with this config; stderr goes to a file, whose
/// text is returned (TUTTI_DEBUG=info's lines).
template <class Body>
std::string run_logged(int n, tutti::config cfg, Body body) {
  char path[] = "/tmp/tutti_automatic_log_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  auto world = std::make_shared<tutti::inproc::world>(n);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        tutti::communicator<tutti::inproc> comm(tutti::inproc(world, r), automatic{}, cfg);
        body(comm);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  ::unlink(path);
  for (int r = 0; r < n; ++r) CHECK_MESSAGE(errors[static_cast<std::size_t>(r)].empty(), "rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
  return ss.str();
}
}  // namespace

TEST_CASE("a ranged TUTTI_ALGO picks the algorithm per call size, as explain() and TUTTI_DEBUG=info say") {
  for (int n : {3, 4, 5}) {
    CAPTURE(n);
    tutti::config cfg;
    cfg.algo_override = "all_reduce=direct@<=1K,ring@>=4K";
    cfg.debug = tutti::log_level::info;
    std::vector<std::vector<std::string>> explained(static_cast<std::size_t>(n));
    std::vector<int> wrong(static_cast<std::size_t>(n), 0);
    const std::size_t counts[] = {256, 512, 2048};  // floats: 1 KiB, 2 KiB (no range), 8 KiB
    const std::string log = run_logged(n, cfg, [&](auto& comm) {
      for (std::size_t count : counts) {
        explained[static_cast<std::size_t>(comm.rank())].push_back(comm.explain(collective::all_reduce, count * 4));
        std::vector<float> v(count);
        for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>((comm.rank() + 1) * (i % 7));
        comm.all_reduce(tutti::view<float>(v.data(), v.size()));
        const float sum = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
        for (std::size_t i = 0; i < count; ++i) wrong[static_cast<std::size_t>(comm.rank())] += v[i] != sum * static_cast<float>(i % 7);
      }
    });
    CAPTURE(log);
    const std::string ns = " on " + std::to_string(n) + " ranks: ";
    const std::string rule_2k(rule(collective::all_reduce, 2048, n));
    const std::string want[] = {"all_reduce of 1024 bytes" + ns + "direct (TUTTI_ALGO all_reduce=direct@<=1K)",
                                "all_reduce of 2048 bytes" + ns + rule_2k + " (rule: ",
                                "all_reduce of 8192 bytes" + ns + "ring (TUTTI_ALGO all_reduce=ring@>=4K)"};
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(wrong[static_cast<std::size_t>(r)] == 0);
      REQUIRE(explained[static_cast<std::size_t>(r)].size() == 3);
      for (int i = 0; i < 3; ++i) {
        CHECK(has(explained[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)], want[i]));
        // the line the call itself logged: the algorithm run() chose, not just what explain says
        CHECK(has(log, "[tutti rank " + std::to_string(r) + "] " + want[i]));
      }
    }
  }
}

TEST_CASE("automatic's remembered choice: every call runs what explain() says as collective and size change") {
  // Without TUTTI_DEBUG=info the communicator's automatic reuses its last answer while the
  // collective and the size repeat (`communicator::choice`): a change of either chooses again.
  const std::pair<collective, std::size_t> calls[] = {  // floats: 1 KiB, 8 KiB
      {collective::all_reduce, 256},  {collective::all_reduce, 256}, {collective::all_reduce, 2048},
      {collective::all_reduce, 2048}, {collective::broadcast, 256},  {collective::all_reduce, 256},
      {collective::broadcast, 2048},  {collective::broadcast, 256},  {collective::all_reduce, 2048}};
  for (int n : {3, 4}) {
    CAPTURE(n);
    tutti::config cfg;
    cfg.algo_override = "all_reduce=direct@<=1K,ring@>=4K, broadcast=ring@<=1K";
    std::vector<std::vector<std::string>> ran(static_cast<std::size_t>(n)), said(static_cast<std::size_t>(n));
    (void)run_logged(n, cfg, [&](auto& comm) {
      const auto me = static_cast<std::size_t>(comm.rank());
      comm.on_end([&, me](const tutti::op_event& e) { ran[me].push_back(std::string(e.algorithm)); });
      for (const auto& [c, count] : calls) {
        said[me].push_back(comm.explain(c, count * 4));
        std::vector<float> v(count, 1.0f);
        if (c == collective::all_reduce) comm.all_reduce(tutti::view<float>(v.data(), v.size()));
        else comm.broadcast(tutti::view<float>(v.data(), v.size()), 0);
      }
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      const auto& got = ran[static_cast<std::size_t>(r)];
      REQUIRE(got.size() == std::size(calls));
      for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CAPTURE(said[static_cast<std::size_t>(r)][i]);
        CHECK(has(said[static_cast<std::size_t>(r)][i], ": " + got[i] + " ("));
      }
      CHECK(got[0] == "direct");
      CHECK(got[2] == "ring");
      CHECK(got[4] == "ring");
      CHECK(got[5] == "direct");
    }
  }
}

TEST_CASE("explain() on a transport with a tuned table names the table or the rule, never TUTTI_ALGO") {
  tutti::config cfg;
  std::vector<std::string> lines;
  std::mutex m;
  (void)run_logged(3, cfg, [&](auto& comm) {
    const auto s = comm.explain(collective::broadcast, 300 * K);
    std::lock_guard g(m);
    lines.push_back(s);
  });
  REQUIRE(lines.size() == 3);
  for (const auto& s : lines) {
    CAPTURE(s);
    CHECK(has(s, "broadcast of 307200 bytes on 3 ranks: "));
    CHECK((has(s, "(tuned table for inproc, ") || has(s, "(rule: ")));
    CHECK(s == lines[0]);
  }
}

TEST_SUITE_END();
