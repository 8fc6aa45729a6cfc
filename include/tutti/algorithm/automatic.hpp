/// \file
/// `tutti::algo::automatic`: picks a concrete algorithm per call from the collective, the
/// message size and the group size, by the α-β costs in each algorithm's header. All ranks
/// compute the same choice (it depends only on values every rank agrees on); the choice goes into
/// the fingerprint, so ranks configured differently get a mismatch error, not a hang.
///
/// The rule (bytes = the count all ranks agree on × element size; p = group size):
/// | collective     | choice                                                                    |
/// |----------------|---------------------------------------------------------------------------|
/// | all_reduce     | bytes < 16 KiB: recursive_doubling (lg p·α beats ring's 2(p−1)·α);        |
/// |                | p a power of two: recursive_doubling (Rabenseifner from 64 KiB: ring's    |
/// |                | bandwidth term with 2 lg p·α instead of 2(p−1)·α); otherwise ring         |
/// |                | (folding would cost two extra full-buffer moves).                         |
/// | broadcast,     | p ≤ 2 or bytes < 256 KiB: tree (⌈lg p⌉·α); otherwise ring's pipelined     |
/// | reduce         | chain, whose n·β term does not grow with lg p.                            |
/// | gather,scatter | p·bytes < 64 KiB: tree (⌈lg p⌉·α); otherwise direct (each byte moves once)|
/// | all_gather     | p·bytes < 64 KiB: recursive_doubling (⌈lg p⌉·α); otherwise ring           |
/// | reduce_scatter | ring (same α count as pairwise, neighbour traffic only)                   |
/// | all_to_all     | direct (pairwise exchange)                                                |
/// | barrier        | recursive_doubling (dissemination, ⌈lg p⌉ rounds)                         |
///
/// On a transport with shared windows (`tutti::shm`), every collective runs `shared_memory`'s
/// native schedule: loads and stores instead of messages, p−1 fewer copies than any
/// point-to-point schedule. `native` (the transport's own collectives, e.g. MPI's) is never
/// chosen by the rule: only by `TUTTI_ALGO` (see native.hpp for why).
///
/// Precedence, first match wins: `TUTTI_ALGO` > the tuned table (tuned_table.hpp, measured by
/// `tutti-bench --tune` for tutti::shm, tutti::tcp and tutti::inproc; other transports have
/// none) > shared windows (`shared_memory`) > the α-β rule above. `explain()` says which applied.
///
/// `TUTTI_ALGO` grammar (comma-separated items, spaces allowed around tokens):
///   item  := algorithm                     one name: every collective it has a schedule for
///          | collective=algorithm          that collective, every size
///          | collective=algorithm@range[,algorithm@range...]   per size; uncovered sizes fall
///                                          back to the bare name, then the table and the rule
///   range := <=N | <N | >=N | >N | A..B (inclusive);  N := digits[K|M|G] (binary: K = 1024)
/// e.g. `TUTTI_ALGO=all_reduce=ring@>1M,recursive_doubling@<=1M,broadcast=tree`. Checked
/// strictly: an unknown name, an algorithm without a schedule for the collective, a collective
/// named twice, overlapping ranges or a malformed size raise `config_error` quoting the part.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/native.hpp"
#include "tutti/algorithm/recursive_doubling.hpp"
#include "tutti/algorithm/shared_memory.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/algorithm/tree.hpp"
#include "tutti/algorithm/tuned_table.hpp"
#include "tutti/core/error.hpp"

namespace tutti {
class shm;
class tcp;
class inproc;
}  // namespace tutti

namespace tutti::algo {

struct automatic {
  static constexpr std::string_view name = "automatic";

  /// The concrete algorithms automatic chooses among; their knobs are used as set here.
  enum class choice : unsigned char { ring, tree, recursive_doubling, direct, shared_memory, native };

  algo::ring ring{};
  algo::tree tree{};
  algo::recursive_doubling recursive_doubling{};
  algo::direct direct{};
  algo::shared_memory shared_memory{};
  algo::native native{};

  /// Thresholds of the rule above, in bytes.
  std::size_t small_all_reduce_bytes = std::size_t{16} << 10;
  std::size_t pipeline_bytes = std::size_t{256} << 10;
  std::size_t small_total_bytes = std::size_t{64} << 10;

  /// A size range in bytes, inclusive at both ends.
  struct size_range {
    std::size_t lo = 0, hi = static_cast<std::size_t>(-1);
    constexpr bool contains(std::size_t b) const noexcept { return lo <= b && b <= hi; }
  };

  /// A `TUTTI_ALGO` value, parsed.
  struct override_table {
    /// One algorithm per collective for every size (`c=alg`, or a bare name).
    std::array<std::optional<choice>, 9> per_collective{};
    /// Per-size items (`c=alg@range,...`), checked before per_collective.
    struct ranged {
      size_range range;
      choice algorithm;
      std::string text;  // as written, for explain()
    };
    std::array<std::vector<ranged>, 9> per_size{};
    /// The bare name, if any (it fills per_collective of the collectives not named).
    std::optional<choice> bare;
    /// Whether any item names algorithm `a` (for transport capability checks).
    bool names(choice a) const noexcept {
      for (std::size_t c = 0; c < 9; ++c) {
        if (per_collective[c] == a) return true;
        for (const auto& r : per_size[c])
          if (r.algorithm == a) return true;
      }
      return false;
    }
    bool empty() const noexcept { return !names_any(); }
    static override_table parse(std::string_view text);

   private:
    bool names_any() const noexcept {
      for (std::size_t c = 0; c < 9; ++c)
        if (per_collective[c] || !per_size[c].empty()) return true;
      return false;
    }
  };

  /// The tuned-table row for (kind, c, p, bytes), if any.
  static const tuned::row* tuned_row(tuned::kind k, collective c, std::size_t bytes, int p) noexcept {
    for (const auto& r : tuned::rows)
      if (r.k == k && r.coll == c && r.p_lo <= p && p <= r.p_hi && r.lo <= bytes && bytes <= r.hi) return &r;
    return nullptr;
  }

  /// The rule (no override).
  constexpr choice choose(collective c, std::size_t bytes, int p) const noexcept {
    const std::size_t total = bytes * static_cast<std::size_t>(p);
    const bool pow2 = (p & (p - 1)) == 0;
    switch (c) {
      case collective::all_reduce:
        return bytes < small_all_reduce_bytes || pow2 ? choice::recursive_doubling : choice::ring;
      case collective::broadcast:
      case collective::reduce:
        return p <= 2 || bytes < pipeline_bytes ? choice::tree : choice::ring;
      case collective::gather:
      case collective::scatter:
        return total < small_total_bytes ? choice::tree : choice::direct;
      case collective::all_gather:
        return total < small_total_bytes ? choice::recursive_doubling : choice::ring;
      case collective::reduce_scatter: return choice::ring;
      case collective::all_to_all: return choice::direct;
      default: return choice::recursive_doubling;  // barrier
    }
  }

  /// `TUTTI_ALGO` (`table`), then the tuned table of transport kind `k` (none: no table), then
  /// shared windows (`windows`: the transport has them), then the rule. With `why`, says which
  /// and why there (the text of `comm.explain`).
  choice choose(collective c, std::size_t bytes, int p, const override_table& table, bool windows,
                std::optional<tuned::kind> k = std::nullopt, std::string* why = nullptr) const {
    const auto ci = static_cast<std::size_t>(c);
    for (const auto& r : table.per_size[ci])
      if (r.range.contains(bytes)) {
        if (why) *why = "TUTTI_ALGO " + r.text;
        return r.algorithm;
      }
    if (const auto& o = table.per_collective[ci]) {
      if (why)
        *why = table.bare == o && !explicit_collective(table, c)
                   ? "TUTTI_ALGO " + std::string(choice_name(*o))
                   : "TUTTI_ALGO " + std::string(collective_name(c)) + "=" + std::string(choice_name(*o));
      return *o;
    }
    if (k) {
      const tuned::row* r = tuned_row(*k, c, bytes, p);
      if (r && (r->a != tuned::alg::shared_memory || windows)) {
        if (why) {
          // the run, shortened to its first two fields ("tutti-bench --tune, <date>")
          std::string src = tuned::source[static_cast<int>(*k)] ? tuned::source[static_cast<int>(*k)] : "";
          if (const auto c1 = src.find(", "); c1 != std::string::npos)
            if (const auto c2 = src.find(", ", c1 + 2); c2 != std::string::npos) src.resize(c2);
          *why = std::string("tuned table for ") + tuned::kind_names[static_cast<int>(*k)] + ", " +
                 (r->p_lo == r->p_hi ? std::to_string(r->p_lo) : std::to_string(r->p_lo) + ".." + std::to_string(r->p_hi)) +
                 " ranks, " + range_text({static_cast<std::size_t>(r->lo), static_cast<std::size_t>(r->hi)}) +
                 (r->lo == 0 && r->hi == tuned::any ? "" : " bytes") + (src.empty() ? std::string() : " (" + src + ")");
        }
        return static_cast<choice>(r->a);
      }
    }
    if (windows) {
      if (why) *why = "rule: the transport has shared windows -> shared_memory";
      return choice::shared_memory;
    }
    const choice a = choose(c, bytes, p);
    if (why) *why = "rule: " + rule_reason(c, bytes, p);
    return a;
  }

  /// `bytes` as the grammar writes it: 1M, 64K, 100 ("max" for no bound).
  static std::string size_text(std::size_t b) {
    if (b == static_cast<std::size_t>(-1)) return "max";
    for (auto [shift, suffix] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}})
      if (b != 0 && b % (std::size_t{1} << shift) == 0) return std::to_string(b >> shift) + suffix;
    return std::to_string(b);
  }
  static std::string range_text(size_range r) {
    constexpr auto top = static_cast<std::size_t>(-1);
    if (r.lo == 0 && r.hi == top) return "any size";
    if (r.hi == top) return ">=" + size_text(r.lo);
    if (r.lo == 0) return "<=" + size_text(r.hi);
    return size_text(r.lo) + ".." + size_text(r.hi);
  }

  /// Why the rule picks what it picks (the thresholds in the table at the top of this file).
  std::string rule_reason(collective c, std::size_t bytes, int p) const {
    const std::size_t total = bytes * static_cast<std::size_t>(p);
    const bool pow2 = (p & (p - 1)) == 0;
    const std::string to = " -> " + std::string(choice_name(choose(c, bytes, p)));
    switch (c) {
      case collective::all_reduce:
        if (bytes < small_all_reduce_bytes) return "bytes < " + size_text(small_all_reduce_bytes) + to;
        return pow2 ? "bytes >= " + size_text(small_all_reduce_bytes) + ", " + std::to_string(p) + " ranks a power of two" + to
                    : "bytes >= " + size_text(small_all_reduce_bytes) + ", " + std::to_string(p) + " ranks not a power of two" + to;
      case collective::broadcast:
      case collective::reduce:
        if (p <= 2) return "2 ranks or fewer" + to;
        return (bytes < pipeline_bytes ? "bytes < " : "bytes >= ") + size_text(pipeline_bytes) + to;
      case collective::gather:
      case collective::scatter:
      case collective::all_gather:
        return (total < small_total_bytes ? "ranks x bytes < " : "ranks x bytes >= ") + size_text(small_total_bytes) + to;
      default: return "always" + to;
    }
  }

  /// Calls `f(algorithm)` with the chosen concrete algorithm object.
  template <class F>
  decltype(auto) visit(choice c, F&& f) const {
    switch (c) {
      case choice::ring: return f(ring);
      case choice::tree: return f(tree);
      case choice::recursive_doubling: return f(recursive_doubling);
      case choice::shared_memory: return f(shared_memory);
      case choice::native: return f(native);
      default: return f(direct);
    }
  }

  static constexpr std::string_view choice_name(choice c) noexcept {
    constexpr std::string_view names[] = {"ring", "tree", "recursive_doubling", "direct", "shared_memory", "native"};
    return names[static_cast<int>(c)];
  }

  /// Whether the concrete algorithm `a` has a schedule for collective `c`.
  static constexpr bool supports(choice a, collective c) noexcept {
    return support_table()[static_cast<std::size_t>(a)][static_cast<std::size_t>(c)];
  }

 private:
  /// Whether `c`'s per_collective entry came from a `c=alg` item rather than the bare name.
  static bool explicit_collective(const override_table& t, collective c) noexcept {
    return !t.bare || t.per_collective[static_cast<std::size_t>(c)] != t.bare;
  }
  template <class A>
  static constexpr std::array<bool, 9> row() {
    return {algorithm_for<A, collective::broadcast>,  algorithm_for<A, collective::reduce>,
            algorithm_for<A, collective::all_reduce>, algorithm_for<A, collective::gather>,
            algorithm_for<A, collective::all_gather>, algorithm_for<A, collective::scatter>,
            algorithm_for<A, collective::all_to_all>, algorithm_for<A, collective::reduce_scatter>,
            algorithm_for<A, collective::barrier>};
  }
  static constexpr std::array<std::array<bool, 9>, 6> support_table() {
    // shared_memory and native have every collective, on transports with the capability.
    constexpr std::array<bool, 9> all{true, true, true, true, true, true, true, true, true};
    return {row<algo::ring>(), row<algo::tree>(), row<algo::recursive_doubling>(), row<algo::direct>(), all, all};
  }
};

inline automatic::override_table automatic::override_table::parse(std::string_view text) {
  override_table t;
  const std::string whole(text);
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  auto fail = [&](const std::string& msg) -> void {
    throw config_error("TUTTI_ALGO=" + whole + ": " + msg);
  };
  auto algo_named = [&](std::string_view n) -> choice {
    for (int i = 0; i < 6; ++i)
      if (choice_name(static_cast<choice>(i)) == n) return static_cast<choice>(i);
    if (n == "automatic") fail("'automatic' is the default; leave the collective out instead");
    fail("unknown algorithm '" + std::string(n) +
         "' (expected ring, tree, recursive_doubling, direct, shared_memory or native)");
    return choice::ring;
  };
  auto collective_named = [&](std::string_view n) -> collective {
    for (int i = 0; i < 9; ++i)
      if (collective_name(static_cast<collective>(i)) == n) return static_cast<collective>(i);
    fail("unknown collective '" + std::string(n) +
         "' (expected broadcast, reduce, all_reduce, gather, all_gather, scatter, all_to_all, reduce_scatter or barrier)");
    return collective::barrier;
  };
  constexpr auto top = static_cast<std::size_t>(-1);
  // N := digits [K|M|G]
  auto size_named = [&](std::string_view n, std::string_view in) -> std::size_t {
    n = trim(n);
    std::size_t i = 0, v = 0;
    const std::string bad = "'" + std::string(n) + "' in '" + std::string(in) +
                            "' is not a size (expected digits with an optional K, M or G suffix, like 4096, 64K or 1M)";
    if (n.empty() || n[0] < '0' || n[0] > '9') fail(bad);
    for (; i < n.size() && n[i] >= '0' && n[i] <= '9'; ++i) {
      if (v > (top - 9) / 10) fail("size '" + std::string(n) + "' in '" + std::string(in) + "' is too large");
      v = v * 10 + static_cast<std::size_t>(n[i] - '0');
    }
    int shift = 0;
    if (i < n.size()) {
      switch (n[i]) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        default: fail(bad);
      }
      if (++i != n.size()) fail(bad);
    }
    if (shift && v > (top >> shift)) fail("size '" + std::string(n) + "' in '" + std::string(in) + "' is too large");
    return v << shift;
  };
  // range := <=N | <N | >=N | >N | A..B
  auto range_named = [&](std::string_view r, std::string_view in) -> size_range {
    r = trim(r);
    size_range out;
    if (r.starts_with("<=")) out.hi = size_named(r.substr(2), in);
    else if (r.starts_with(">=")) out.lo = size_named(r.substr(2), in);
    else if (r.starts_with("<")) {
      const auto n = size_named(r.substr(1), in);
      if (n == 0) fail("'" + std::string(in) + "': no size is < 0");
      out.hi = n - 1;
    } else if (r.starts_with(">")) {
      const auto n = size_named(r.substr(1), in);
      if (n == top) fail("'" + std::string(in) + "': no size is above that");
      out.lo = n + 1;
    } else if (const auto dots = r.find(".."); dots != std::string_view::npos) {
      out.lo = size_named(r.substr(0, dots), in);
      out.hi = size_named(r.substr(dots + 2), in);
      if (out.lo > out.hi) fail("'" + std::string(in) + "': the range " + std::string(r) + " is empty (A..B needs A <= B)");
    } else {
      fail("'" + std::string(in) + "': '" + std::string(r) + "' is not a size range (expected <=N, <N, >=N, >N or A..B)");
    }
    return out;
  };
  std::array<bool, 9> named{};
  int current = -1;  // the collective an `alg@range` continuation belongs to
  bool first = true;
  text = trim(text);
  if (text.empty()) return t;
  while (true) {
    const auto comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    if (item.empty()) fail("empty item (two commas in a row, or a comma at either end)");
    const auto at_sign = item.find('@');
    auto eq = item.find('=');
    if (at_sign != std::string_view::npos && eq > at_sign) eq = std::string_view::npos;  // the = of <=, >=
    std::string_view spec = item;  // alg[@range]
    if (eq != std::string_view::npos) {
      const collective c = collective_named(trim(item.substr(0, eq)));
      if (named[static_cast<std::size_t>(c)])
        fail(std::string(collective_name(c)) + " is named twice (list its ranges in one item: " +
             std::string(collective_name(c)) + "=a@range,b@range)");
      named[static_cast<std::size_t>(c)] = true;
      current = static_cast<int>(c);
      spec = trim(item.substr(eq + 1));
    } else if (item.find('@') == std::string_view::npos) {  // a bare name: every collective
      if (t.bare) fail("'" + std::string(item) + "': only one bare algorithm name is allowed (the default for every collective)");
      if (!first)
        fail("'" + std::string(item) + "': a bare algorithm name (the default for every collective) must come first; "
             "after collective=algorithm, give each further algorithm a range (algorithm@range)");
      t.bare = algo_named(item);
      first = false;
      if (comma == std::string_view::npos) break;
      text = text.substr(comma + 1);
      continue;
    } else if (current < 0) {
      fail("'" + std::string(item) + "': a size range needs a collective (write all_reduce=" + std::string(item) + ")");
    }
    first = false;
    const auto c = static_cast<collective>(current);
    const auto ci = static_cast<std::size_t>(c);
    const auto at = spec.find('@');
    const choice a = algo_named(trim(spec.substr(0, at)));
    if (!supports(a, c)) fail(std::string(choice_name(a)) + " has no " + std::string(collective_name(c)) + " schedule");
    if (at == std::string_view::npos) {
      if (!t.per_size[ci].empty() || t.per_collective[ci])
        fail("'" + std::string(item) + "': " + std::string(collective_name(c)) +
             " already has an algorithm; give every algorithm of a list a range (alg@range)");
      t.per_collective[ci] = a;
    } else {
      if (t.per_collective[ci])
        fail("'" + std::string(item) + "': " + std::string(collective_name(c)) + " already has an algorithm for every size");
      const size_range r = range_named(spec.substr(at + 1), item);
      for (const auto& o : t.per_size[ci])
        if (r.lo <= o.range.hi && o.range.lo <= r.hi)
          fail("'" + std::string(item) + "' overlaps '" + o.text + "' (" + std::string(collective_name(c)) +
               " ranges must not overlap)");
      t.per_size[ci].push_back({r, a, std::string(collective_name(c)) + "=" + std::string(choice_name(a)) + "@" +
                                          std::string(trim(spec.substr(at + 1)))});
    }
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  if (t.bare)
    for (int c = 0; c < 9; ++c)
      if (!t.per_collective[static_cast<std::size_t>(c)] && supports(*t.bare, static_cast<collective>(c)))
        t.per_collective[static_cast<std::size_t>(c)] = t.bare;
  return t;
}

static_assert(algorithm<automatic>);
static_assert(static_cast<int>(tuned::alg::ring) == static_cast<int>(automatic::choice::ring) &&
              static_cast<int>(tuned::alg::tree) == static_cast<int>(automatic::choice::tree) &&
              static_cast<int>(tuned::alg::recursive_doubling) == static_cast<int>(automatic::choice::recursive_doubling) &&
              static_cast<int>(tuned::alg::direct) == static_cast<int>(automatic::choice::direct) &&
              static_cast<int>(tuned::alg::shared_memory) == static_cast<int>(automatic::choice::shared_memory),
              "tuned_table.hpp's alg must list automatic::choice's values in its order");

/// The tuned-table kind of a transport type: shm, tcp and inproc have one; others (MPI, user
/// transports) use the rule.
template <class Transport>
inline constexpr std::optional<tuned::kind> tuned_kind_of = std::nullopt;
template <>
inline constexpr std::optional<tuned::kind> tuned_kind_of<tutti::shm> = tuned::kind::shm;
template <>
inline constexpr std::optional<tuned::kind> tuned_kind_of<tutti::tcp> = tuned::kind::tcp;
template <>
inline constexpr std::optional<tuned::kind> tuned_kind_of<tutti::inproc> = tuned::kind::threads;

}  // namespace tutti::algo
