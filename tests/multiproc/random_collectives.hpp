// A reproducible stream of random, verified collectives, shared by fault_random.cpp and soak.cpp:
// every rank derives collective i (kind, element type, op, size, root, algorithm) from (seed, i)
// alone, so all ranks of a job agree without talking, and a seed replays a run exactly.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <tutti/tutti.hpp>
#include <vector>

namespace tutti::fault_test {

/// splitmix64: a good 64-bit mix, so that nearby (seed, i) give unrelated streams.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

enum class kind { broadcast, reduce, all_reduce, gather, all_gather, scatter, all_to_all, reduce_scatter, barrier };
inline constexpr const char* kind_names[] = {"broadcast",  "reduce",     "all_reduce",     "gather", "all_gather",
                                              "scatter",    "all_to_all", "reduce_scatter", "barrier"};

/// Collective i of a run: the same on every rank.
struct step {
  kind k;
  int dtype;      // 0 int32, 1 float, 2 double, 3 int64
  int op;         // 0 sum, 1 max, 2 min
  int algorithm;  // all_reduce only: 0 automatic, 1 ring, 2 tree, 3 recursive_doubling, 4 direct
  int root;
  std::size_t bytes;  // whole buffer, a few bytes to 1 MiB (log-uniform)

  std::string describe() const {
    static constexpr const char* types[] = {"int32", "float", "double", "int64"};
    static constexpr const char* ops[] = {"sum", "max", "min"};
    return std::string(kind_names[static_cast<int>(k)]) + " " + types[dtype] + " " + ops[op] + " " +
           std::to_string(bytes) + " B root " + std::to_string(root) + " algo " + std::to_string(algorithm);
  }
};

inline step make_step(std::uint64_t seed, std::uint64_t i, int size, std::size_t max_bytes = std::size_t{1} << 20) {
  std::mt19937_64 rng(mix(seed ^ mix(i)));
  step s;
  s.k = static_cast<kind>(rng() % 9);
  s.dtype = static_cast<int>(rng() % 4);
  s.op = static_cast<int>(rng() % 3);
  s.algorithm = static_cast<int>(rng() % 5);
  s.root = static_cast<int>(rng() % static_cast<std::uint64_t>(size));
  const double lg = 2.0 + std::uniform_real_distribution<double>(0.0, std::log2(double(max_bytes)) - 2.0)(rng);
  s.bytes = static_cast<std::size_t>(std::exp2(lg));
  return s;
}

/// What went wrong in a verified collective (empty: right).
struct outcome {
  std::string wrong;
};

namespace detail_rc {

// Small integers: sums of 5 ranks are exact in every element type.
template <class T>
T value(std::uint64_t i, int rank, std::size_t j) {
  return static_cast<T>((static_cast<std::uint64_t>(rank) * 7 + j * 13 + i) % 101);
}

template <class T>
T apply(int op, T a, T b) {
  return op == 0 ? T(a + b) : op == 1 ? std::max(a, b) : std::min(a, b);
}

template <class T>
T reduced(std::uint64_t i, int op, int n, std::size_t j) {
  T acc = value<T>(i, 0, j);
  for (int r = 1; r < n; ++r) acc = apply(op, acc, value<T>(i, r, j));
  return acc;
}

template <class Comm, class T, class Op>
void all_reduce(Comm& comm, view<T> v, const Op& op, int algorithm) {
  switch (algorithm) {
    case 1: return comm.all_reduce(v, op, algo::ring{});
    case 2: return comm.all_reduce(v, op, algo::tree{});
    case 3: return comm.all_reduce(v, op, algo::recursive_doubling{});
    case 4: return comm.all_reduce(v, op, algo::direct{});
    default: return comm.all_reduce(v, op);
  }
}

template <class T, class Comm, class Op>
outcome run_typed(Comm& comm, const step& s, std::uint64_t i, const Op& op) {
  const int n = comm.size(), me = comm.rank();
  const auto N = static_cast<std::size_t>(n);
  const std::size_t count = std::max<std::size_t>(1, s.bytes / sizeof(T));
  const std::size_t block = std::max<std::size_t>(1, count / N);
  std::vector<T> a, b;
  auto fill = [&](std::vector<T>& v, std::size_t c) {
    v.resize(c);
    for (std::size_t j = 0; j < c; ++j) v[j] = value<T>(i, me, j);
  };
  std::size_t bad = SIZE_MAX;
  T got{}, want{};
  auto expect = [&](const std::vector<T>& v, auto&& at) {
    for (std::size_t j = 0; j < v.size() && bad == SIZE_MAX; ++j)
      if (!(v[j] == at(j))) bad = j, got = v[j], want = at(j);
  };
  switch (s.k) {
    case kind::broadcast:
      fill(a, count);
      comm.broadcast(view(a), s.root);
      expect(a, [&](std::size_t j) { return value<T>(i, s.root, j); });
      break;
    case kind::reduce:
      fill(a, count);
      comm.reduce(view(a), s.root, op);
      if (me == s.root) expect(a, [&](std::size_t j) { return reduced<T>(i, s.op, n, j); });
      else expect(a, [&](std::size_t j) { return value<T>(i, me, j); });
      break;
    case kind::all_reduce:
      fill(a, count);
      all_reduce(comm, view(a), op, s.algorithm);
      expect(a, [&](std::size_t j) { return reduced<T>(i, s.op, n, j); });
      break;
    case kind::gather:
      fill(a, block);
      b.assign(me == s.root ? N * block : 0, T{});
      comm.gather(view<const T>(a), view(b), s.root);
      expect(b, [&](std::size_t j) { return value<T>(i, static_cast<int>(j / block), j % block); });
      break;
    case kind::all_gather:
      fill(a, block);
      b.assign(N * block, T{});
      comm.all_gather(view<const T>(a), view(b));
      expect(b, [&](std::size_t j) { return value<T>(i, static_cast<int>(j / block), j % block); });
      break;
    case kind::scatter:
      if (me == s.root) fill(a, N * block);
      b.assign(block, T{});
      comm.scatter(view<const T>(a), view(b), s.root);
      expect(b, [&](std::size_t j) { return value<T>(i, s.root, static_cast<std::size_t>(me) * block + j); });
      break;
    case kind::all_to_all:
      fill(a, N * block);
      b.assign(N * block, T{});
      comm.all_to_all(view<const T>(a), view(b));
      // Block r of ours is block `me` of rank r's input.
      expect(b, [&](std::size_t j) {
        return value<T>(i, static_cast<int>(j / block), static_cast<std::size_t>(me) * block + j % block);
      });
      break;
    case kind::reduce_scatter:
      fill(a, N * block);
      b.assign(block, T{});
      comm.reduce_scatter(view<const T>(a), view(b), op);
      expect(b, [&](std::size_t j) { return reduced<T>(i, s.op, n, static_cast<std::size_t>(me) * block + j); });
      break;
    case kind::barrier:
      comm.barrier();
      break;
  }
  if (bad == SIZE_MAX) return {};
  return {"element " + std::to_string(bad) + " is " + std::to_string(static_cast<double>(got)) + ", want " +
          std::to_string(static_cast<double>(want))};
}

template <class T, class Comm>
outcome run_op(Comm& comm, const step& s, std::uint64_t i) {
  switch (s.op) {
    case 1: return run_typed<T>(comm, s, i, op::max{});
    case 2: return run_typed<T>(comm, s, i, op::min{});
    default: return run_typed<T>(comm, s, i, op::sum{});
  }
}

}  // namespace detail_rc

/// Runs collective i of the stream of `seed` on `comm` and checks this rank's result.
template <class Comm>
outcome run_step(Comm& comm, const step& s, std::uint64_t i) {
  switch (s.dtype) {
    case 0: return detail_rc::run_op<std::int32_t>(comm, s, i);
    case 1: return detail_rc::run_op<float>(comm, s, i);
    case 2: return detail_rc::run_op<double>(comm, s, i);
    default: return detail_rc::run_op<std::int64_t>(comm, s, i);
  }
}

}  // namespace tutti::fault_test
