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
/// `TUTTI_ALGO` overrides the rule: either one algorithm name, used for every collective it
/// has a schedule for (`TUTTI_ALGO=ring`), or a comma-separated list of `collective=algorithm`
/// (`TUTTI_ALGO=all_reduce=ring,broadcast=tree`). Names are checked strictly: an unknown name,
/// or an algorithm without a schedule for the named collective, raises `config_error`.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/algorithm/native.hpp"
#include "tutti/algorithm/recursive_doubling.hpp"
#include "tutti/algorithm/shared_memory.hpp"
#include "tutti/algorithm/ring.hpp"
#include "tutti/algorithm/tree.hpp"
#include "tutti/core/error.hpp"

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

  /// A `TUTTI_ALGO` value, parsed.
  struct override_table {
    std::array<std::optional<choice>, 9> per_collective{};
    static override_table parse(std::string_view text);
  };

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

  /// The rule, unless `table` names an algorithm for this collective; `windows`: the
  /// transport offers shared windows.
  choice choose(collective c, std::size_t bytes, int p, const override_table& table, bool windows) const noexcept {
    if (const auto& o = table.per_collective[static_cast<std::size_t>(c)]) return *o;
    if (windows) return choice::shared_memory;
    return choose(c, bytes, p);
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
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  auto algo_named = [&](std::string_view n) -> choice {
    for (int i = 0; i < 6; ++i)
      if (choice_name(static_cast<choice>(i)) == n) return static_cast<choice>(i);
    if (n == "automatic") throw config_error("TUTTI_ALGO: 'automatic' is the default; leave the collective out instead");
    throw config_error("TUTTI_ALGO: unknown algorithm '" + std::string(n) +
                       "' (expected ring, tree, recursive_doubling, direct, shared_memory or native)");
  };
  auto collective_named = [&](std::string_view n) -> collective {
    for (int i = 0; i < 9; ++i)
      if (collective_name(static_cast<collective>(i)) == n) return static_cast<collective>(i);
    throw config_error("TUTTI_ALGO: unknown collective '" + std::string(n) +
                       "' (expected broadcast, reduce, all_reduce, gather, all_gather, scatter, "
                       "all_to_all, reduce_scatter or barrier)");
  };
  text = trim(text);
  if (text.empty()) return t;
  if (text.find('=') == std::string_view::npos) {  // one name for everything it can do
    const choice a = algo_named(text);
    for (int c = 0; c < 9; ++c)
      if (supports(a, static_cast<collective>(c))) t.per_collective[static_cast<std::size_t>(c)] = a;
    return t;
  }
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      throw config_error("TUTTI_ALGO: '" + std::string(item) +
                         "' is not collective=algorithm (a list must name each collective)");
    const collective c = collective_named(trim(item.substr(0, eq)));
    const choice a = algo_named(trim(item.substr(eq + 1)));
    if (!supports(a, c))
      throw config_error("TUTTI_ALGO: " + std::string(choice_name(a)) + " has no " +
                         std::string(collective_name(c)) + " schedule");
    if (t.per_collective[static_cast<std::size_t>(c)])
      throw config_error("TUTTI_ALGO: " + std::string(collective_name(c)) + " is named twice");
    t.per_collective[static_cast<std::size_t>(c)] = a;
  }
  return t;
}

static_assert(algorithm<automatic>);

}  // namespace tutti::algo
