// Schedule arithmetic on its own (no transport, no threads): block partitions, pieces, the ring
// reduce-scatter / all-gather block walk simulated symbolically, the binomial tree, the
// recursive-doubling fold; plus the TUTTI_ALGO override parser and the automatic rule.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <ostream>  // doctest stringifies std::error_code with it
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include <tutti/algorithm/automatic.hpp>
#include <tutti/core/collective.hpp>

#include "../support/probes.hpp"
#include <tutti/algorithm/schedule.hpp>
#include <tutti/core/error.hpp>

TEST_SUITE_BEGIN("unit");

namespace sch = tutti::schedule;
using tutti::collective;
using tutti::algo::automatic;

namespace {

/// Every scheduled collective, from the table.
const std::vector<collective> all_collectives = [] {
  std::vector<collective> v;
  for (std::size_t i = 0; i < tutti::scheduled_count; ++i) v.push_back(static_cast<collective>(i));
  return v;
}();

std::size_t idx(collective c) { return static_cast<std::size_t>(c); }

using tutti::test::window_probe;
static_assert(tutti::shared_window<window_probe>);
using plain = tutti::detail::probe_transport;  // no capability, no tuned table

std::size_t id(std::string_view name) { return automatic::index_of(name).value(); }
template <class T = plain>
bool runs(std::string_view name, collective c) {
  return automatic::support<T>[id(name)][idx(c)];
}
/// The name automatic picks for (c, bytes) on p ranks of transport T with TUTTI_ALGO = text.
template <class T = plain>
std::string_view pick(std::string_view text, collective c, std::size_t bytes, int p, std::string* why = nullptr,
                      const automatic& a = {}) {
  return automatic::names[a.choose(automatic::make_plan<T>(text, p), c, bytes, why)];
}
/// The per-collective entry TUTTI_ALGO = text gives c, as a name ("" for none).
std::string_view entry(const automatic::override_table& t, collective c) {
  const auto& e = t.per_collective[idx(c)];
  return e ? automatic::names[*e] : std::string_view();
}

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

TEST_CASE("override_table::parse: one name applies to every collective the algorithm has on the transport") {
  auto check_one = [](auto transport_tag, std::string_view name) {
    using T = decltype(transport_tag);
    CAPTURE(name);
    for (const std::string& text : {std::string(name), "  " + std::string(name) + " "}) {
      const auto t = automatic::override_table::parse<T>(text);
      for (auto c : all_collectives) {
        const std::string_view coll = tutti::collective_name(c);
        CAPTURE(coll);
        CHECK(entry(t, c) == (runs<T>(name, c) ? name : std::string_view()));
      }
    }
  };
  for (std::string_view name : {"ring", "tree", "recursive_doubling", "direct"}) check_one(plain{}, name);
  check_one(window_probe{}, "shared_memory");
  // The support table derived from the candidates' schedules.
  CHECK(runs("direct", collective::all_to_all));
  CHECK_FALSE(runs("ring", collective::all_to_all));
  CHECK_FALSE(runs("tree", collective::all_to_all));
  CHECK_FALSE(runs("recursive_doubling", collective::gather));
  CHECK(runs("recursive_doubling", collective::all_reduce));
  CHECK(runs("tree", collective::scatter));
  for (auto c : all_collectives) CHECK(runs("direct", c));  // direct has every collective, the v-forms too
  for (auto c : {collective::all_gather_v, collective::reduce_scatter_v}) CHECK(runs("ring", c));
  for (auto c : {collective::gather_v, collective::scatter_v, collective::all_to_all_v}) CHECK_FALSE(runs("ring", c));
  // shared_memory has every collective but the scans (a collective an algorithm may leave out).
  for (auto c : all_collectives) CHECK(runs<window_probe>("shared_memory", c) == !tutti::info(c).ordered);
  for (auto c : all_collectives) CHECK_FALSE(runs("shared_memory", c));  // no windows
  for (auto c : all_collectives) CHECK_FALSE(runs("native", c));         // no collectives of its own
  for (std::string_view a : {"ring", "tree", "recursive_doubling", "direct"}) {
    CHECK(runs(a, collective::all_reduce));
    CHECK(runs(a, collective::barrier));
  }
  // algorithm_for<automatic, C, T> is true exactly where a candidate runs C on T.
  static_assert(tutti::algorithm_for<automatic, collective::all_to_all_v, plain>);
  static_assert(!tutti::algorithm_for<tutti::algo::automatic_of<tutti::algo::ring, tutti::algo::tree>,
                                      collective::gather_v, plain>);
  static_assert(tutti::algorithm_for<tutti::algo::automatic_of<tutti::algo::shared_memory>, collective::gather_v,
                                     window_probe>);
  static_assert(!tutti::algorithm_for<tutti::algo::automatic_of<tutti::algo::shared_memory>, collective::gather_v, plain>);
}

TEST_CASE("override_table::parse: a list of collective-algorithm pairs") {
  const auto t = automatic::override_table::parse(" all_reduce = ring , broadcast=tree,all_to_all=direct,all_gather_v=ring");
  CHECK(entry(t, collective::all_reduce) == "ring");
  CHECK(entry(t, collective::broadcast) == "tree");
  CHECK(entry(t, collective::all_to_all) == "direct");
  CHECK(entry(t, collective::all_gather_v) == "ring");
  for (auto c : {collective::reduce, collective::gather, collective::all_gather, collective::scatter,
                 collective::reduce_scatter, collective::barrier, collective::gather_v})
    CHECK_FALSE(t.per_collective[idx(c)].has_value());

  const auto one = automatic::override_table::parse("barrier=recursive_doubling");
  CHECK(entry(one, collective::barrier) == "recursive_doubling");
  CHECK_FALSE(one.per_collective[idx(collective::all_reduce)].has_value());
}

namespace {
/// parse(text) on transport T raises config_error whose message contains every needle.
template <class T = plain>
void expect_config_error(std::string_view text, std::initializer_list<std::string_view> needles) {
  CAPTURE(text);
  bool thrown = false;
  try {
    (void)automatic::override_table::parse<T>(text);
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
  expect_config_error("rign", {"rign", "expected ring, tree, recursive_doubling, direct, shared_memory or native"});
  expect_config_error("automatic", {"automatic"});                         // not a concrete one
  expect_config_error("all_reduce=bogus", {"bogus"});                      // unknown algorithm in a list
  expect_config_error("allreduce=ring", {"allreduce", "reduce_scatter_v"});  // unknown collective, the list named
  expect_config_error("send/recv=direct", {"send/recv"});                  // not overridable
  expect_config_error("all_to_all=ring", {"ring", "all_to_all"});          // no such schedule
  expect_config_error("gather_v=ring", {"ring", "gather_v"});
  expect_config_error("gather=recursive_doubling", {"recursive_doubling", "gather"});
  expect_config_error("all_reduce=ring,all_reduce=tree", {"all_reduce", "twice"});  // duplicate
  expect_config_error("all_reduce=ring,tree", {"tree"});                   // missing '=' in a list
  expect_config_error("all_reduce=ring,,broadcast=tree", {});              // empty item in a list
  expect_config_error("=ring", {});                                        // empty collective
  expect_config_error("all_reduce=", {});                                  // empty algorithm
  // A capability the transport lacks.
  expect_config_error("shared_memory", {"shared_memory", "shared windows", "has none"});
  expect_config_error("all_reduce=native", {"native", "collectives of its own"});
  // Sizes not every rank knows take no ranges.
  expect_config_error("gather_v=direct@<1K", {"gather_v", "no size range"});
  expect_config_error("all_to_all_v=direct@>=0", {"all_to_all_v", "no size range"});
  expect_config_error("barrier=direct@>=0", {"barrier", "no size range"});
  // shared_memory is fine where there are windows.
  CHECK(entry(automatic::override_table::parse<window_probe>("all_reduce=shared_memory"), collective::all_reduce) ==
        "shared_memory");
}

// ---- the automatic rule ---------------------------------------------------------------------

TEST_CASE("automatic follows the documented rule where neither TUTTI_ALGO nor a table decides") {
  constexpr std::size_t KiB = 1024;
  auto rule = [](collective c, std::size_t bytes, int p) { return pick("", c, bytes, p); };
  // all_to_all, reduce_scatter, barrier and the v-forms without sizes: fixed.
  for (int p : {2, 3, 8, 9})
    for (std::size_t bytes : {std::size_t{0}, 4 * KiB, 1024 * KiB}) {
      CHECK(rule(collective::all_to_all, bytes, p) == "direct");
      CHECK(rule(collective::reduce_scatter, bytes, p) == "ring");
      CHECK(rule(collective::reduce_scatter_v, bytes, p) == "ring");
      CHECK(rule(collective::barrier, bytes, p) == "recursive_doubling");
      for (auto c : {collective::gather_v, collective::scatter_v, collective::all_to_all_v}) CHECK(rule(c, bytes, p) == "direct");
    }
  // all_reduce: small -> recursive doubling; large -> rd on powers of two, ring otherwise.
  CHECK(rule(collective::all_reduce, 1 * KiB, 3) == "recursive_doubling");
  CHECK(rule(collective::all_reduce, 16 * KiB - 1, 3) == "recursive_doubling");
  CHECK(rule(collective::all_reduce, 16 * KiB, 3) == "ring");
  CHECK(rule(collective::all_reduce, 1024 * KiB, 6) == "ring");
  CHECK(rule(collective::all_reduce, 1024 * KiB, 8) == "recursive_doubling");
  // broadcast / reduce: tree unless large on more than two ranks.
  CHECK(rule(collective::broadcast, 1 * KiB, 9) == "tree");
  CHECK(rule(collective::broadcast, 1024 * KiB, 2) == "tree");
  CHECK(rule(collective::broadcast, 1024 * KiB, 3) == "ring");
  CHECK(rule(collective::reduce, 256 * KiB, 4) == "ring");
  CHECK(rule(collective::reduce, 256 * KiB - 1, 4) == "tree");
  // gather / scatter by total bytes.
  CHECK(rule(collective::gather, 1 * KiB, 4) == "tree");
  CHECK(rule(collective::gather, 16 * KiB, 4) == "direct");
  CHECK(rule(collective::scatter, 16 * KiB - 1, 4) == "tree");
  CHECK(rule(collective::scatter, 64 * KiB, 1) == "direct");
  // all_gather by total bytes, all_gather_v by the largest block times p.
  CHECK(rule(collective::all_gather, 1 * KiB, 4) == "recursive_doubling");
  CHECK(rule(collective::all_gather, 32 * KiB, 4) == "ring");
  CHECK(rule(collective::all_gather_v, 1 * KiB, 4) == "direct");
  CHECK(rule(collective::all_gather_v, 32 * KiB, 4) == "ring");
}

TEST_CASE("automatic only picks candidates that have the collective, and honours TUTTI_ALGO") {
  for (auto c : all_collectives)
    for (int p = 1; p <= 17; ++p)
      for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{16384},
                                std::size_t{65536}, std::size_t{262144}, std::size_t{1} << 24}) {
        const std::string_view coll = tutti::collective_name(c);
        CAPTURE(coll);
        CAPTURE(p);
        CAPTURE(bytes);
        REQUIRE(runs(pick("", c, bytes, p), c));
        REQUIRE(runs<window_probe>(pick<window_probe>("", c, bytes, p), c));
      }
  for (bool windows : {false, true}) {
    CAPTURE(windows);
    auto p = [&](collective c) {
      return windows ? pick<window_probe>("all_reduce=direct,broadcast=ring", c, 10, 4)
                     : pick("all_reduce=direct,broadcast=ring", c, 10, 4);
    };
    CHECK(p(collective::all_reduce) == "direct");
    CHECK(p(collective::broadcast) == "ring");
  }
  // Not overridden: the rule, or shared_memory on a transport with windows.
  CHECK(pick("all_reduce=direct", collective::gather, 10, 4) == pick("", collective::gather, 10, 4));
  CHECK(pick<window_probe>("all_reduce=direct", collective::gather, 10, 4) == "shared_memory");
  for (auto c : all_collectives) {
    CAPTURE(tutti::collective_name(c));
    // Where shared_memory has the collective (not the scans, which it leaves out), it wins.
    CHECK((pick<window_probe>("", c, 1 << 20, 6) == "shared_memory") == !tutti::info(c).ordered);
    CHECK(pick("", c, 100, 6) != "shared_memory");  // it needs a transport with windows
  }
  // The thresholds are knobs.
  automatic b{};
  b.small_all_reduce_bytes = 0;
  CHECK(pick("", collective::all_reduce, 1, 3, nullptr, b) == "ring");
  // visit hands out the candidate object, with its knobs.
  automatic a{};
  a.get<tutti::algo::ring>().chunk_bytes = 12345;
  CHECK(a.visit(id("ring"), [](const auto& x) { return std::string(x.name); }) == "ring");
  CHECK(a.visit(id("direct"), [](const auto& x) { return std::string(x.name); }) == "direct");
  CHECK(a.get<tutti::algo::ring>().chunk_bytes == 12345);
  // Every candidate name parses back to its index.
  for (std::string_view n : {"ring", "tree", "recursive_doubling", "direct"}) {
    const auto table = automatic::override_table::parse("barrier=" + std::string(n));
    CHECK(entry(table, collective::barrier) == n);
  }
}

namespace {
struct star {
  static constexpr std::string_view name = "star";
  template <class Ch, class T, class M, class Op>
  void all_reduce(Ch&, tutti::view<T, M>, const Op&) const {}
};
}  // namespace

TEST_CASE("automatic_of: a user's algorithm joins the candidates and TUTTI_ALGO names it") {
  using mine = tutti::algo::automatic_of<tutti::algo::ring, star>;
  static_assert(tutti::algorithm_for<mine, collective::all_reduce>);
  static_assert(tutti::algorithm_for<mine, collective::broadcast>);  // ring's
  static_assert(!tutti::algorithm_for<mine, collective::all_to_all>);
  CHECK(mine::names[mine::index_of("star").value()] == "star");
  const mine m{};
  std::string why;
  CHECK(mine::names[m.choose(mine::make_plan<plain>("all_reduce=star", 4), collective::all_reduce, 100, &why)] == "star");
  CHECK(why == "TUTTI_ALGO all_reduce=star");
  // The rule's pick (recursive_doubling) is not a candidate: the first one that has it (ring).
  CHECK(mine::names[m.choose(mine::make_plan<plain>("", 4), collective::all_reduce, 100, &why)] == "ring");
  CHECK(why.find("not a candidate") != std::string::npos);
  // star has no broadcast
  try {
    (void)mine::override_table::parse("broadcast=star");
    FAIL_CHECK("no config_error");
  } catch (const tutti::config_error& e) {
    CHECK(std::string(e.what()).find("star has no broadcast schedule") != std::string::npos);
  }
}

TEST_SUITE_END();
