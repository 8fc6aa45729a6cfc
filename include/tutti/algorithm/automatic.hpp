/// \file
/// `tutti::algo::automatic_of<Candidates...>`: picks one of its candidate algorithms per call,
/// from the collective, the message size and the group size. `tutti::algo::automatic` is
/// `automatic_of<ring, tree, recursive_doubling, direct, shared_memory, native>`; a user's own
/// algorithm joins the candidates at compile time (`automatic_of<ring, tree, my_algorithm>`), and
/// then `TUTTI_ALGO` and the tuned table name it like a built-in one. All ranks compute the same
/// choice (it depends only on values every rank agrees on); the choice goes into the fingerprint,
/// so ranks configured differently get a mismatch error, not a hang.
///
/// Precedence, first match wins:
/// 1. `TUTTI_ALGO` (grammar below): per size range, then per collective or the bare name;
/// 2. the tuned table (tuned_table.hpp) of the transport's tuning kind (`transport_traits`), for
///    the group's size and the call's bytes;
/// 3. the transport's own collectives (`native`) where the transport asks for them first
///    (`transport_traits::native_first`: `tutti::cuda_ipc`'s kernels, NCCL's collectives);
///    then shared windows: `shared_memory`, where it has the collective on the transport;
/// 4. the α-β rule below, among the candidates that have the collective on the transport; where
///    the rule's pick is not among them, the first candidate (in list order) that has it.
/// Candidates marked `explicit_only` (`native`: the transport's own collectives) are never picked
/// by steps 3 and 4: only `TUTTI_ALGO` or a table row names them. `explain()` says which step
/// decided and why. `algorithm_for<automatic_of<...>, C, Transport>` is true exactly where some
/// candidate has a schedule for C on the transport.
///
/// The rule (bytes = what `size_basis` says: the whole buffer, one rank's block or the largest
/// block; p = group size):
/// | collective       | choice                                                                  |
/// |------------------|-------------------------------------------------------------------------|
/// | all_reduce       | bytes < 16 KiB: recursive_doubling (lg p·α beats ring's 2(p−1)·α);      |
/// |                  | p a power of two: recursive_doubling (Rabenseifner from 64 KiB: ring's  |
/// |                  | bandwidth term with 2 lg p·α instead of 2(p−1)·α); otherwise ring       |
/// |                  | (folding would cost two extra full-buffer moves).                       |
/// | broadcast,       | p ≤ 2 or bytes < 256 KiB: tree (⌈lg p⌉·α); otherwise ring's pipelined   |
/// | reduce           | chain, whose n·β term does not grow with lg p.                          |
/// | gather,scatter   | p·bytes < 64 KiB: tree (⌈lg p⌉·α); otherwise direct (each byte moves once)|
/// | all_gather       | p·bytes < 64 KiB: recursive_doubling (⌈lg p⌉·α); otherwise ring         |
/// | all_gather_v     | p·largest < 64 KiB: direct (p−1 messages, no forwarding); otherwise ring|
/// | reduce_scatter(_v)| ring (same α count as pairwise, neighbour traffic only)                |
/// | all_to_all(_v), gather_v, scatter_v | direct (pairwise exchange; the v-forms' sizes are not known on every rank) |
/// | barrier          | recursive_doubling (dissemination, ⌈lg p⌉ rounds)                       |
/// | scan, exscan     | p ≤ 2 or bytes < 256 KiB: recursive_doubling (⌈lg p⌉·α); otherwise      |
/// |                  | direct's pipelined chain, whose n·β term does not grow with lg p.       |
/// A collective the rule does not list gets the first candidate (in list order) that has it, and
/// `explain` says so ("no rule for ...").
///
/// `TUTTI_ALGO` grammar (comma-separated items, spaces allowed around tokens):
///   item  := algorithm                     one name: every collective it has a schedule for
///          | collective=algorithm          that collective, every size
///          | collective=algorithm@range[,algorithm@range...]   per size; uncovered sizes fall
///                                          back to the bare name, then the table and the rule
///   range := <=N | <N | >=N | >N | A..B (inclusive);  N := digits[K|M|G] (binary: K = 1024)
/// e.g. `TUTTI_ALGO=all_reduce=ring@>1M,recursive_doubling@<=1M,broadcast=tree`. Checked
/// strictly against the candidates and the transport: an unknown name, an algorithm without a
/// schedule for the collective here, a collective named twice, overlapping ranges, a size range
/// on a collective whose size not every rank knows, or a malformed size raise `config_error`
/// quoting the part.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/detail/attributes.hpp"
#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/native.hpp"
#include "tutti/algorithm/recursive_doubling.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/algorithm/shared_memory.hpp"
#include "tutti/algorithm/tree.hpp"
#include "tutti/algorithm/tuned_table.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/error.hpp"
#include "tutti/transport/capabilities.hpp"

namespace tutti::algo {

/// A size range in bytes, inclusive at both ends.
struct size_range {
  std::size_t lo = 0, hi = static_cast<std::size_t>(-1);
  constexpr bool contains(std::size_t b) const noexcept { return lo <= b && b <= hi; }
};

namespace detail {
/// A `TUTTI_ALGO` value, parsed against an automatic_of's candidates (by index) and what they
/// run on a transport.
struct algo_overrides {
  struct ranged {
    size_range range;
    std::size_t algorithm;
    std::string text;  // as written, for explain()
  };
  /// Per-size items (`c=alg@range,...`), checked before `per_collective`.
  std::array<std::vector<ranged>, scheduled_count> per_size{};
  /// One algorithm per collective for every size (`c=alg`, or the bare name).
  std::array<std::optional<std::size_t>, scheduled_count> per_collective{};
  /// Which per_collective entries came from a `c=alg` item rather than the bare name.
  std::array<bool, scheduled_count> explicit_collective{};
  /// The bare name, if any.
  std::optional<std::size_t> bare;
};

/// Parses a `TUTTI_ALGO` value (the grammar in the file comment) against candidates `names`
/// (with what each `needs`, for messages) and `runs[i][c]`: candidate i schedules c here.
algo_overrides parse_algo_overrides(std::string_view text, std::span<const std::string_view> names,
                                    std::span<const std::string_view> needs,
                                    std::span<const std::array<bool, scheduled_count>> runs);

}  // namespace detail

namespace detail {
/// Whether algorithm `A` may be picked only by name (TUTTI_ALGO, a table row), never by a rule.
template <class A>
constexpr bool explicit_only() {
  if constexpr (requires { { A::explicit_only } -> std::convertible_to<bool>; }) return A::explicit_only;
  else return false;
}
/// What `A` needs of a transport beyond the plain contract, for messages ("" when nothing).
template <class A>
constexpr std::string_view needs() {
  if constexpr (requires { { A::needs } -> std::convertible_to<std::string_view>; }) return A::needs;
  else return {};
}

/// `bytes` as the grammar writes it: 1M, 64K, 100 ("max" for no bound).
std::string size_text(std::size_t b);
std::string range_text(size_range r);
}  // namespace detail

template <class... Candidates>
struct automatic_of {
  static_assert(sizeof...(Candidates) > 0, "tutti::algo::automatic_of needs at least one candidate algorithm");
  static_assert((algorithm<Candidates> && ...), "every candidate of automatic_of must be an algorithm (a type with a name)");

  static constexpr std::string_view name = "automatic";
  static constexpr std::size_t candidate_count = sizeof...(Candidates);
  /// The candidates' names, in list order (what TUTTI_ALGO and the tuned table call them).
  static constexpr std::array<std::string_view, candidate_count> names{Candidates::name...};
  static constexpr std::array<bool, candidate_count> explicit_only{detail::explicit_only<Candidates>()...};
  static constexpr std::array<std::string_view, candidate_count> needs{detail::needs<Candidates>()...};

  /// The candidates, with their knobs as set here (`a.get<algo::ring>().chunk_bytes = 1 << 18`).
  std::tuple<Candidates...> candidates{};

  /// Thresholds of the rule above, in bytes.
  std::size_t small_all_reduce_bytes = std::size_t{16} << 10;
  std::size_t pipeline_bytes = std::size_t{256} << 10;
  std::size_t small_total_bytes = std::size_t{64} << 10;

  template <class A>
  A& get() noexcept {
    return std::get<A>(candidates);
  }
  template <class A>
  const A& get() const noexcept {
    return std::get<A>(candidates);
  }

  /// The index of the candidate named `n`, if any.
  static constexpr std::optional<std::size_t> index_of(std::string_view n) noexcept {
    for (std::size_t i = 0; i < candidate_count; ++i)
      if (names[i] == n) return i;
    return std::nullopt;
  }

  /// row[c]: candidate `A` has a schedule for scheduled collective c on `Transport`.
  template <class A, class Transport>
  static constexpr void support_row(std::array<bool, scheduled_count>& row) {
    for_each_collective([&](auto c) { row[static_cast<std::size_t>(c.value)] = algorithm_for<A, c.value, Transport>; });
  }

  /// support<Transport>[i][c]: candidate i has a schedule for scheduled collective c there.
  template <class Transport>
  static constexpr auto support = [] {
    std::array<std::array<bool, scheduled_count>, candidate_count> s{};
    std::size_t i = 0;
    (support_row<Candidates, Transport>(s[i++]), ...);  // (nvcc's front end rejects a lambda here)
    return s;
  }();

  /// Calls `f(candidate)` with candidate `i`.
  template <class F>
  decltype(auto) visit(std::size_t i, F&& f) const {
    return visit_from<0>(i, f);
  }

  // ---- TUTTI_ALGO -------------------------------------------------------------------------------

  /// A `TUTTI_ALGO` value, parsed against the candidates and what they run on `Transport`
  /// (`detail::algo_overrides`: the parser is not a template, so every program compiles it once).
  struct override_table : detail::algo_overrides {
    template <class Transport = tutti::detail::probe_transport>
    static override_table parse(std::string_view text) {
      return {detail::parse_algo_overrides(text, names, needs, support<Transport>)};
    }
  };

  // ---- the choice ---------------------------------------------------------------------------------

  /// What one communicator decides by: its TUTTI_ALGO, the tuned rows of its transport kind and
  /// group size (resolved to candidates once), and which candidates run each collective on its
  /// transport (`make_plan`).
  struct plan {
    override_table overrides;
    struct tuned_range {
      std::size_t lo, hi, algorithm;
      const tuned::row* row;
    };
    std::array<std::vector<tuned_range>, scheduled_count> tuned_rows{};
    std::string_view tuned_source;  // "tutti-bench --tune, <date>", for explain()
    std::string_view tuning_kind;
    std::array<std::array<bool, scheduled_count>, candidate_count> runs{};
    int p = 1;
    bool native_first = false;  // transport_traits::native_first: the device transports
  };

  /// The plan of a communicator over `Transport` of `p` ranks with `TUTTI_ALGO` = `text`.
  template <class Transport>
  static plan make_plan(std::string_view text, int p) {
    plan pl;
    pl.overrides = override_table::template parse<Transport>(text);
    pl.runs = support<Transport>;
    pl.p = p;
    pl.native_first = transport_traits<Transport>::native_first;
    pl.tuning_kind = transport_traits<Transport>::tuning_kind;
    if (!pl.tuning_kind.empty()) {
      for (const auto& s : tuned::sources)
        if (s.kind == pl.tuning_kind && s.text) pl.tuned_source = s.text;
      for (const auto& r : tuned::rows) {
        if (r.kind != pl.tuning_kind || p < r.p_lo || p > r.p_hi) continue;
        const auto i = index_of(r.algorithm);
        const auto c = static_cast<std::size_t>(r.coll);
        if (!i || c >= scheduled_count || !pl.runs[*i][c]) continue;  // not a candidate here
        pl.tuned_rows[c].push_back({static_cast<std::size_t>(r.lo), static_cast<std::size_t>(r.hi), *i, &r});
      }
    }
    return pl;
  }

  /// The candidate a call of `c` with `bytes` (its `size_basis`) runs, by the precedence at the
  /// top of this file; with `why`, says which step decided and why (the text of `explain`).
  std::size_t choose(const plan& pl, collective c, std::size_t bytes, std::string* why = nullptr) const;

  /// The α-β rule's pick by name (among the built-in algorithms; see the table above), or an
  /// empty name where the rule has nothing to say: every collective of the table is listed (no
  /// `default`), so a new row is a -Wswitch warning (an error in tutti's own build) until it
  /// is placed here.
  constexpr std::string_view rule(collective c, std::size_t bytes, int p) const noexcept {
    const std::size_t total = bytes * static_cast<std::size_t>(p);
    const bool pow2 = (p & (p - 1)) == 0;
    switch (c) {
      case collective::all_reduce:
        return bytes < small_all_reduce_bytes || pow2 ? "recursive_doubling" : "ring";
      case collective::broadcast:
      case collective::reduce: return p <= 2 || bytes < pipeline_bytes ? "tree" : "ring";
      case collective::gather:
      case collective::scatter: return total < small_total_bytes ? "tree" : "direct";
      case collective::all_gather: return total < small_total_bytes ? "recursive_doubling" : "ring";
      case collective::all_gather_v: return total < small_total_bytes ? "direct" : "ring";
      case collective::reduce_scatter:
      case collective::reduce_scatter_v: return "ring";
      case collective::all_to_all:
      case collective::all_to_all_v:
      case collective::gather_v:
      case collective::scatter_v: return "direct";
      case collective::barrier: return "recursive_doubling";
      case collective::scan:
      case collective::exscan: return p <= 2 || bytes < pipeline_bytes ? "recursive_doubling" : "direct";
      case collective::send_recv:
      case collective::group: return {};
    }
    return {};
  }

  /// Why the rule picks what it picks (the thresholds in the table at the top of this file).
  TUTTI_COLD std::string rule_reason(collective c, std::size_t bytes, int p) const;

  TUTTI_COLD static std::string tuned_reason(const plan& pl, const tuned::row& r);

 private:
  template <std::size_t I, class F>
  decltype(auto) visit_from(std::size_t i, F& f) const {
    if constexpr (I + 1 == candidate_count) {
      return f(std::get<I>(candidates));
    } else {
      if (i == I) return f(std::get<I>(candidates));
      return visit_from<I + 1>(i, f);
    }
  }
};

// automatic_of's longer members, out of the class and not inline, so that tutti::compiled holds
// them for `automatic` (tutti/compiled.hpp) and a separately compiled program compiles them not.

template <class... Candidates>
std::size_t automatic_of<Candidates...>::choose(const plan& pl, collective c, std::size_t bytes, std::string* why) const {
  const auto ci = static_cast<std::size_t>(c);
  for (const auto& r : pl.overrides.per_size[ci])
    if (r.range.contains(bytes)) {
      if (why) *why = "TUTTI_ALGO " + r.text;
      return r.algorithm;
    }
  if (const auto& o = pl.overrides.per_collective[ci]) {
    if (why)
      *why = pl.overrides.explicit_collective[ci]
                 ? "TUTTI_ALGO " + std::string(collective_name(c)) + "=" + std::string(names[*o])
                 : "TUTTI_ALGO " + std::string(names[*o]);
    return *o;
  }
  for (const auto& r : pl.tuned_rows[ci])
    if (r.lo <= bytes && bytes <= r.hi) {
      if (why) *why = tuned_reason(pl, *r.row);
      return r.algorithm;
    }
  if (const auto n = index_of("native"); pl.native_first && n && pl.runs[*n][ci]) {
    if (why) *why = "rule: the transport runs its own collectives on the device -> native";
    return *n;
  }
  if (const auto w = index_of("shared_memory"); w && pl.runs[*w][ci]) {
    if (why) *why = "rule: the transport has shared windows -> shared_memory";
    return *w;
  }
  const std::string_view picked = rule(c, bytes, pl.p);
  if (const auto i = index_of(picked); i && pl.runs[*i][ci] && !explicit_only[*i]) {
    if (why) *why = "rule: " + rule_reason(c, bytes, pl.p);
    return *i;
  }
  for (std::size_t i = 0; i < candidate_count; ++i)
    if (pl.runs[i][ci] && !explicit_only[i]) {
      if (why)
        *why = (picked.empty() ? "no rule for " + std::string(collective_name(c))
                               : "rule: " + std::string(picked) + " is not a candidate here") +
               "; the first candidate with a " + std::string(collective_name(c)) + " schedule";
      return i;
    }
  // Only explicit-only candidates run it: the first of them (the communicator allows the call
  // only where some candidate has the schedule).
  for (std::size_t i = 0; i < candidate_count; ++i)
    if (pl.runs[i][ci]) {
      if (why) *why = "the only candidate with a " + std::string(collective_name(c)) + " schedule here";
      return i;
    }
  return 0;
}

template <class... Candidates>
TUTTI_COLD std::string automatic_of<Candidates...>::rule_reason(collective c, std::size_t bytes, int p) const {
  const std::size_t total = bytes * static_cast<std::size_t>(p);
  const bool pow2 = (p & (p - 1)) == 0;
  const std::string to = " -> " + std::string(rule(c, bytes, p));
  switch (c) {
    case collective::all_reduce:
      if (bytes < small_all_reduce_bytes) return "bytes < " + detail::size_text(small_all_reduce_bytes) + to;
      return "bytes >= " + detail::size_text(small_all_reduce_bytes) + ", " + std::to_string(p) + " ranks " +
             (pow2 ? "a power of two" : "not a power of two") + to;
    case collective::broadcast:
    case collective::reduce:
    case collective::scan:
    case collective::exscan:
      if (p <= 2) return "2 ranks or fewer" + to;
      return (bytes < pipeline_bytes ? "bytes < " : "bytes >= ") + detail::size_text(pipeline_bytes) + to;
    case collective::gather:
    case collective::scatter:
    case collective::all_gather:
    case collective::all_gather_v:
      return (total < small_total_bytes ? "ranks x bytes < " : "ranks x bytes >= ") +
             detail::size_text(small_total_bytes) + to;
    case collective::all_to_all:
    case collective::all_to_all_v:
    case collective::gather_v:
    case collective::scatter_v:
    case collective::reduce_scatter:
    case collective::reduce_scatter_v:
    case collective::barrier: return "always" + to;
    case collective::send_recv:
    case collective::group: break;
  }
  return "no rule";
}

template <class... Candidates>
TUTTI_COLD std::string automatic_of<Candidates...>::tuned_reason(const plan& pl, const tuned::row& r) {
  // the run, shortened to its first two fields ("tutti-bench --tune, <date>")
  std::string src(pl.tuned_source);
  if (const auto c1 = src.find(", "); c1 != std::string::npos)
    if (const auto c2 = src.find(", ", c1 + 2); c2 != std::string::npos) src.resize(c2);
  return "tuned table for " + std::string(pl.tuning_kind) + ", " +
         (r.p_lo == r.p_hi ? std::to_string(r.p_lo) : std::to_string(r.p_lo) + ".." + std::to_string(r.p_hi)) +
         " ranks, " + detail::range_text({static_cast<std::size_t>(r.lo), static_cast<std::size_t>(r.hi)}) +
         (r.lo == 0 && r.hi == tuned::any ? "" : " bytes") + (src.empty() ? std::string() : " (" + src + ")");
}

/// The default: every algorithm tutti ships.
using automatic = automatic_of<ring, tree, recursive_doubling, direct, shared_memory, native>;

}  // namespace tutti::algo

namespace tutti::detail {
/// automatic_of runs a collective wherever one of its candidates does.
template <class... Candidates, collective C, class Transport>
struct has_schedule<algo::automatic_of<Candidates...>, C, Transport>
    : std::bool_constant<(algorithm_for<Candidates, C, Transport> || ...)> {};
}  // namespace tutti::detail

#if defined(TUTTI_DEFINITIONS)
#include "tutti/algorithm/automatic.ipp"
#endif
