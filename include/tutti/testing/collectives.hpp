/// \file
/// The conformance suite's first part: every collective, the v-collectives included, with every
/// algorithm that has it on the transport, checked element by element against a reference that
/// each rank computes on its own, at counts 0, 1, fewer than the ranks and not divisible by
/// them, with zero counts, one rank holding everything, and a case of 16 MiB.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
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
void expect_equal(report& rep, int rank, const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  std::size_t bad = got.size() == want.size() ? got.size() : 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i)
    if (!(got[i] == want[i])) {
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

template <class T, class Op, class At>
T fold(int n, const Op& op, At&& at) {
  T acc = at(0);
  for (int r = 1; r < n; ++r) acc = op(acc, at(r));
  return acc;
}

/// Whether algorithm A has collective C on transport Tr (by default: a plain point-to-point one).
template <class A, collective C, class Tr = detail::probe_transport>
constexpr bool has = algorithm_for<A, C, Tr>;

/// Runs every collective algorithm A offers on the communicator's transport with element type T,
/// op `op`, and `count` (the whole buffer for broadcast/reduce/all_reduce, the per-rank block
/// elsewhere), and checks every result.
template <class A, class T, class Op, class Comm>
void check_collectives(Comm& comm, report& rep, std::size_t count, const Op& op, const A& a = {}) {
  using Tr = typename Comm::transport_type;
  const int n = comm.size(), me = comm.rank();
  const auto N = static_cast<std::size_t>(n);
  const std::string tag = std::string(A::name) + " on " + std::to_string(n) + " ranks, count " + std::to_string(count) +
                          ", " + dtype_name(dtype_of<T>()) + " " + std::string(op_traits<Op>::name());
  auto mine = [&](std::size_t c, int salt = 0) {
    std::vector<T> v(c);
    for (std::size_t i = 0; i < c; ++i) v[i] = value<T>(me + salt, i);
    return v;
  };
  auto reduced = [&](std::size_t c, std::size_t offset = 0) {
    std::vector<T> v(c);
    for (std::size_t i = 0; i < c; ++i) v[i] = fold<T>(n, op, [&](int r) { return value<T>(r, offset + i); });
    return v;
  };
  std::vector<int> roots{0, n / 2, n - 1};
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());

  if constexpr (has<A, collective::broadcast, Tr>)
    for (int root : roots) {
      auto buf = mine(count);
      comm.broadcast(view(buf), root, a);
      std::vector<T> want(count);
      for (std::size_t i = 0; i < count; ++i) want[i] = value<T>(root, i);
      expect_equal(rep, me, buf, want, "broadcast(" + tag + ") root " + std::to_string(root));
    }
  if constexpr (has<A, collective::reduce, Tr>)
    for (int root : roots) {
      auto buf = mine(count);
      comm.reduce(view(buf), root, op, a);
      expect_equal(rep, me, buf, me == root ? reduced(count) : mine(count), "reduce(" + tag + ") root " + std::to_string(root));
    }
  if constexpr (has<A, collective::all_reduce, Tr>) {
    auto buf = mine(count);
    comm.all_reduce(view(buf), op, a);
    expect_equal(rep, me, buf, reduced(count), "all_reduce(" + tag + ") in place");
    const auto in = mine(count);
    std::vector<T> out(count);
    comm.all_reduce(view(in), view(out), op, a);
    expect_equal(rep, me, out, reduced(count), "all_reduce(" + tag + ") out of place");
    expect_equal(rep, me, in, mine(count), "all_reduce(" + tag + ") leaves its input alone");
  }
  if constexpr (has<A, collective::gather, Tr>)
    for (int root : roots) {
      const auto in = mine(count);
      std::vector<T> out(me == root ? count * N : 0);
      comm.gather(view(in), view(out), root, a);
      if (me == root) {
        std::vector<T> want;
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(r, i));
        expect_equal(rep, me, out, want, "gather(" + tag + ") root " + std::to_string(root));
      }
    }
  if constexpr (has<A, collective::all_gather, Tr>) {
    const auto in = mine(count);
    std::vector<T> out(count * N), want;
    comm.all_gather(view(in), view(out), a);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(r, i));
    expect_equal(rep, me, out, want, "all_gather(" + tag + ")");
  }
  if constexpr (has<A, collective::scatter, Tr>)
    for (int root : roots) {
      std::vector<T> in;
      if (me == root)
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < count; ++i) in.push_back(value<T>(r, i + 17 * static_cast<std::size_t>(root)));
      std::vector<T> out(count), want(count);
      comm.scatter(view(in), view(out), root, a);
      for (std::size_t i = 0; i < count; ++i) want[i] = value<T>(me, i + 17 * static_cast<std::size_t>(root));
      expect_equal(rep, me, out, want, "scatter(" + tag + ") root " + std::to_string(root));
    }
  if constexpr (has<A, collective::all_to_all, Tr>) {
    std::vector<T> in, out(count * N), want;
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i) in.push_back(value<T>(me * n + j, i));
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(j * n + me, i));
    comm.all_to_all(view(in), view(out), a);
    expect_equal(rep, me, out, want, "all_to_all(" + tag + ")");
  }
  if constexpr (has<A, collective::reduce_scatter, Tr>) {
    const auto in = mine(count * N);
    std::vector<T> out(count);
    comm.reduce_scatter(view(in), view(out), op, a);
    expect_equal(rep, me, out, reduced(count, static_cast<std::size_t>(me) * count), "reduce_scatter(" + tag + ")");
    expect_equal(rep, me, in, mine(count * N), "reduce_scatter(" + tag + ") leaves its input alone");
  }
  if constexpr (has<A, collective::barrier, Tr>) comm.barrier(a);
}

/// all_to_all_v with this rank's `send` and `recv` counts: element k of the block from rank i to
/// rank j is value(i * n + j, k), checked at every rank.
template <class T, class A, class Comm>
void expect_all_to_all_v(Comm& comm, report& rep, const std::vector<std::size_t>& send,
                         const std::vector<std::size_t>& recv, const A& a, const std::string& tag) {
  const int me = comm.rank(), n = comm.size();
  std::vector<T> in, want;
  for (int j = 0; j < n; ++j)
    for (std::size_t k = 0; k < send[static_cast<std::size_t>(j)]; ++k) in.push_back(value<T>(me * n + j, k));
  for (int i = 0; i < n; ++i)
    for (std::size_t k = 0; k < recv[static_cast<std::size_t>(i)]; ++k) want.push_back(value<T>(i * n + me, k));
  std::vector<T> out(want.size());
  comm.all_to_all_v(view(in), send, view(out), recv, a);
  expect_equal(rep, me, out, want, "all_to_all_v(" + tag + ")");
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

/// The five v-collectives algorithm A offers, under every counts pattern, with element type T
/// and op `op`.
template <class A, class T, class Op, class Comm>
void check_v_collectives(Comm& comm, report& rep, std::size_t scale, const Op& op, const A& a = {}) {
  using Tr = typename Comm::transport_type;
  const int n = comm.size(), me = comm.rank();
  const auto N = static_cast<std::size_t>(n), ME = static_cast<std::size_t>(me);
  std::vector<int> roots{0, n - 1};
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  int pattern = 0;
  for (const auto& counts : counts_patterns(n, scale)) {
    const auto offs = displacements(counts);
    std::size_t total = 0;
    for (auto c : counts) total += c;
    const std::string tag = std::string(A::name) + " on " + std::to_string(n) + " ranks, counts pattern " +
                            std::to_string(pattern) + " (total " + std::to_string(total) + "), " +
                            dtype_name(dtype_of<T>()) + " " + std::string(op_traits<Op>::name());
    auto block_of = [&](int r, int salt) {
      std::vector<T> v(counts[static_cast<std::size_t>(r)]);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = value<T>(r + salt, i);
      return v;
    };
    auto all_blocks = [&](int salt) {
      std::vector<T> v;
      for (int r = 0; r < n; ++r)
        for (const T& x : block_of(r, salt)) v.push_back(x);
      return v;
    };
    if constexpr (has<A, collective::all_gather_v, Tr>) {
      const auto in = block_of(me, 0);
      std::vector<T> out(total);
      comm.all_gather_v(view(in), view(out), counts, a);
      expect_equal(rep, me, out, all_blocks(0), "all_gather_v(" + tag + ")");
      // in place: this rank's block of out
      std::vector<T> io(total + 3, value<T>(99, 0));
      std::copy(in.begin(), in.end(), io.begin() + static_cast<std::ptrdiff_t>(offs[ME]));
      comm.all_gather_v(view(io).subview(offs[ME], counts[ME]), view(io), counts, a);
      io.resize(total);
      expect_equal(rep, me, io, all_blocks(0), "all_gather_v(" + tag + ") in place");
    }
    if constexpr (has<A, collective::gather_v, Tr>)
      for (int root : roots) {
        const auto in = block_of(me, 1);
        std::vector<T> out(me == root ? total : 0);
        // The counts matter at the root only: every other rank passes none.
        comm.gather_v(view(in), view(out), me == root ? std::span<const std::size_t>(counts) : std::span<const std::size_t>(), root, a);
        if (me == root) expect_equal(rep, me, out, all_blocks(1), "gather_v(" + tag + ") root " + std::to_string(root));
      }
    if constexpr (has<A, collective::scatter_v, Tr>)
      for (int root : roots) {
        const auto in = me == root ? all_blocks(2) : std::vector<T>();
        std::vector<T> out(counts[ME]);
        comm.scatter_v(view(in), me == root ? std::span<const std::size_t>(counts) : std::span<const std::size_t>(), view(out),
                       root, a);
        expect_equal(rep, me, out, block_of(me, 2), "scatter_v(" + tag + ") root " + std::to_string(root));
      }
    if constexpr (has<A, collective::reduce_scatter_v, Tr>) {
      std::vector<T> in(total), out(counts[ME]), want(counts[ME]);
      for (std::size_t i = 0; i < total; ++i) in[i] = value<T>(me, i);
      for (std::size_t i = 0; i < counts[ME]; ++i) want[i] = fold<T>(n, op, [&](int r) { return value<T>(r, offs[ME] + i); });
      comm.reduce_scatter_v(view(in), view(out), counts, op, a);
      expect_equal(rep, me, out, want, "reduce_scatter_v(" + tag + ")");
    }
    if constexpr (has<A, collective::all_to_all_v, Tr>) {
      std::vector<std::size_t> send(N), recv(N);
      for (int j = 0; j < n; ++j) send[static_cast<std::size_t>(j)] = a2a_count(pattern, me, j, n, scale);
      for (int i = 0; i < n; ++i) recv[static_cast<std::size_t>(i)] = a2a_count(pattern, i, me, n, scale);
      expect_all_to_all_v<T>(comm, rep, send, recv, a, tag);
    }
    ++pattern;
  }
  // The counts no rank knows but its own: all_gather_counts.
  const auto learned = comm.all_gather_counts(ME * 3 + 1);
  std::vector<std::size_t> want(N);
  for (std::size_t r = 0; r < N; ++r) want[r] = r * 3 + 1;
  rep.check(learned == want, "all_gather_counts on " + std::to_string(n) + " ranks", me, "wrong counts");
}

/// Every collective and v-collective with A for the suite's element types and ops at counts 0,
/// 1, size-1 and one not divisible by the size (`full`: four more type/op pairs).
template <class A, class Comm>
void check_every_type(Comm& comm, report& rep, bool full = true) {
  const auto n = static_cast<std::size_t>(comm.size());
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, 3 * n + 2}) {
    check_collectives<A, std::int32_t>(comm, rep, count, op::sum{});
    check_collectives<A, float>(comm, rep, count, op::max{});
    check_collectives<A, bfloat16>(comm, rep, count, op::sum{});
    check_collectives<A, vec3>(comm, rep, count, vec3_max_abs{});
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
/// where their data lies, and for pieces and chunks), with algorithm A.
template <class A, class Comm>
void check_large_v(Comm& comm, report& rep, const A& a = {}) {
  using Tr = typename Comm::transport_type;
  const int n = comm.size(), me = comm.rank();
  const auto N = static_cast<std::size_t>(n);
  const std::size_t total = std::size_t{4} << 20;  // floats: 16 MiB
  std::vector<std::size_t> counts(N);
  std::size_t given = 0;
  for (std::size_t r = 0; r + 1 < N; ++r) given += counts[r] = total / N / 2 * (r % 2 + 1);
  counts[N - 1] = total - given;
  const auto offs = displacements(counts);
  const std::string tag = std::string(A::name) + " on " + std::to_string(n) + " ranks, 16 MiB of float";
  if constexpr (has<A, collective::all_gather_v, Tr>) {
    std::vector<float> in(counts[static_cast<std::size_t>(me)]), out(total), want(total);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<float>(me, i);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) want[offs[static_cast<std::size_t>(r)] + i] = value<float>(r, i);
    comm.all_gather_v(view(in), view(out), counts, a);
    expect_equal(rep, me, out, want, "all_gather_v(" + tag + ")");
  }
  if constexpr (has<A, collective::reduce_scatter_v, Tr>) {
    std::vector<float> in(total), out(counts[static_cast<std::size_t>(me)]), want(out.size());
    for (std::size_t i = 0; i < total; ++i) in[i] = value<float>(me, i);
    for (std::size_t i = 0; i < out.size(); ++i)
      want[i] = fold<float>(n, op::sum{}, [&](int r) { return value<float>(r, offs[static_cast<std::size_t>(me)] + i); });
    comm.reduce_scatter_v(view(in), view(out), counts, op::sum{}, a);
    expect_equal(rep, me, out, want, "reduce_scatter_v(" + tag + ")");
  }
  if constexpr (has<A, collective::all_to_all_v, Tr>) {
    // every rank sends rank j counts[j] / n elements
    std::vector<std::size_t> send(N), recv(N);
    for (std::size_t j = 0; j < N; ++j) send[j] = counts[j] / N;
    for (std::size_t i = 0; i < N; ++i) recv[i] = counts[static_cast<std::size_t>(me)] / N;
    expect_all_to_all_v<float>(comm, rep, send, recv, a, tag);
  }
  if constexpr (has<A, collective::gather_v, Tr> && has<A, collective::scatter_v, Tr>) {
    std::vector<float> in(counts[static_cast<std::size_t>(me)]), out(me == 0 ? total : 0), want;
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<float>(me, i);
    comm.gather_v(view(in), view(out), counts, 0, a);
    if (me == 0) {
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) want.push_back(value<float>(r, i));
      expect_equal(rep, me, out, want, "gather_v(" + tag + ")");
    }
    std::vector<float> back(counts[static_cast<std::size_t>(me)]);
    comm.scatter_v(view(out), counts, view(back), 0, a);
    expect_equal(rep, me, back, in, "scatter_v(" + tag + ") of what gather_v gathered");
  }
}

}  // namespace tutti::testing
