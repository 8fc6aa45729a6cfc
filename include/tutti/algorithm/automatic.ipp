/// \file
/// Definitions for tutti/algorithm/automatic.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include "tutti/algorithm/automatic.hpp"

namespace tutti::algo {

namespace detail {

TUTTI_COLD TUTTI_DECL algo_overrides parse_algo_overrides(std::string_view text,
                                                       std::span<const std::string_view> names,
                                                       std::span<const std::string_view> needs,
                                                       std::span<const std::array<bool, scheduled_count>> runs) {
  algo_overrides t;
  const std::size_t candidate_count = names.size();
  auto index_of = [&](std::string_view n) -> std::optional<std::size_t> {
    for (std::size_t i = 0; i < candidate_count; ++i)
      if (names[i] == n) return i;
    return std::nullopt;
  };
  const std::string whole(text);
  // "'text'", built by appending: GCC 12 warns (-Wrestrict, a false positive) on "'" + string.
  auto quoted = [](std::string_view x) {
    std::string q(1, '\'');
    q += x;
    q += '\'';
    return q;
  };
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  auto fail = [&](const std::string& msg) -> void { throw config_error("TUTTI_ALGO=" + whole + ": " + msg); };
  auto candidate_list = [&] {
    std::string s;
    for (std::size_t i = 0; i < candidate_count; ++i)
      s += (i == 0 ? "" : i + 1 == candidate_count ? " or " : ", ") + std::string(names[i]);
    return s;
  };
  auto runs_any = [&](std::size_t a) {
    for (std::size_t c = 0; c < scheduled_count; ++c)
      if (runs[a][c]) return true;
    return false;
  };
  auto algo_named = [&](std::string_view n) -> std::size_t {
    if (const auto i = index_of(n)) {
      if (!runs_any(*i)) {
        if (!needs[*i].empty())
          fail(quoted(n) + " needs " + std::string(needs[*i]) + "; this communicator's transport has none");
        fail(quoted(n) + " has no schedule on this communicator's transport");
      }
      return *i;
    }
    if (n == "automatic") fail("'automatic' is the default; leave the collective out instead");
    fail("unknown algorithm '" + std::string(n) + "' (expected " + candidate_list() + ")");
    return 0;
  };
  auto collective_named = [&](std::string_view n) -> collective {
    if (const auto c = tutti::collective_named(n)) return *c;
    fail("unknown collective '" + std::string(n) + "' (expected " + std::string(scheduled_names()) + ")");
    return collective::barrier;
  };
  constexpr auto top = static_cast<std::size_t>(-1);
  // N := digits [K|M|G]
  auto size_named = [&](std::string_view n, std::string_view in) -> std::size_t {
    n = trim(n);
    std::size_t i = 0, v = 0;
    const std::string bad = quoted(n) + " in '" + std::string(in) +
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
      if (n == 0) fail(quoted(in) + ": no size is < 0");
      out.hi = n - 1;
    } else if (r.starts_with(">")) {
      const auto n = size_named(r.substr(1), in);
      if (n == top) fail(quoted(in) + ": no size is above that");
      out.lo = n + 1;
    } else if (const auto dots = r.find(".."); dots != std::string_view::npos) {
      out.lo = size_named(r.substr(0, dots), in);
      out.hi = size_named(r.substr(dots + 2), in);
      if (out.lo > out.hi) fail(quoted(in) + ": the range " + std::string(r) + " is empty (A..B needs A <= B)");
    } else {
      fail(quoted(in) + ": '" + std::string(r) + "' is not a size range (expected <=N, <N, >=N, >N or A..B)");
    }
    return out;
  };
  std::array<bool, scheduled_count> named{};
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
      if (t.bare) fail(quoted(item) + ": only one bare algorithm name is allowed (the default for every collective)");
      if (!first)
        fail(quoted(item) + ": a bare algorithm name (the default for every collective) must come first; "
             "after collective=algorithm, give each further algorithm a range (algorithm@range)");
      t.bare = algo_named(item);
      first = false;
      if (comma == std::string_view::npos) break;
      text = text.substr(comma + 1);
      continue;
    } else if (current < 0) {
      fail(quoted(item) + ": a size range needs a collective (write all_reduce=" + std::string(item) + ")");
    }
    first = false;
    const auto c = static_cast<collective>(current);
    const auto ci = static_cast<std::size_t>(c);
    const auto at = spec.find('@');
    const std::size_t a = algo_named(trim(spec.substr(0, at)));
    if (!runs[a][ci])
      fail(std::string(names[a]) + " has no " + std::string(collective_name(c)) + " schedule" +
           (needs[a].empty() ? std::string() : " here (it needs " + std::string(needs[a]) + ")"));
    if (at == std::string_view::npos) {
      if (!t.per_size[ci].empty() || t.per_collective[ci])
        fail(quoted(item) + ": " + std::string(collective_name(c)) +
             " already has an algorithm; give every algorithm of a list a range (alg@range)");
      t.per_collective[ci] = a;
      t.explicit_collective[ci] = true;
    } else {
      if (t.per_collective[ci])
        fail(quoted(item) + ": " + std::string(collective_name(c)) + " already has an algorithm for every size");
      if (info(c).size == size_basis::unknown || info(c).size == size_basis::none)
        fail(quoted(item) + ": " + std::string(collective_name(c)) +
             " takes no size range (no size of it is known on every rank); name its algorithm without one");
      const size_range r = range_named(spec.substr(at + 1), item);
      for (const auto& o : t.per_size[ci])
        if (r.lo <= o.range.hi && o.range.lo <= r.hi)
          fail(quoted(item) + " overlaps '" + o.text + "' (" + std::string(collective_name(c)) +
               " ranges must not overlap)");
      t.per_size[ci].push_back({r, a, std::string(collective_name(c)) + "=" + std::string(names[a]) + "@" +
                                          std::string(trim(spec.substr(at + 1)))});
    }
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  if (t.bare)
    for (std::size_t c = 0; c < scheduled_count; ++c)
      if (!t.per_collective[c] && runs[*t.bare][c]) t.per_collective[c] = t.bare;
  return t;
}

TUTTI_COLD TUTTI_DECL std::string size_text(std::size_t b) {
  if (b == static_cast<std::size_t>(-1)) return "max";
  for (auto [shift, suffix] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}})
    if (b != 0 && b % (std::size_t{1} << shift) == 0) return std::to_string(b >> shift) + suffix;
  return std::to_string(b);
}

TUTTI_COLD TUTTI_DECL std::string range_text(size_range r) {
  constexpr auto top = static_cast<std::size_t>(-1);
  if (r.lo == 0 && r.hi == top) return "any size";
  if (r.hi == top) return ">=" + size_text(r.lo);
  if (r.lo == 0) return "<=" + size_text(r.hi);
  return size_text(r.lo) + ".." + size_text(r.hi);
}

}  // namespace detail

}  // namespace tutti::algo
