// Schedule arithmetic on its own (no transport, no threads): block partitions, pieces, the ring
// reduce-scatter / all-gather block walk simulated symbolically, the binomial tree, the
// recursive-doubling fold; plus the TUTTI_ALGO override parser and the automatic rule.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <ostream>  // doctest stringifies std::error_code with it
#include <string>
#include <string_view>
#include <vector>

#include <tutti/algorithm/automatic.hpp>
#include <tutti/algorithm/schedule.hpp>
#include <tutti/core/error.hpp>

TEST_SUITE_BEGIN("unit");

namespace sch = tutti::schedule;
using tutti::collective;
using tutti::algo::automatic;
using choice = automatic::choice;

namespace {

constexpr collective all_collectives[] = {
    collective::broadcast,  collective::reduce,     collective::all_reduce,
    collective::gather,     collective::all_gather, collective::scatter,
    collective::all_to_all, collective::reduce_scatter, collective::barrier};

std::size_t idx(collective c) { return static_cast<std::size_t>(c); }

}  // namespace

// ---- mod, block, blocks ---------------------------------------------------------------------

TEST_CASE("schedule::mod is always in 0..p-1") {
  static_assert(sch::mod(-1, 5) == 4 && sch::mod(5, 5) == 0 && sch::mod(-10, 5) == 0 && sch::mod(7, 5) == 2);
  for (int p = 1; p <= 13; ++p)
    for (int a = -3 * p - 2; a <= 3 * p + 2; ++a) {
      const int m = sch::mod(a, p);
      REQUIRE(m >= 0);
      REQUIRE(m < p);
      REQUIRE((a - m) % p == 0);
    }
}

TEST_CASE("block partitions 0..count-1 exactly with sizes differing by at most one and the longer blocks first") {
  static_assert(sch::block(10, 3, 0) == sch::range{0, 4});
  static_assert(sch::block(10, 3, 1) == sch::range{4, 7});
  static_assert(sch::block(10, 3, 2) == sch::range{7, 10});
  for (int parts = 1; parts <= 12; ++parts)
    for (std::size_t count = 0; count <= 60; ++count) {
      CAPTURE(parts);
      CAPTURE(count);
      std::size_t expect_begin = 0, smallest = count + 1, largest = 0;
      for (int i = 0; i < parts; ++i) {
        const auto b = sch::block(count, parts, i);
        REQUIRE(b.begin == expect_begin);  // contiguous, no gap, no overlap
        REQUIRE(b.end >= b.begin);
        expect_begin = b.end;
        smallest = std::min(smallest, b.size());
        largest = std::max(largest, b.size());
        // The first count % parts blocks are the long ones.
        const std::size_t want = count / static_cast<std::size_t>(parts) +
                                 (static_cast<std::size_t>(i) < count % static_cast<std::size_t>(parts) ? 1 : 0);
        REQUIRE(b.size() == want);
      }
      REQUIRE(expect_begin == count);  // covers everything
      REQUIRE(largest - smallest <= 1);
    }
  // Large counts (no overflow in the arithmetic).
  const std::size_t big = (std::size_t{1} << 40) + 7;
  CHECK(sch::block(big, 12, 11).end == big);
  CHECK(sch::block(big, 12, 0).size() == big / 12 + 1);
}

TEST_CASE("blocks from first to last is the union of blocks first..last-1") {
  for (int parts = 1; parts <= 9; ++parts)
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{101}})
      for (int first = 0; first < parts; ++first)
        for (int last = first + 1; last <= parts; ++last) {
          const auto r = sch::blocks(count, parts, first, last);
          std::size_t total = 0;
          for (int i = first; i < last; ++i) total += sch::block(count, parts, i).size();
          REQUIRE(r.begin == sch::block(count, parts, first).begin);
          REQUIRE(r.end == sch::block(count, parts, last - 1).end);
          REQUIRE(r.size() == total);
        }
  static_assert(sch::blocks(10, 3, 0, 3) == sch::range{0, 10});
}

TEST_CASE("pieces / piece_of cut a range into pieces of at most `piece` elements") {
  static_assert(sch::pieces(0, 4) == 1, "an empty block still sends one (empty) message");
  static_assert(sch::pieces(1, 4) == 1 && sch::pieces(4, 4) == 1 && sch::pieces(5, 4) == 2);
  static_assert(sch::pieces(3, 0) == 3, "a piece size of 0 is treated as 1");
  for (std::size_t begin : {std::size_t{0}, std::size_t{5}})
    for (std::size_t n = 0; n <= 40; ++n)
      for (std::size_t piece = 0; piece <= 11; ++piece) {
        const sch::range r{begin, begin + n};
        const std::size_t k = sch::pieces(n, piece);
        const std::size_t eff = piece == 0 ? 1 : piece;
        CAPTURE(n);
        CAPTURE(piece);
        REQUIRE(k >= 1);
        REQUIRE(k == (n == 0 ? 1 : (n + eff - 1) / eff));
        std::size_t at = r.begin;
        for (std::size_t i = 0; i < k; ++i) {
          const auto pc = sch::piece_of(r, piece, i);
          REQUIRE(pc.begin == at);
          REQUIRE(pc.size() <= eff);
          if (n != 0) REQUIRE(pc.size() >= 1);  // no empty piece unless the range is empty
          at = pc.end;
        }
        REQUIRE(at == r.end);
        // Pieces past the end are empty and clamped to the range.
        const auto past = sch::piece_of(r, piece, k + 2);
        REQUIRE(past.size() == 0);
        REQUIRE(past.begin == r.end);
      }
}

// ---- ring -------------------------------------------------------------------------------------

TEST_CASE("ring reduce-scatter simulated: rank r ends with block r holding every rank's contribution once") {
  for (int p = 1; p <= 12; ++p) {
    CAPTURE(p);
    // acc[r][b][c]: how many times rank c's contribution to block b is folded into rank r's copy.
    std::vector<std::vector<std::vector<int>>> acc(
        static_cast<std::size_t>(p), std::vector<std::vector<int>>(static_cast<std::size_t>(p),
                                                                    std::vector<int>(static_cast<std::size_t>(p), 0)));
    for (int r = 0; r < p; ++r)
      for (int b = 0; b < p; ++b) acc[static_cast<std::size_t>(r)][static_cast<std::size_t>(b)][static_cast<std::size_t>(r)] = 1;
    for (int s = 0; s + 1 < p; ++s) {
      // Every rank sends at once: snapshot what goes out before anything is folded in.
      std::vector<std::vector<int>> sent(static_cast<std::size_t>(p));
      for (int r = 0; r < p; ++r) {
        const int sb = sch::ring_rs_send_block(r, p, s);
        REQUIRE(sb >= 0);
        REQUIRE(sb < p);
        sent[static_cast<std::size_t>(r)] = acc[static_cast<std::size_t>(r)][static_cast<std::size_t>(sb)];
      }
      for (int r = 0; r < p; ++r) {
        const int prev = sch::mod(r - 1, p);
        const int rb = sch::ring_rs_recv_block(r, p, s);
        // What r expects is what prev sends.
        REQUIRE(rb == sch::ring_rs_send_block(prev, p, s));
        // Step s sends what step s-1 received (ring.hpp's reduce_scatter relies on this).
        if (s > 0) REQUIRE(sch::ring_rs_send_block(r, p, s) == sch::ring_rs_recv_block(r, p, s - 1));
        auto& mine = acc[static_cast<std::size_t>(r)][static_cast<std::size_t>(rb)];
        for (int c = 0; c < p; ++c) mine[static_cast<std::size_t>(c)] += sent[static_cast<std::size_t>(prev)][static_cast<std::size_t>(c)];
      }
    }
    for (int r = 0; r < p; ++r) {
      // The last step lands block r (ring.hpp's reduce_scatter writes the last step into out).
      if (p > 1) CHECK(sch::ring_rs_recv_block(r, p, p - 2) == r);
      const auto& own = acc[static_cast<std::size_t>(r)][static_cast<std::size_t>(r)];
      for (int c = 0; c < p; ++c) {
        CAPTURE(r);
        CAPTURE(c);
        CHECK(own[static_cast<std::size_t>(c)] == 1);
      }
    }
  }
}

TEST_CASE("ring all-gather simulated: every rank sends only complete blocks and ends with all of them") {
  for (int p = 1; p <= 12; ++p) {
    CAPTURE(p);
    // have[r][b]: how many times rank r has received/owned block b.
    std::vector<std::vector<int>> have(static_cast<std::size_t>(p), std::vector<int>(static_cast<std::size_t>(p), 0));
    for (int r = 0; r < p; ++r) have[static_cast<std::size_t>(r)][static_cast<std::size_t>(r)] = 1;
    for (int s = 0; s + 1 < p; ++s) {
      std::vector<int> sent(static_cast<std::size_t>(p));
      for (int r = 0; r < p; ++r) {
        const int sb = sch::ring_ag_send_block(r, p, s);
        REQUIRE(have[static_cast<std::size_t>(r)][static_cast<std::size_t>(sb)] == 1);  // it has it
        sent[static_cast<std::size_t>(r)] = sb;
      }
      for (int r = 0; r < p; ++r) {
        const int prev = sch::mod(r - 1, p);
        const int rb = sch::ring_ag_recv_block(r, p, s);
        REQUIRE(rb == sent[static_cast<std::size_t>(prev)]);
        ++have[static_cast<std::size_t>(r)][static_cast<std::size_t>(rb)];
      }
    }
    for (int r = 0; r < p; ++r)
      for (int b = 0; b < p; ++b) {
        CAPTURE(r);
        CAPTURE(b);
        CHECK(have[static_cast<std::size_t>(r)][static_cast<std::size_t>(b)] == 1);  // once, never twice
      }
    // The all-gather after the reduce-scatter starts with the block the reduce-scatter completed.
    for (int r = 0; r < p; ++r) CHECK(sch::ring_ag_send_block(r, p, 0) == r);
  }
}

// ---- binomial tree --------------------------------------------------------------------------

TEST_CASE("binomial tree: parents are smaller and subtrees are exactly the descendants and partition 0..p-1") {
  static_assert(sch::binomial_parent(0) == -1);
  static_assert(sch::binomial_parent(6) == 4 && sch::binomial_parent(5) == 4 && sch::binomial_parent(4) == 0);
  static_assert(sch::binomial_lowbit(0, 5) == 8 && sch::binomial_lowbit(12, 16) == 4);
  for (int p = 1; p <= 33; ++p) {
    CAPTURE(p);
    CHECK(sch::binomial_subtree(0, p) == p);
    auto is_ancestor_or_self = [](int a, int x) {
      for (; x > a; x = sch::binomial_parent(x)) {
      }
      return x == a;
    };
    for (int vr = 0; vr < p; ++vr) {
      CAPTURE(vr);
      const int low = sch::binomial_lowbit(vr, p);
      const int sub = sch::binomial_subtree(vr, p);
      REQUIRE(low > 0);
      REQUIRE((low & (low - 1)) == 0);  // a power of two
      REQUIRE(sub >= 1);
      REQUIRE(vr + sub <= p);
      if (vr != 0) {
        const int parent = sch::binomial_parent(vr);
        REQUIRE(parent >= 0);
        REQUIRE(parent < vr);
        REQUIRE(parent == vr - low);  // what tree.hpp uses as the parent
        // vr lies in its parent's subtree range.
        REQUIRE(vr < parent + sch::binomial_subtree(parent, p));
      }
      // [vr, vr + sub) is exactly the set of vr's descendants (and vr).
      for (int x = 0; x < p; ++x) REQUIRE(is_ancestor_or_self(vr, x) == (x >= vr && x < vr + sub));
      // {vr} and the children's subtrees (children vr + mask, mask < low, as tree.hpp walks them)
      // partition [vr, vr + sub).
      std::vector<int> covered(static_cast<std::size_t>(p), 0);
      covered[static_cast<std::size_t>(vr)] = 1;
      for (int mask = 1; mask < low && vr + mask < p; mask <<= 1) {
        const int child = vr + mask;
        REQUIRE(sch::binomial_parent(child) == vr);
        for (int x = child; x < child + sch::binomial_subtree(child, p); ++x) ++covered[static_cast<std::size_t>(x)];
      }
      for (int x = 0; x < p; ++x) REQUIRE(covered[static_cast<std::size_t>(x)] == (x >= vr && x < vr + sub ? 1 : 0));
    }
  }
}

// ---- recursive doubling fold ------------------------------------------------------------------

TEST_CASE("fold_newrank / fold_oldrank are inverses covering 0..pow2_floor(p)-1") {
  static_assert(sch::pow2_floor(1) == 1 && sch::pow2_floor(6) == 4 && sch::pow2_floor(8) == 8 && sch::pow2_floor(9) == 8);
  for (int p = 1; p <= 40; ++p) {
    CAPTURE(p);
    const int p2 = sch::pow2_floor(p);
    REQUIRE(p2 <= p);
    REQUIRE(2 * p2 > p);
    REQUIRE((p2 & (p2 - 1)) == 0);
    const int extra = p - p2;
    std::vector<int> hit(static_cast<std::size_t>(p2), 0);
    int sitting_out = 0;
    for (int r = 0; r < p; ++r) {
      CAPTURE(r);
      const int nr = sch::fold_newrank(r, p);
      if (nr < 0) {
        REQUIRE(nr == -1);
        ++sitting_out;
        REQUIRE(r % 2 == 0);
        REQUIRE(r < 2 * extra);
        REQUIRE(sch::fold_newrank(r + 1, p) >= 0);  // the partner it hands its data to takes part
      } else {
        REQUIRE(nr < p2);
        ++hit[static_cast<std::size_t>(nr)];
        REQUIRE(sch::fold_oldrank(nr, p) == r);
      }
    }
    CHECK(sitting_out == extra);
    for (int nr = 0; nr < p2; ++nr) {
      CHECK(hit[static_cast<std::size_t>(nr)] == 1);
      CHECK(sch::fold_newrank(sch::fold_oldrank(nr, p), p) == nr);
    }
  }
}

// ---- TUTTI_ALGO overrides ---------------------------------------------------------------------

TEST_CASE("override_table::parse: empty text overrides nothing") {
  for (std::string_view text : {"", "   ", "\t"}) {
    const auto t = automatic::override_table::parse(text);
    for (auto c : all_collectives) CHECK_FALSE(t.per_collective[idx(c)].has_value());
  }
}

TEST_CASE("override_table::parse: one name applies to every collective the algorithm has") {
  for (auto a : {choice::ring, choice::tree, choice::recursive_doubling, choice::direct, choice::shared_memory,
                 choice::native}) {
    const std::string name(automatic::choice_name(a));
    CAPTURE(name);
    for (const std::string& text : {name, "  " + name + " "}) {
      const auto t = automatic::override_table::parse(text);
      for (auto c : all_collectives) {
        const std::string_view coll = tutti::collective_name(c);
        CAPTURE(coll);
        if (automatic::supports(a, c)) {
          REQUIRE(t.per_collective[idx(c)].has_value());
          CHECK(*t.per_collective[idx(c)] == a);
        } else {
          CHECK_FALSE(t.per_collective[idx(c)].has_value());
        }
      }
    }
  }
  // Sanity of the support table itself.
  CHECK(automatic::supports(choice::direct, collective::all_to_all));
  CHECK_FALSE(automatic::supports(choice::ring, collective::all_to_all));
  CHECK_FALSE(automatic::supports(choice::tree, collective::all_to_all));
  CHECK_FALSE(automatic::supports(choice::recursive_doubling, collective::gather));
  CHECK(automatic::supports(choice::recursive_doubling, collective::all_reduce));
  CHECK(automatic::supports(choice::tree, collective::scatter));
  for (auto c : all_collectives) CHECK(automatic::supports(choice::shared_memory, c));
  for (auto c : all_collectives) CHECK(automatic::supports(choice::native, c));
  for (auto a : {choice::ring, choice::tree, choice::recursive_doubling, choice::direct}) {
    CHECK(automatic::supports(a, collective::all_reduce));
    CHECK(automatic::supports(a, collective::barrier));
  }
}

TEST_CASE("override_table::parse: a list of collective-algorithm pairs") {
  const auto t = automatic::override_table::parse(" all_reduce = ring , broadcast=tree,all_to_all=direct");
  CHECK(t.per_collective[idx(collective::all_reduce)] == choice::ring);
  CHECK(t.per_collective[idx(collective::broadcast)] == choice::tree);
  CHECK(t.per_collective[idx(collective::all_to_all)] == choice::direct);
  for (auto c : {collective::reduce, collective::gather, collective::all_gather, collective::scatter,
                 collective::reduce_scatter, collective::barrier})
    CHECK_FALSE(t.per_collective[idx(c)].has_value());

  const auto one = automatic::override_table::parse("barrier=recursive_doubling");
  CHECK(one.per_collective[idx(collective::barrier)] == choice::recursive_doubling);
  CHECK_FALSE(one.per_collective[idx(collective::all_reduce)].has_value());
}

namespace {
/// parse(text) raises config_error whose message contains every needle.
void expect_config_error(std::string_view text, std::initializer_list<std::string_view> needles) {
  CAPTURE(text);
  bool thrown = false;
  try {
    (void)automatic::override_table::parse(text);
  } catch (const tutti::config_error& e) {
    thrown = true;
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(e.code() == tutti::errc::config);
    CHECK(what.find("TUTTI_ALGO") != std::string::npos);
    for (auto n : needles) {
      CAPTURE(n);
      CHECK(what.find(n) != std::string::npos);
    }
  }
  CHECK_MESSAGE(thrown, "expected tutti::config_error for TUTTI_ALGO='" << std::string(text) << "'");
}
}  // namespace

TEST_CASE("override_table::parse rejects malformed values with config_error") {
  expect_config_error("rign", {"rign"});                                   // unknown algorithm
  expect_config_error("automatic", {"automatic"});                         // not a concrete one
  expect_config_error("all_reduce=bogus", {"bogus"});                      // unknown algorithm in a list
  expect_config_error("allreduce=ring", {"allreduce"});                    // unknown collective
  expect_config_error("send/recv=direct", {"send/recv"});                  // not overridable
  expect_config_error("all_to_all=ring", {"ring", "all_to_all"});          // no such schedule
  expect_config_error("gather=recursive_doubling", {"recursive_doubling", "gather"});
  expect_config_error("all_reduce=ring,all_reduce=tree", {"all_reduce", "twice"});  // duplicate
  expect_config_error("all_reduce=ring,tree", {"tree"});                   // missing '=' in a list
  expect_config_error("all_reduce=ring,,broadcast=tree", {});              // empty item in a list
  expect_config_error("=ring", {});                                        // empty collective
  expect_config_error("all_reduce=", {});                                  // empty algorithm
}

// ---- the automatic rule ---------------------------------------------------------------------

TEST_CASE("automatic::choose follows the documented rule") {
  const automatic a{};
  constexpr std::size_t KiB = 1024;
  // all_to_all, reduce_scatter, barrier: fixed.
  for (int p : {2, 3, 8, 9})
    for (std::size_t bytes : {std::size_t{0}, 4 * KiB, 1024 * KiB}) {
      CHECK(a.choose(collective::all_to_all, bytes, p) == choice::direct);
      CHECK(a.choose(collective::reduce_scatter, bytes, p) == choice::ring);
      CHECK(a.choose(collective::barrier, bytes, p) == choice::recursive_doubling);
    }
  // all_reduce: small -> recursive doubling; large -> rd on powers of two, ring otherwise.
  CHECK(a.choose(collective::all_reduce, 1 * KiB, 3) == choice::recursive_doubling);
  CHECK(a.choose(collective::all_reduce, 16 * KiB - 1, 3) == choice::recursive_doubling);
  CHECK(a.choose(collective::all_reduce, 16 * KiB, 3) == choice::ring);
  CHECK(a.choose(collective::all_reduce, 1024 * KiB, 6) == choice::ring);
  CHECK(a.choose(collective::all_reduce, 1024 * KiB, 8) == choice::recursive_doubling);
  // broadcast / reduce: tree unless large on more than two ranks.
  CHECK(a.choose(collective::broadcast, 1 * KiB, 9) == choice::tree);
  CHECK(a.choose(collective::broadcast, 1024 * KiB, 2) == choice::tree);
  CHECK(a.choose(collective::broadcast, 1024 * KiB, 3) == choice::ring);
  CHECK(a.choose(collective::reduce, 256 * KiB, 4) == choice::ring);
  CHECK(a.choose(collective::reduce, 256 * KiB - 1, 4) == choice::tree);
  // gather / scatter by total bytes.
  CHECK(a.choose(collective::gather, 1 * KiB, 4) == choice::tree);
  CHECK(a.choose(collective::gather, 16 * KiB, 4) == choice::direct);
  CHECK(a.choose(collective::scatter, 16 * KiB - 1, 4) == choice::tree);
  CHECK(a.choose(collective::scatter, 64 * KiB, 1) == choice::direct);
  // all_gather by total bytes.
  CHECK(a.choose(collective::all_gather, 1 * KiB, 4) == choice::recursive_doubling);
  CHECK(a.choose(collective::all_gather, 32 * KiB, 4) == choice::ring);
}

TEST_CASE("automatic::choose only picks algorithms that have the collective and honours overrides") {
  const automatic a{};
  for (auto c : all_collectives)
    for (int p = 1; p <= 17; ++p)
      for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{16384},
                                std::size_t{65536}, std::size_t{262144}, std::size_t{1} << 24}) {
        const auto ch = a.choose(c, bytes, p);
        const std::string_view coll = tutti::collective_name(c);
        CAPTURE(coll);
        CAPTURE(p);
        CAPTURE(bytes);
        REQUIRE(automatic::supports(ch, c));
      }
  const auto t = automatic::override_table::parse("all_reduce=direct,broadcast=ring");
  for (bool windows : {false, true}) {
    CAPTURE(windows);
    CHECK(a.choose(collective::all_reduce, 10, 4, t, windows) == choice::direct);
    CHECK(a.choose(collective::broadcast, 10, 4, t, windows) == choice::ring);
  }
  // Not overridden: the rule, or shared_memory on a transport with windows.
  CHECK(a.choose(collective::gather, 10, 4, t, false) == a.choose(collective::gather, 10, 4));
  CHECK(a.choose(collective::gather, 10, 4, t, true) == choice::shared_memory);
  const automatic::override_table none{};
  for (auto c : all_collectives) {
    CHECK(a.choose(c, 1 << 20, 6, none, true) == choice::shared_memory);
    CHECK(a.choose(c, 1 << 20, 6, none, false) == a.choose(c, 1 << 20, 6));
  }
  // The 3-argument rule never picks shared_memory (it needs a transport with windows).
  for (auto c : all_collectives)
    for (int p = 1; p <= 9; ++p) CHECK(a.choose(c, 100, p) != choice::shared_memory);
  // The thresholds are knobs.
  automatic b{};
  b.small_all_reduce_bytes = 0;
  CHECK(b.choose(collective::all_reduce, 1, 3) == choice::ring);
  // visit hands out the concrete object.
  CHECK(a.visit(choice::ring, [](const auto& x) { return std::string(x.name); }) == "ring");
  CHECK(a.visit(choice::direct, [](const auto& x) { return std::string(x.name); }) == "direct");
  CHECK(automatic::choice_name(choice::recursive_doubling) == "recursive_doubling");
  CHECK(automatic::choice_name(choice::shared_memory) == "shared_memory");
  // Every choice name parses back to its choice.
  for (auto c : {choice::ring, choice::tree, choice::recursive_doubling, choice::direct, choice::shared_memory}) {
    const auto table = automatic::override_table::parse("barrier=" + std::string(automatic::choice_name(c)));
    CHECK(table.per_collective[idx(collective::barrier)] == c);
  }
}

TEST_SUITE_END();
