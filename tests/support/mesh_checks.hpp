// The mesh checks that run the same over threads (tests/group/mesh.cpp) and over processes
// (tests/multiproc/mesh.cpp): on a mesh, every axis's size, rank and members, every collective
// and v-collective on every axis against the reference, and flatten over two and over all axes;
// `check_meshes` does so for every 2-D shape a x b of the communicator's size and, where 4
// divides it, for 2 x 2 x size/4.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <tutti/group/mesh.hpp>
#include <tutti/testing/collectives.hpp>
#include <tutti/testing/report.hpp>
#include <vector>

namespace tutti::test {

/// The mesh ranks of the members of `g` (a communicator made from mesh `m`), in g's rank order.
template <class G, class M>
std::vector<int> members_of(G& g, M& m) {
  std::vector<int> all(static_cast<std::size_t>(g.size()));
  const int me = m.rank();
  g.all_gather(view<const int>(&me, 1), view<int>(all));
  return all;
}

/// The ranks whose coordinates differ from this rank's on the axes `picked` only, ordered
/// row-major over `picked` as given (what an axis, or a flatten, must hold).
template <class M, std::size_t K>
std::vector<int> expected_members(const M& m, const std::array<std::size_t, K>& picked) {
  std::size_t total = 1;
  for (std::size_t i : picked) total *= static_cast<std::size_t>(m.shape()[i]);
  std::vector<int> want;
  for (std::size_t linear = 0; linear < total; ++linear) {
    auto c = m.coordinates();
    std::size_t rest = linear;
    for (std::size_t k = K; k-- > 0;) {
      const auto extent = static_cast<std::size_t>(m.shape()[picked[k]]);
      c[picked[k]] = static_cast<int>(rest % extent);
      rest /= extent;
    }
    want.push_back(m.rank_of(c));
  }
  return want;
}

/// Every collective on `g`, with its own algorithm, at counts 0, 1 and one not divisible by its size.
template <class G>
void check_every_collective(G& g, testing::report& rep) {
  using A = typename G::algorithm_type;
  const auto n = static_cast<std::size_t>(g.size());
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, 3 * n + 2}) {
    testing::check_collectives<A, std::int32_t>(g, rep, count, op::sum{});
    testing::check_collectives<A, float>(g, rep, count, op::max{});
  }
  testing::check_v_collectives<A, std::int32_t>(g, rep, 3, op::sum{});
}

/// Axis I of mesh m: size, rank, members, collectives.
template <std::size_t I, class Ax, class M>
void check_axis(M& m, testing::report& rep, const std::string& label) {
  auto& g = m.template axis<Ax::literal>();
  const std::string what = label + " axis \"" + std::string(Ax::name) + "\"";
  rep.check(g.size() == m.template size<Ax::literal>() && g.size() == m.shape()[I], what + ": size", m.rank(),
            "size " + std::to_string(g.size()));
  rep.check(g.rank() == m.template coordinate<Ax::literal>(), what + ": its rank is the coordinate", m.rank(),
            "rank " + std::to_string(g.rank()) + ", coordinate " + std::to_string(m.coordinates()[I]));
  testing::expect_equal(rep, m.rank(), members_of(g, m), expected_members(m, std::array<std::size_t, 1>{I}),
                        what + ": members");
  check_every_collective(g, rep);
}

/// One mesh of `comm` with axes `Axes` and `shape`, checked on every axis.
template <class... Axes, class Comm>
void check_mesh(Comm& comm, testing::report& rep, const std::array<int, sizeof...(Axes)>& shape) {
  auto m = tutti::mesh<Axes...>(comm, shape);
  using M = decltype(m);
  std::string label = "mesh " + detail::shape_text<sizeof...(Axes)>(shape.data());
  rep.check(m.rank() == comm.rank() && m.size() == comm.size(), label + ": rank and size", comm.rank(),
            "mesh rank " + std::to_string(m.rank()) + " of " + std::to_string(m.size()));
  rep.check(m.rank_of(m.coordinates()) == m.rank(), label + ": rank_of(coordinates()) is the rank", comm.rank(), "");
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (check_axis<I, std::tuple_element_t<I, std::tuple<Axes...>>>(m, rep, label), ...);
  }(std::index_sequence_for<Axes...>{});
  // Flatten over every axis in the mesh's order: the whole communicator, ranked alike.
  using First = std::tuple_element_t<0, std::tuple<Axes...>>;
  using Last = std::tuple_element_t<sizeof...(Axes) - 1, std::tuple<Axes...>>;
  auto all = m.template flatten<Axes::literal...>();
  testing::expect_equal(rep, m.rank(), members_of(all, m),
                        expected_members(m, std::array<std::size_t, sizeof...(Axes)>{M::template index_of<Axes::literal>()...}),
                        label + ": flatten over every axis");
  if constexpr (sizeof...(Axes) >= 2) {
    // The last axis and the first, in that order (the order given, not the mesh's).
    auto two = m.template flatten<Last::literal, First::literal>();
    testing::expect_equal(rep, m.rank(), members_of(two, m),
                          expected_members(m, std::array<std::size_t, 2>{sizeof...(Axes) - 1, 0}),
                          label + ": flatten over the last and the first axis");
    check_every_collective(two, rep);
  }
}

/// Every shape the communicator's size allows (see the file comment).
template <class Comm>
void check_meshes(Comm& comm, testing::report& rep) {
  const int p = comm.size();
  for (int a = 1; a <= p; ++a)
    if (p % a == 0) check_mesh<axis<"dp">, axis<"tp">>(comm, rep, {a, p / a});
  if (p % 4 == 0) check_mesh<axis<"pp">, axis<"dp">, axis<"tp">>(comm, rep, {2, 2, p / 4});
  check_mesh<axis<"world">>(comm, rep, {p});
}

}  // namespace tutti::test
