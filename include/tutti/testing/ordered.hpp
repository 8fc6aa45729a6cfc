/// \file
/// Part 5 of the conformance suite: reproducible reductions. `op::ordered<Op>` must give every
/// element bitwise the serial left fold over the ranks in rank order, `((x0 ∘ x1) ∘ x2) ∘ …`
/// (16-bit floats accumulated in float and rounded once), with every algorithm, in place and
/// out of place, for reduce, all_reduce, reduce_scatter, reduce_scatter_v and the scans, at
/// sizes on both sides of the gather/reduce-scatter switch, fused and unfused, on data of mixed
/// magnitude with signed zeros, subnormals and infinities; and a user op that neither commutes
/// nor associates. `op::reproducible_sum` and `binned<T>` buffers: each element's bits depend only
/// on its multiset of values, however they are dealt to the ranks. A negative control shows that plain `op::sum` does depend on the algorithm
/// at three ranks or more (so that these checks could fail).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <limits>
#include <string>
#include <vector>

#include "tutti/algorithm/automatic.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/float16.hpp"
#include "tutti/core/view.hpp"
#include "tutti/group/request.hpp"
#include "tutti/op/binned.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/testing/collectives.hpp"
#include "tutti/testing/mismatch.hpp"
#include "tutti/testing/report.hpp"

namespace tutti::testing {

namespace ordered_detail {

/// A op that neither commutes nor associates: a·3/4 + b.
struct leaky_sum {
  template <class T>
  T operator()(const T& a, const T& b) const {
    return static_cast<T>(a * static_cast<T>(0.75) + b);
  }
};

/// A user type whose `+` neither commutes nor associates (2a + b): op::ordered<op::sum> must
/// fold it in rank order at every rank count, two ranks included.
struct skew {
  float v;
  skew operator+(const skew& o) const { return {2 * v + o.v}; }
};

inline std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  return x ^ (x >> 33);
}

/// Rank r's element i: mostly values of mixed magnitude (2^-40..2^40), with signed zeros,
/// subnormals, values near the top of the range and a rare infinity.
template <class T>
T value(int r, std::size_t i, std::uint64_t salt) {
  const std::uint64_t h = mix((static_cast<std::uint64_t>(r) << 40) ^ (i * 0x9e3779b97f4a7c15ull) ^ salt);
  const double unit = static_cast<double>(h >> 11) * 0x1p-53 * 2 - 1;  // [-1, 1)
  const unsigned kind = static_cast<unsigned>(h % 1000);
  double v;
  if (kind < 20) v = (kind & 1) ? -0.0 : 0.0;
  else if (kind < 40) v = unit * static_cast<double>(std::numeric_limits<float>::denorm_min()) * 1000;
  else if (kind < 50) v = unit * 0x1p100;
  else if (kind == 50) v = (h >> 20) & 1 ? -HUGE_VAL : HUGE_VAL;
  else v = std::ldexp(unit, static_cast<int>((h >> 13) % 81) - 40);
  if constexpr (std::is_same_v<T, skew>) return skew{static_cast<float>(v)};
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<std::int64_t>(unit * 1000));
  else if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <class T>
std::vector<T> values(int r, std::size_t n, std::uint64_t salt) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(r, i, salt);
  return v;
}

/// The serial reference: element i folded over ranks [first, last) in rank order.
template <class T, class Op>
T serial(int first, int last, std::size_t i, std::uint64_t salt, const Op& op) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    float acc = static_cast<float>(value<T>(first, i, salt));
    for (int r = first + 1; r < last; ++r) acc = op(acc, static_cast<float>(value<T>(r, i, salt)));
    return T(acc);
  } else {
    return fold<T>(last - first, op, [&](int r) { return value<T>(first + r, i, salt); });
  }
}

template <class T>
bool same_bits(const T* a, const T* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(T)) == 0;
}

/// "first difference at element i (got bits, want bits)", or empty.
template <class T>
std::string difference(const T* got, const T* want, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(got + i, want + i, sizeof(T)) == 0) continue;
    auto bits = [](const T& x) {
      std::uint64_t b = 0;
      std::memcpy(&b, &x, sizeof(T) < 8 ? sizeof(T) : 8);
      char s[24];
      std::snprintf(s, sizeof s, "0x%llx", static_cast<unsigned long long>(b));
      return std::string(s);
    };
    return "element " + std::to_string(i) + " of " + std::to_string(n) + " is " + bits(got[i]) + ", the serial fold " +
           bits(want[i]);
  }
  return {};
}

}  // namespace ordered_detail

/// Every reducing collective of `A` with `op::ordered<Op>` on elements `T`, `n` elements
/// (reduce_scatter: about n / p per rank), against the serial fold, bitwise (`Every` false:
/// all_reduce alone).
template <class A, class T, bool Every = true, class Op, class Comm>
void check_ordered_calls(Comm& comm, report& rep, std::size_t n, const Op& inner, const A& a = {}) {
  using namespace ordered_detail;
  using Tr = typename Comm::transport_type;
  const int p = comm.size(), me = comm.rank();
  const auto P = static_cast<std::size_t>(p);
  const op::ordered<Op> op{inner};
  const std::uint64_t salt = n * 131 + sizeof(T);
  const std::string tag = "ordered " + std::string(A::name) + " on " + std::to_string(p) + " ranks, " +
                          std::to_string(n) + " x " + dtype_name(dtype_of<T>());
  std::vector<T> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = serial<T>(0, p, i, salt, inner);
  auto expect = [&](const std::vector<T>& got, const T* ref, const std::string& what) {
    const std::string d = difference(got.data(), ref, got.size());
    rep.check(d.empty(), tag + ": " + what, me, d);
  };
  const auto mine = values<T>(me, n, salt);
  if constexpr (has<A, collective::all_reduce, Tr>) {
    auto v = mine;
    comm.all_reduce(view(v), op, a);
    expect(v, want.data(), "all_reduce in place");
    std::vector<T> out(n);
    comm.all_reduce(view(std::as_const(mine)), view(out), op, a);
    expect(out, want.data(), "all_reduce out of place");
  }
  if constexpr (!Every) return;
  if constexpr (has<A, collective::reduce, Tr>) {
    const int root = p - 1;
    auto v = mine;
    comm.reduce(view(v), root, op, a);
    expect(v, me == root ? want.data() : mine.data(), me == root ? "reduce at the root" : "reduce leaves a non-root alone");
  }
  if constexpr (has<A, collective::reduce_scatter, Tr>) {
    const std::size_t m = n / P;
    std::vector<T> in(P * m), out(m), ref(m);
    for (std::size_t i = 0; i < P * m; ++i) in[i] = value<T>(me, i, salt);
    for (std::size_t i = 0; i < m; ++i) ref[i] = serial<T>(0, p, static_cast<std::size_t>(me) * m + i, salt, inner);
    comm.reduce_scatter(view(std::as_const(in)), view(out), op, a);
    expect(out, ref.data(), "reduce_scatter");
  }
  if constexpr (has<A, collective::reduce_scatter_v, Tr>) {
    // Uneven blocks, one of them empty: rank r gets a share that grows with r.
    std::vector<std::size_t> counts(P);
    std::size_t given = 0;
    for (std::size_t r = 0; r + 1 < P; ++r) given += counts[r] = r == 1 ? 0 : n * (r + 1) / (P * (P + 1) / 2);
    counts[P - 1] = n - given;
    std::size_t at = 0;
    for (int r = 0; r < me; ++r) at += counts[static_cast<std::size_t>(r)];
    std::vector<T> out(counts[static_cast<std::size_t>(me)]);
    comm.reduce_scatter_v(view(std::as_const(mine)), view(out), counts, op, a);
    expect(out, want.data() + at, "reduce_scatter_v");
  }
  if constexpr (!std::is_same_v<T, float16> && !std::is_same_v<T, bfloat16> && has<A, collective::scan, Tr> &&
                has<A, collective::exscan, Tr>) {
    // The scans: rank r's prefix of ranks 0..r (exscan: 0..r-1), whatever the algorithm.
    std::vector<T> out(n), ref(n);
    for (std::size_t i = 0; i < n; ++i) ref[i] = serial<T>(0, me + 1, i, salt, inner);
    comm.scan(view(std::as_const(mine)), view(out), op, a);
    expect(out, ref.data(), "scan");
    if (me > 0) {
      for (std::size_t i = 0; i < n; ++i) ref[i] = serial<T>(0, me, i, salt, inner);
      comm.exscan(view(std::as_const(mine)), view(out), op, a);
      expect(out, ref.data(), "exscan");
    } else {
      comm.exscan(view(std::as_const(mine)), view(out), op, a);
    }
  }
}

/// `binned<T>` buffers and `op::reproducible_sum` with algorithm `A`: the bits depend only on
/// each element's multiset of values. Binned: seven contributions per element are dealt to the
/// ranks (a different deal per element, so the split is random and differs with the rank
/// count), and the result must equal `reproducible_sum` of the seven, computed here on one rank.
/// reproducible_sum: one contribution per rank, in two orders, equal to `reproducible_sum` of
/// the p.
template <class A, class T, class Comm>
void check_reproducible_sums(Comm& comm, report& rep, std::size_t n, const A& a = {}) {
  using namespace ordered_detail;
  using Tr = typename Comm::transport_type;
  constexpr int parts = 7;
  const int p = comm.size(), me = comm.rank();
  const std::uint64_t salt = 0x5eed + n + sizeof(T);
  const std::string tag = "reproducible " + std::string(A::name) + " on " + std::to_string(p) + " ranks, " +
                          std::to_string(n) + " x " + dtype_name(dtype_of<T>());
  auto owner = [&](int j, std::size_t i) { return static_cast<int>(mix(salt ^ (i << 8) ^ static_cast<std::uint64_t>(j)) % static_cast<std::uint64_t>(p)); };
  std::vector<T> want(n);
  for (std::size_t i = 0; i < n; ++i) {
    T col[parts];
    for (int j = 0; j < parts; ++j) col[j] = value<T>(j, i, salt);
    want[i] = reproducible_sum(std::span<const T>(col, parts));
  }
  if constexpr (has<A, collective::all_reduce, Tr>) {
    // binned<T> accumulators, merged by a plain op::sum all_reduce.
    std::vector<binned<T>> acc(n);
    for (std::size_t i = 0; i < n; ++i)
      for (int j = 0; j < parts; ++j)
        if (owner(j, i) == me) acc[i].add(value<T>(j, i, salt));
    comm.all_reduce(view(acc), op::sum{}, a);
    std::vector<T> got(n);
    for (std::size_t i = 0; i < n; ++i) got[i] = acc[i].value();
    rep.check(same_bits(got.data(), want.data(), n), tag + ": binned all_reduce", me, difference(got.data(), want.data(), n));
  }
  // One contribution per rank: op::reproducible_sum on plain buffers, the ranks' values in two
  // orders (rank r holds contribution r, then p-1-r): the same bits both times.
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<T> col(static_cast<std::size_t>(p));
    for (int j = 0; j < p; ++j) col[static_cast<std::size_t>(j)] = value<T>(j, i, salt);
    want[i] = reproducible_sum(std::span<const T>(col));
  }
  for (const bool reversed : {false, true}) {
    const int j = reversed ? p - 1 - me : me;
    const auto mine = values<T>(j, n, salt);
    const std::string how = reversed ? " (ranks reversed)" : "";
    if constexpr (has<A, collective::all_reduce, Tr>) {
      std::vector<T> out(n);
      comm.all_reduce(view(std::as_const(mine)), view(out), op::reproducible_sum{}, a);
      rep.check(same_bits(out.data(), want.data(), n), tag + ": all_reduce" + how, me, difference(out.data(), want.data(), n));
    }
    if constexpr (has<A, collective::reduce_scatter_v, Tr>) {
      std::vector<std::size_t> counts(static_cast<std::size_t>(p), n / static_cast<std::size_t>(p));
      counts.back() += n % static_cast<std::size_t>(p);
      std::vector<T> out(counts[static_cast<std::size_t>(me)]);
      comm.reduce_scatter_v(view(mine), view(out), counts, op::reproducible_sum{}, a);
      const std::size_t at = n / static_cast<std::size_t>(p) * static_cast<std::size_t>(me);
      rep.check(same_bits(out.data(), want.data() + at, out.size()), tag + ": reduce_scatter_v" + how, me,
                difference(out.data(), want.data() + at, out.size()));
    }
  }
}

/// A fused batch of `op::ordered<op::sum>` all_reduces of float: each part bitwise its serial
/// fold, at any rank count.
template <class Comm>
void check_ordered_fused(Comm& comm, report& rep) {
  using namespace ordered_detail;
  const int p = comm.size(), me = comm.rank();
  const std::string tag = "ordered, a fused batch on " + std::to_string(p) + " ranks";
  std::vector<std::vector<float>> parts;
  std::vector<request> r;
  for (std::size_t k = 0; k < 24; ++k) parts.push_back(values<float>(me, 1 + (k * 389) % 3000, 7000 + k));
  {
    auto batch = comm.fuse();
    for (auto& v : parts) r.push_back(comm.iall_reduce(view(v), op::ordered_sum{}));
  }
  wait_all(std::span<request>(r));
  for (std::size_t k = 0; k < parts.size(); ++k) {
    std::vector<float> want(parts[k].size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = serial<float>(0, p, i, 7000 + k, op::sum{});
    const std::string d = difference(parts[k].data(), want.data(), want.size());
    rep.check(d.empty(), tag + ", part " + std::to_string(k), me, d);
  }
  // op::reproducible_sum fused: each part the unfused call's bits (one rank included: -0.0 is
  // +0.0 there too).
  parts.clear();
  r.clear();
  for (std::size_t k = 0; k < 6; ++k) parts.push_back(values<float>(me, 1 + (k * 701) % 3000, 8000 + k));
  auto unfused = parts;
  for (auto& v : unfused) comm.all_reduce(view(v), op::reproducible_sum{});
  {
    auto batch = comm.fuse();
    for (auto& v : parts) r.push_back(comm.iall_reduce(view(v), op::reproducible_sum{}));
  }
  wait_all(std::span<request>(r));
  for (std::size_t k = 0; k < parts.size(); ++k) {
    const std::string d = difference(parts[k].data(), unfused[k].data(), parts[k].size());
    rep.check(d.empty(), "reproducible_sum, a fused batch on " + std::to_string(p) + " ranks, part " + std::to_string(k), me, d);
  }
}

/// The negative control: at three ranks or more, plain `op::sum` on this data gives other bits
/// than the serial fold with at least one of ring, tree, recursive doubling and direct.
template <class Comm>
void check_plain_sums_differ(Comm& comm, report& rep) {
  using namespace ordered_detail;
  using Tr = typename Comm::transport_type;
  const int p = comm.size(), me = comm.rank();
  if (p < 3) return;
  const std::size_t n = 1001;
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = serial<float>(0, p, i, 99, op::sum{});
  int differ = 0;
  each_type<std::tuple<algo::ring, algo::tree, algo::recursive_doubling, algo::direct>>([&](auto a) {
    if constexpr (has<decltype(a), collective::all_reduce, Tr>) {
      auto v = values<float>(me, n, 99);
      comm.all_reduce(view(v), op::sum{}, a);
      differ += !same_bits(v.data(), want.data(), n);
    }
  });
  rep.check(differ > 0, "plain sums on " + std::to_string(p) + " ranks", me,
            "every algorithm's plain op::sum gave the serial fold's bits: the data cannot tell orders apart");
}

/// Part 5 with every algorithm of `Algorithms` (a std::tuple of algorithm types); `large`: the
/// 1 and 16 MiB all_reduces too.
template <class Algorithms, class Comm>
void check_ordered(Comm& comm, report& rep, bool large = true) {
  const int p = comm.size();
  // 1001 floats: the gathering path (p·n at most 64 KiB); 20000: the blocks' path. Every
  // algorithm with float sums; a user op and the other element types with automatic only (the
  // fold does not depend on the algorithm, only the movement does).
  const std::size_t sizes[] = {2, 1001, 20000};
  each_type<Algorithms>([&](auto a) {
    using A = decltype(a);
    for (std::size_t n : sizes) check_ordered_calls<A, float>(comm, rep, n, op::sum{});
    for (std::size_t n : sizes) check_reproducible_sums<A, float>(comm, rep, n);
    check_ordered_calls<A, ordered_detail::skew, false>(comm, rep, 1001, op::sum{});
  });
  for (std::size_t n : sizes) check_reproducible_sums<algo::automatic, double>(comm, rep, n);
  for (std::size_t n : sizes) check_ordered_calls<algo::automatic, float>(comm, rep, n, ordered_detail::leaky_sum{});
  for (std::size_t n : sizes) check_ordered_calls<algo::automatic, double, false>(comm, rep, n, op::sum{});
  for (std::size_t n : sizes) check_ordered_calls<algo::automatic, bfloat16, false>(comm, rep, n, op::sum{});
  check_ordered_calls<algo::automatic, float16, false>(comm, rep, 1001, op::sum{});
  check_ordered_calls<algo::automatic, std::int32_t, false>(comm, rep, 1001, op::sum{});
  // 1 MiB and 16 MiB of float, automatic's choice.
  for (std::size_t n : {std::size_t{1} << 18, std::size_t{1} << 22}) {
    if (!large) break;
    using namespace ordered_detail;
    const int me = comm.rank();
    auto v = values<float>(me, n, n);
    comm.all_reduce(view(v), op::ordered_sum{});
    std::vector<float> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = serial<float>(0, p, i, n, op::sum{});
    rep.check(same_bits(v.data(), want.data(), n), "ordered all_reduce of " + std::to_string(n * 4) + " bytes on " +
              std::to_string(p) + " ranks", me, difference(v.data(), want.data(), n));
  }
  if (large) {
    // 4 MiB: over shm past the single-copy threshold, where peers' pieces are read into staging.
    using namespace ordered_detail;
    const std::size_t n = std::size_t{1} << 20;
    const int me = comm.rank();
    auto v = values<float>(me, n, 4242);
    comm.all_reduce(view(v), op::reproducible_sum{});
    std::vector<float> want(n), col(static_cast<std::size_t>(p));
    for (std::size_t i = 0; i < n; ++i) {
      for (int r = 0; r < p; ++r) col[static_cast<std::size_t>(r)] = value<float>(r, i, 4242);
      want[i] = reproducible_sum(std::span<const float>(col));
    }
    rep.check(same_bits(v.data(), want.data(), n), "reproducible_sum all_reduce of 4 MiB on " + std::to_string(p) + " ranks",
              me, difference(v.data(), want.data(), n));
  }
  check_ordered_fused(comm, rep);
  check_plain_sums_differ(comm, rep);
}

}  // namespace tutti::testing
