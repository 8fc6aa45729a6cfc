/// \file
/// The conformance suite's first part: every collective, the v-collectives included, with every
/// algorithm that has it on the transport, checked element by element against a reference that
/// each rank computes on its own, at counts 0, 1, fewer than the ranks and not divisible by
/// them, with zero counts, one rank holding everything, and a case of 16 MiB.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/core/collective.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/core/dtype.hpp"
#include "tutti/core/float16.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/testing/calls.hpp"
#include "tutti/testing/report.hpp"

namespace tutti::testing {

/// A user struct and a user op on it: "a user op on a user type".
struct vec3 {
  float x, y, z;
  friend bool operator==(const vec3&, const vec3&) = default;
};
struct vec3_max_abs {
  vec3 operator()(vec3 a, vec3 b) const {
    // The larger magnitude; on a tie the larger value, so the op is commutative and associative.
    auto m = [](float u, float v) {
      const float au = u < 0 ? -u : u, av = v < 0 ? -v : v;
      return au != av ? (au < av ? v : u) : (u < v ? v : u);
    };
    return {m(a.x, b.x), m(a.y, b.y), m(a.z, b.z)};
  }
};

/// Deterministic small values for (rank, index): exact in every tested type (bfloat16 included)
/// even after summing over 9 ranks, so references compare with ==.
template <class T>
T value(int rank, std::size_t i) {
  const int v = static_cast<int>((static_cast<std::size_t>(rank) * 7 + i * 13) % 11) - 5;
  if constexpr (std::is_same_v<T, vec3>) return vec3{float(v), float(-v * 2), float(rank) - float(i % 3)};
  // A negative float converted to an unsigned type is undefined; an int wraps, as it should.
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(v);
  else return static_cast<T>(static_cast<float>(v));
}

template <class T>
std::string show(const T& v) {
  if constexpr (std::is_same_v<T, vec3>) {
    std::string s(1, '{');  // appended piece by piece: GCC 12 warns (-Wrestrict) on "{" + ...
    s += std::to_string(v.x);
    s += ',';
    s += std::to_string(v.y);
    s += ',';
    s += std::to_string(v.z);
    s += '}';
    return s;
  } else {
    return std::to_string(static_cast<double>(v));
  }
}

/// One check per comparison; a finding names the first differing element.
template <class T>
void expect_equal(report& rep, int rank, std::span<const T> got, std::span<const T> want, const std::string& what) {
  // Equal bytes are equal elements (a NaN too: the very value the reference computed); the loop
  // below runs where the bytes differ, to find the first element that does (or, for -0.0 against
  // 0.0, none).
  if (got.size() == want.size() && (got.empty() || std::memcmp(got.data(), want.data(), got.size_bytes()) == 0)) {
    rep.check(true, what, rank, std::string());
    return;
  }
  std::size_t bad = got.size() == want.size() ? got.size() : 0;
  // Raw pointers and a hoisted bound: the sanitizer builds run this at -O0, where each
  // vector::size() and operator[] is a call.
  const T* g = got.data();
  const T* w = want.data();
  for (std::size_t i = 0, n = std::min(got.size(), want.size()); i < n; ++i)
    if (!(g[i] == w[i])) {
      bad = i;
      break;
    }
  const bool ok = got.size() == want.size() && bad == got.size();
  rep.check(ok, what, rank,
            ok ? std::string()
               : "first difference at element " + std::to_string(bad) + " of " + std::to_string(got.size()) + " (got " +
                     (bad < got.size() ? show(got[bad]) : "-") + ", want " + (bad < want.size() ? show(want[bad]) : "-") +
                     ")");
}

template <class T>
void expect_equal(report& rep, int rank, const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  expect_equal<T>(rep, rank, std::span<const T>(got), std::span<const T>(want), what);
}

template <class T, class Op, class At>
T fold(int n, const Op& op, At&& at) {
  T acc = at(0);
  for (int r = 1; r < n; ++r) acc = op(acc, at(r));
  return acc;
}

/// Whether algorithm A has collective C on transport Tr (by default: a plain point-to-point one).
template <class A, collective C, class Tr = detail::probe_transport>
constexpr bool has = algorithm_for<A, C, Tr>;

/// A non-commutative op (composition of affine maps x -> a·x + b, applied left to right): for
/// the collectives that reduce in rank order (the scans), whose results must then be exact.
struct affine {
  std::int32_t a, b;
  friend bool operator==(const affine&, const affine&) = default;
};
struct affine_compose {
  affine operator()(affine f, affine g) const { return {g.a * f.a, g.a * f.b + g.b}; }
};
template <>
inline affine value<affine>(int rank, std::size_t i) {
  static constexpr std::int32_t as[3] = {1, -1, 2};
  return {as[(static_cast<std::size_t>(rank) + i) % 3], static_cast<std::int32_t>((static_cast<std::size_t>(rank) * 5 + i * 3) % 7) - 3};
}
template <>
inline std::string show<affine>(const affine& v) {
  std::string s(1, '(');
  s += std::to_string(v.a);
  s += ',';
  s += std::to_string(v.b);
  s += ')';
  return s;
}

/// Whether an op may be given to collective C: non-commutative ones only where the row reduces
/// in rank order; op::avg not there (it has no meaning in a prefix).
template <collective C, class Op>
constexpr bool op_fits() {
  if constexpr (std::is_same_v<Op, affine_compose>) return info(C).ordered;
  else if constexpr (info(C).ordered) return !std::is_same_v<Op, op::avg>;
  else return true;
}

/// A value no input holds, in outputs before a call.
template <class T>
T sentinel() {
  return value<T>(97, 5);
}

/// How a check makes its call with one algorithm: `invoke(comm, d, alg)` calls `C` with the
/// algorithm `alg` points to. The checks' bodies take it instead of the algorithm's type, so that
/// they are compiled once per collective, type and op, not again for every algorithm.
template <collective C, class T, class Op, class Comm>
using invoker = void (*)(Comm&, const desc_of<C, T, typename Comm::memory, Op>&, const void*);
template <collective C, class T, class Op, class A, class Comm>
invoker<C, T, Op, Comm> invoker_for() {
  return [](Comm& comm, const desc_of<C, T, typename Comm::memory, Op>& d, const void* a) {
    comm.template call<C>(d, *static_cast<const A*>(a));
  };
}

/// `check_call`'s body, the algorithm given by `invoke` and `a`.
template <collective C, class T, class Op, class Comm>
void check_call_with(Comm& comm, report& rep, const call_shape& s, const Op& op, invoker<C, T, Op, Comm> invoke,
                     const void* a, const std::string& tag, bool first_only) {
  using M = typename Comm::memory;
  const int me = comm.rank();
  constexpr int salt = static_cast<int>(C) * 3;
  auto input = [](int r, std::size_t i) { return value<T>(r + salt, i); };
  const std::string name = std::string(collective_name(C)) + "(" + tag + ")" +
                           (info(C).rooted ? " root " + std::to_string(s.root) : std::string());
  for (placement pl : {placement::apart, placement::in_place}) {
    if (pl == placement::apart ? !has_apart<C> : !has_in_place<C>) continue;
    auto b = make_buffers<C, T, suite_buffer<T>>(s, me, pl, input, sentinel<T>());
    const std::span<const T> out = result_view<C>(s, me, b, pl);  // (the buffers stay where they are)
    suite_buffer<T> want(out);  // what `out` holds before the call
    const auto in_before = b.in;
    invoke(comm, describe<C, M>(s, me, b, pl, op), a);
    expected_into<C, T>(s, me, std::span<T>(want), input, op);
    const std::string label = name + (pl == placement::in_place && has_apart<C> ? " in place" : "");
    expect_equal<T>(rep, me, out, want, label);
    if (pl == placement::apart && !b.in.empty())
      expect_equal<T>(rep, me, b.in, in_before, label + " leaves its input alone");
    if (first_only) break;
  }
}

/// One call of collective `C` with algorithm `a`, element type T and op `op`, of shape `s`, in
/// every placement the row has (apart; in place; with `first_only`, the first of them), checked
/// element by element against `expected`; an input kept apart must be left alone.
template <collective C, class T, class A, class Op, class Comm>
void check_call(Comm& comm, report& rep, const call_shape& s, const Op& op, const A& a, const std::string& tag,
                bool first_only = false) {
  check_call_with<C, T>(comm, rep, s, op, invoker_for<C, T, Op, A, Comm>(), &a, tag, first_only);
}

/// Every uniform collective algorithm A offers on the communicator's transport with element
/// type T, op `op` and `count` (the call's count: the whole buffer for broadcast, reduce,
/// all_reduce and the scans, the per-rank block elsewhere), every root for the rooted ones.
template <class A, class T, class Op, class Comm>
void check_collectives(Comm& comm, report& rep, std::size_t count, const Op& op, const A& a = {}) {
  using Tr = typename Comm::transport_type;
  const int n = comm.size();
  const std::string tag = std::string(A::name) + " on " + std::to_string(n) + " ranks, count " + std::to_string(count) +
                          ", " + dtype_name(dtype_of<T>()) + " " + std::string(op_traits<Op>::name());
  std::vector<int> roots{0};
  for (int r : {n / 2, n - 1})
    if (r != roots.back()) roots.push_back(r);
  for_each_collective([&](auto k) {
    constexpr collective C = decltype(k)::value;
    if constexpr (info(C).counts != counts_kind::per_rank && has<A, C, Tr> && op_fits<C, Op>()) {
      for (int root : roots) {
        check_call<C, T>(comm, rep, call_shape::uniform(n, count, root), op, a, tag);
        if (!info(C).rooted) break;
      }
    }
  });
}

/// The counts patterns of the v-collectives on n ranks, `scale` elements a rank on average: zeros
/// among them, one rank holding everything, every count zero.
inline std::vector<std::vector<std::size_t>> counts_patterns(int n, std::size_t scale) {
  const auto N = static_cast<std::size_t>(n);
  std::vector<std::vector<std::size_t>> out;
  std::vector<std::size_t> uneven(N), heavy(N, 0), zeros(N, 0), uniform(N, scale);
  for (std::size_t r = 0; r < N; ++r) uneven[r] = r % 3 == 0 ? 0 : (r * scale) % (2 * scale + 1) + 1;
  heavy[N - 1] = scale * N;
  out.push_back(uniform);
  out.push_back(uneven);
  out.push_back(heavy);
  out.push_back(zeros);
  return out;
}

/// Rank i's send_counts[j] of the all_to_all_v patterns: with zeros, and everything to one rank.
inline std::size_t a2a_count(int pattern, int i, int j, int n, std::size_t scale) {
  if (pattern == 0) return scale;
  if (pattern == 1) return static_cast<std::size_t>(i + 2 * j) % 4 == 0 ? 0 : static_cast<std::size_t>(i + 2 * j) % 4 + scale;
  if (pattern == 2) return j == n - 1 ? scale * 2 : 0;
  return 0;
}

/// The shape of a v-collective under counts pattern `pattern` (of `counts_patterns`).
inline call_shape v_shape(collective c, int n, std::size_t scale, int pattern, int root) {
  if (info(c).where == counts_at::own_row) {
    std::vector<std::vector<std::size_t>> rows(static_cast<std::size_t>(n), std::vector<std::size_t>(static_cast<std::size_t>(n)));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        rows[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = a2a_count(pattern, i, j, n, scale);
    return call_shape::rows(std::move(rows));
  }
  return call_shape::same_counts(n, counts_patterns(n, scale)[static_cast<std::size_t>(pattern)], root);
}

/// Every v-collective algorithm A offers, under every counts pattern, with element type T and op
/// `op`; then `all_gather_counts`.
template <class A, class T, class Op, class Comm>
void check_v_collectives(Comm& comm, report& rep, std::size_t scale, const Op& op, const A& a = {}) {
  using Tr = typename Comm::transport_type;
  const int n = comm.size(), me = comm.rank();
  const auto N = static_cast<std::size_t>(n), ME = static_cast<std::size_t>(me);
  std::vector<int> roots{0, n - 1};
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  for (int pattern = 0; pattern < 4; ++pattern) {
    const std::string tag = std::string(A::name) + " on " + std::to_string(n) + " ranks, counts pattern " +
                            std::to_string(pattern) + " (scale " + std::to_string(scale) + "), " +
                            dtype_name(dtype_of<T>()) + " " + std::string(op_traits<Op>::name());
    for_each_collective([&](auto k) {
      constexpr collective C = decltype(k)::value;
      if constexpr (info(C).counts == counts_kind::per_rank && has<A, C, Tr> && op_fits<C, Op>()) {
        for (int root : roots) {
          check_call<C, T>(comm, rep, v_shape(C, n, scale, pattern, root), op, a, tag);
          if (!info(C).rooted) break;
        }
      }
    });
  }
  // The counts no rank knows but its own: all_gather_counts.
  const auto learned = comm.all_gather_counts(ME * 3 + 1);
  std::vector<std::size_t> want(N);
  for (std::size_t r = 0; r < N; ++r) want[r] = r * 3 + 1;
  rep.check(learned == want, "all_gather_counts on " + std::to_string(n) + " ranks", me, "wrong counts");
}

/// Every collective and v-collective with A for the suite's element types and ops at counts 0,
/// 1, size-1 and one not divisible by the size (`full`: four more type/op pairs); the
/// collectives that reduce in rank order with a non-commutative op too.
template <class A, class Comm>
void check_every_type(Comm& comm, report& rep, bool full = true) {
  const auto n = static_cast<std::size_t>(comm.size());
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, 3 * n + 2}) {
    check_collectives<A, std::int32_t>(comm, rep, count, op::sum{});
    check_collectives<A, float>(comm, rep, count, op::max{});
    check_collectives<A, bfloat16>(comm, rep, count, op::sum{});
    check_collectives<A, vec3>(comm, rep, count, vec3_max_abs{});
    check_collectives<A, affine>(comm, rep, count, affine_compose{});
    if (full) {
      check_collectives<A, std::int32_t>(comm, rep, count, op::max{});
      check_collectives<A, float>(comm, rep, count, op::sum{});
      check_collectives<A, double>(comm, rep, count, op::sum{});
      check_collectives<A, bfloat16>(comm, rep, count, op::max{});
    }
  }
  check_v_collectives<A, std::int32_t>(comm, rep, 5, op::sum{});
  check_v_collectives<A, float>(comm, rep, 3 * n + 2, op::max{});
  check_v_collectives<A, vec3>(comm, rep, 2, vec3_max_abs{});
}

/// The v-collectives with 16 MiB and more in all (large enough for the paths that read peers
/// where their data lies, and for pieces and chunks), with algorithm A; and the scans at 16 MiB.
/// One placement each (apart where the call has it): the in-place forms take the same paths,
/// and are checked at every other size.
template <class A, class Comm>
void check_large_v(Comm& comm, report& rep, const A& a = {}) {
  using Tr = typename Comm::transport_type;
  const int n = comm.size();
  const auto N = static_cast<std::size_t>(n);
  const std::size_t total = std::size_t{4} << 20;  // floats: 16 MiB
  std::vector<std::size_t> counts(N);
  std::size_t given = 0;
  for (std::size_t r = 0; r + 1 < N; ++r) given += counts[r] = total / N / 2 * (r % 2 + 1);
  counts[N - 1] = total - given;
  const std::string tag = std::string(A::name) + " on " + std::to_string(n) + " ranks, 16 MiB of float";
  for_each_collective([&](auto k) {
    constexpr collective C = decltype(k)::value;
    if constexpr (has<A, C, Tr>) {
      if constexpr (info(C).where == counts_at::own_row) {  // every rank sends rank j counts[j] / n elements
        std::vector<std::size_t> row(N);
        for (std::size_t j = 0; j < N; ++j) row[j] = counts[j] / N;
        check_call<C, float>(comm, rep, call_shape::same_counts(n, row), op::sum{}, a, tag, true);
      } else if constexpr (info(C).counts == counts_kind::per_rank) {
        check_call<C, float>(comm, rep, call_shape::same_counts(n, counts, n - 1), op::sum{}, a, tag, true);
      } else if constexpr (info(C).ordered) {
        check_call<C, std::int32_t>(comm, rep, call_shape::uniform(n, total), op::sum{}, a, tag, true);
      }
    }
  });
}

}  // namespace tutti::testing
