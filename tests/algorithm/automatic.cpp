// automatic's TUTTI_ALGO grammar (ranges), its precedence (TUTTI_ALGO > tuned table > rule),
// comm.explain and the per-call choice that TUTTI_DEBUG=info logs.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <tutti/tutti.hpp>

namespace {

using tutti::collective;
using tutti::config_error;
using tutti::algo::automatic;
using choice = automatic::choice;
constexpr std::size_t K = 1024, M = 1024 * 1024;
std::size_t idx(collective c) { return static_cast<std::size_t>(c); }
bool has(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

/// The algorithm `text` picks for (c, bytes) on p ranks without windows or table.
choice pick(const std::string& text, collective c, std::size_t bytes, int p = 4, std::string* why = nullptr) {
  return automatic{}.choose(c, bytes, p, automatic::override_table::parse(text), false, std::nullopt, why);
}

}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("TUTTI_ALGO ranges: every operator, with K/M/G suffixes, picks per size") {
  const std::string t = "all_reduce=ring@>1M,recursive_doubling@<=1M";
  CHECK(pick(t, collective::all_reduce, 0) == choice::recursive_doubling);
  CHECK(pick(t, collective::all_reduce, M) == choice::recursive_doubling);
  CHECK(pick(t, collective::all_reduce, M + 1) == choice::ring);
  CHECK(pick(t, collective::all_reduce, 64 * M) == choice::ring);

  const std::string u = "broadcast=tree@<64K, ring@64K..1G ,direct@>=2G";
  CHECK(pick(u, collective::broadcast, 64 * K - 1) == choice::tree);
  CHECK(pick(u, collective::broadcast, 64 * K) == choice::ring);
  CHECK(pick(u, collective::broadcast, std::size_t{1} << 30) == choice::ring);
  CHECK(pick(u, collective::broadcast, (std::size_t{2} << 30)) == choice::direct);
  // Between 1G and 2G no range applies: the rule (p 4, >= 256 KiB: ring)
  std::string why;
  CHECK(pick(u, collective::broadcast, (std::size_t{1} << 30) + 1, 4, &why) == automatic{}.choose(collective::broadcast, (std::size_t{1} << 30) + 1, 4));
  CHECK(has(why, "rule:"));
  // other collectives are untouched
  CHECK(pick(u, collective::all_reduce, 100) == automatic{}.choose(collective::all_reduce, 100, 4));

  const auto table = automatic::override_table::parse("all_gather=direct@4096..8191,ring@8K..16K");
  REQUIRE(table.per_size[idx(collective::all_gather)].size() == 2);
  CHECK(table.per_size[idx(collective::all_gather)][0].range.lo == 4096);
  CHECK(table.per_size[idx(collective::all_gather)][0].range.hi == 8191);
  CHECK(table.per_size[idx(collective::all_gather)][1].range.lo == 8 * K);
  CHECK(table.per_size[idx(collective::all_gather)][1].range.hi == 16 * K);
}

TEST_CASE("TUTTI_ALGO: a bare name is the default, collective items and ranges win over it") {
  const std::string t = "tree, all_reduce=ring@>=1M";
  CHECK(pick(t, collective::all_reduce, M) == choice::ring);
  CHECK(pick(t, collective::all_reduce, M - 1) == choice::tree);  // uncovered: the bare name
  CHECK(pick(t, collective::broadcast, 5) == choice::tree);
  // all_to_all has no tree schedule: the bare name leaves it to the rule
  CHECK(pick(t, collective::all_to_all, 5) == automatic{}.choose(collective::all_to_all, 5, 4));
  const auto u = automatic::override_table::parse("direct, broadcast=ring");
  CHECK(u.per_collective[idx(collective::broadcast)] == choice::ring);
  CHECK(u.per_collective[idx(collective::gather)] == choice::direct);
  std::string why;
  (void)pick("all_reduce=ring@<=4K", collective::all_reduce, 4 * K, 4, &why);
  CHECK(why == "TUTTI_ALGO all_reduce=ring@<=4K");
  (void)pick("broadcast=ring", collective::broadcast, 1, 4, &why);
  CHECK(why == "TUTTI_ALGO broadcast=ring");
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
  const automatic a;
  const automatic::override_table none{};
  // Every tuned row is honoured for its kind, group size and bytes (unless TUTTI_ALGO says otherwise).
  for (const auto& r : tutti::algo::tuned::rows) {
    if (r.p_lo > r.p_hi || r.p_lo < 2) continue;
    const std::size_t bytes = static_cast<std::size_t>(r.lo);
    const auto found = automatic::tuned_row(r.k, r.coll, bytes, r.p_lo);
    REQUIRE(found != nullptr);
    const bool windows = r.k == tutti::algo::tuned::kind::shm;
    std::string why;
    CHECK(a.choose(r.coll, bytes, r.p_lo, none, windows, r.k, &why) == static_cast<choice>(found->a));
    CHECK(has(why, "tuned table for"));
    // and a TUTTI_ALGO range covering the size beats the row
    const auto other = found->a == tutti::algo::tuned::alg::shared_memory ? choice::direct : choice::shared_memory;
    const auto over = automatic::override_table::parse(std::string(tutti::collective_name(r.coll)) + "=" +
                                                       std::string(automatic::choice_name(other)) + "@>=0");
    CHECK(a.choose(r.coll, bytes, r.p_lo, over, windows, r.k, &why) == other);
    CHECK(has(why, "TUTTI_ALGO "));
  }
  // No table for a kind-less transport: windows, then the rule.
  std::string why;
  CHECK(a.choose(collective::all_reduce, 100, 4, none, true, std::nullopt, &why) == choice::shared_memory);
  CHECK(has(why, "shared windows"));
  CHECK(a.choose(collective::all_reduce, 100, 3, none, false, std::nullopt, &why) == choice::recursive_doubling);
  CHECK(why == "rule: bytes < 16K -> recursive_doubling");
  CHECK(a.choose(collective::all_reduce, 64 * K, 3, none, false, std::nullopt, &why) == choice::ring);
  CHECK(why == "rule: bytes >= 16K, 3 ranks not a power of two -> ring");
  // TUTTI_ALGO beats the table for every kind
  const auto over = automatic::override_table::parse("all_reduce=direct@<=1M");
  for (auto k : {tutti::algo::tuned::kind::shm, tutti::algo::tuned::kind::tcp, tutti::algo::tuned::kind::threads})
    for (int p : {2, 3, 4, 5}) {
      CHECK(a.choose(collective::all_reduce, 1000, p, over, true, k, &why) == choice::direct);
      CHECK(why == "TUTTI_ALGO all_reduce=direct@<=1M");
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
    const automatic a;
    const std::string rule_2k(automatic::choice_name(a.choose(collective::all_reduce, 2048, n)));
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
    CHECK((has(s, "(tuned table for threads, ") || has(s, "(rule: ")));
    CHECK(s == lines[0]);
  }
}

TEST_SUITE_END();
