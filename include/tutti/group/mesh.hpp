/// \file
/// `tutti::mesh`: the ranks of a communicator as an N-dimensional array with named axes, as
/// torch's `DeviceMesh` and JAX's `Mesh`, with the names fixed at compile time.
///
///     auto m = tutti::mesh<tutti::axis<"dp">, tutti::axis<"tp">>(comm, {2, 4});
///     m.axis<"dp">().all_reduce(grads);          // the ranks that share this rank's tp coordinate
///     m.axis<"tp">().all_gather(shard, full);    // the ranks that share its dp coordinate
///     int d = m.coordinate<"dp">(), t = m.size<"tp">();
///     auto both = m.flatten<"dp", "tp">();       // one communicator over both axes
///     m.axis<"pt">();                            // compile error: no axis of this mesh is "pt"
///
/// Ranks are laid out row-major, the last axis fastest (rank = dp · 4 + tp above), as DeviceMesh
/// does. Every rank passes the same shape (else `mismatch_error` on every rank, naming two ranks
/// and their shapes), whose product is the communicator's size (else `usage_error`, also on
/// every rank). Building a mesh costs one split per axis, not one group per slice: each axis is
/// the split whose color is this rank's other coordinates and whose key is its coordinate on
/// the axis.
///
/// Each axis may carry policies of its own, a transport and an algorithm in any order:
///
///     tutti::mesh<tutti::axis<"dp", tutti::algo::ring>, tutti::axis<"tp", tutti::shm>>(tcp_comm, {hosts, per_host})
///
/// gives `dp` the ring and `tp` shared memory inside a tcp job. An axis with the communicator's
/// transport shares its links (a split); one with another transport gets a group of its own,
/// which that transport must be able to make among ranks of one host from a name they agree on
/// (`one_host_job`: `tutti::shm`). The mesh checks that such an axis lies within hosts, by the
/// members' node keys (`node_identity`: hostname, boot id, IPC and network namespaces, or
/// `TUTTI_NODE_ID`), and raises `config_error` on every rank if a slice spans two. The keys and
/// the decision are shown at `TUTTI_DEBUG=info`.
///
/// The mesh holds its communicators (a split of the whole communicator and one per axis): it
/// does not refer to `comm` once made. `flatten` and the constructor are collective: every rank
/// of the mesh calls them, in the same order as its other collectives.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unistd.h>
#include <utility>
#include <vector>

#include "tutti/algorithm/algorithm.hpp"
#include "tutti/algorithm/direct.hpp"
#include "tutti/bootstrap/env.hpp"
#include "tutti/bootstrap/locality.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/view.hpp"
#include "tutti/group/communicator.hpp"
#include "tutti/group/subgroup.hpp"
#include "tutti/transport/capabilities.hpp"

namespace tutti {

/// A string literal as a template argument (`axis<"tp">`).
template <std::size_t N>
struct fixed_string {
  char chars[N] = {};
  constexpr fixed_string(const char (&s)[N]) noexcept {
    for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
  }
  constexpr std::string_view view() const noexcept { return {chars, N - 1}; }
};
template <std::size_t N, std::size_t M>
constexpr bool operator==(const fixed_string<N>& a, const fixed_string<M>& b) noexcept {
  return a.view() == b.view();
}

namespace detail {
template <class P>
inline constexpr bool is_transport_policy = transport<P>;
template <class P>
inline constexpr bool is_algorithm_policy = algorithm<P> && !transport<P>;

template <class... Ps>
struct first_transport {
  using type = void;
};
template <class P, class... Ps>
struct first_transport<P, Ps...> {
  using type = std::conditional_t<is_transport_policy<P>, P, typename first_transport<Ps...>::type>;
};
template <class... Ps>
struct first_algorithm {
  using type = void;
};
template <class P, class... Ps>
struct first_algorithm<P, Ps...> {
  using type = std::conditional_t<is_algorithm_policy<P>, P, typename first_algorithm<Ps...>::type>;
};
}  // namespace detail

/// One axis of a mesh: its name, and optionally a transport and an algorithm of its own (in any
/// order; what it does not name it takes from the mesh's communicator).
template <fixed_string Name, class... Policies>
struct axis {
  static_assert(!Name.view().empty(), "tutti::axis: an axis needs a name");
  static_assert(((detail::is_transport_policy<Policies> || detail::is_algorithm_policy<Policies>) && ...),
                "tutti::axis: each policy after the name must be a transport (tutti::shm, tutti::tcp, ...) or an "
                "algorithm (tutti::algo::ring, ...)");
  static_assert((0 + ... + int(detail::is_transport_policy<Policies>)) <= 1, "tutti::axis: at most one transport per axis");
  static_assert((0 + ... + int(detail::is_algorithm_policy<Policies>)) <= 1, "tutti::axis: at most one algorithm per axis");

  static constexpr std::string_view name = Name.view();
  static constexpr auto literal = Name;  ///< the name as a template argument: `m.axis<Ax::literal>()`
  using transport_type = typename detail::first_transport<Policies...>::type;  ///< void: the communicator's
  using algorithm_type = typename detail::first_algorithm<Policies...>::type;  ///< void: the communicator's
};

namespace detail {
template <class T>
struct is_axis : std::false_type {};
template <fixed_string Name, class... Ps>
struct is_axis<tutti::axis<Name, Ps...>> : std::true_type {};

template <std::size_t I, class... Ts>
using nth_type = std::tuple_element_t<I, std::tuple<Ts...>>;

/// "{2, 4}"
template <std::size_t N>
std::string shape_text(const int* s) {
  std::string t = "{";
  for (std::size_t i = 0; i < N; ++i) {
    if (i) t += ", ";
    t += std::to_string(s[i]);
  }
  return t + "}";
}
}  // namespace detail

/// A mesh over a communicator of type `Comm` (made by `tutti::mesh<Axes...>(comm, shape)`; name
/// the type this way to keep one as a member).
template <class Comm, class... Axes>
class mesh_of {
  static_assert(sizeof...(Axes) >= 1, "tutti::mesh: give at least one axis");
  static_assert((detail::is_axis<Axes>::value && ...),
                "tutti::mesh: every template argument must be a tutti::axis<\"name\", policies...>");

 public:
  static constexpr std::size_t dimensions = sizeof...(Axes);
  using shape_type = std::array<int, dimensions>;
  using world_communicator = Comm;
  /// The axes' names, in the mesh's order.
  static constexpr std::array<std::string_view, dimensions> names{Axes::name...};

 private:
  template <class T, std::size_t K>
  static constexpr bool distinct(const std::array<T, K>& a) {
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = i + 1; j < K; ++j)
        if (a[i] == a[j]) return false;
    return true;
  }
  static_assert(distinct(names), "tutti::mesh: two axes have the same name");

  template <class Ax>
  using transport_of = std::conditional_t<std::is_void_v<typename Ax::transport_type>, typename Comm::transport_type,
                                          typename Ax::transport_type>;
  template <class Ax>
  using algorithm_of = std::conditional_t<std::is_void_v<typename Ax::algorithm_type>, typename Comm::algorithm_type,
                                          typename Ax::algorithm_type>;
  template <class Ax>
  static constexpr bool own_group = !std::is_same_v<transport_of<Ax>, typename Comm::transport_type>;
  static_assert(((!own_group<Axes> || one_host_job<transport_of<Axes>>) && ...),
                "tutti::mesh: an axis's own transport must be the communicator's, or one that makes a group of the "
                "ranks of one host from a name they agree on (one_host_job: tutti::shm)");

 public:
  template <class Ax>
  using communicator_of = communicator<transport_of<Ax>, algorithm_of<Ax>>;

  /// The position of the axis `Name` in the mesh; a name the mesh does not have is a compile
  /// error, whose instantiation line shows the name.
  template <fixed_string Name>
  static constexpr std::size_t index_of() {
    constexpr std::size_t i = find(Name.view());
    static_assert(i < dimensions, "tutti::mesh: this mesh has no axis of that name (the Name = \"...\" shown above)");
    return i < dimensions ? i : 0;  // after the error, axis 0: no cascade of errors about tuple indices
  }
  /// The communicator type of the axis `Name`.
  template <fixed_string Name>
  using axis_communicator = communicator_of<detail::nth_type<index_of<Name>(), Axes...>>;

  /// Lays the ranks of `comm` out as `shape` (collective; see the file comment).
  mesh_of(Comm& comm, const shape_type& shape) : shape_(shape) {
    agree_on_shape(comm);
    world_.emplace(std::move(*comm.split(0, comm.rank())));
    int r = world_->rank();
    for (std::size_t i = dimensions; i-- > 0;) {
      coords_[i] = r % shape_[i];
      r /= shape_[i];
    }
    if constexpr ((own_group<Axes> || ...)) node_ = detail::gather_node_hashes(*world_, "mesh");
    make_axes(std::index_sequence_for<Axes...>{});
  }

  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  const shape_type& shape() const noexcept { return shape_; }
  /// This rank's coordinates, in the mesh's axis order.
  const shape_type& coordinates() const noexcept { return coords_; }
  /// The rank (of the communicator the mesh was made from) at `coords`.
  int rank_of(const shape_type& coords) const {
    int r = 0;
    for (std::size_t i = 0; i < dimensions; ++i) {
      if (coords[i] < 0 || coords[i] >= shape_[i])
        throw usage_error("mesh: coordinate " + std::to_string(coords[i]) + " on axis \"" + std::string(names[i]) +
                          "\" is outside 0.." + std::to_string(shape_[i] - 1));
      r = r * shape_[i] + coords[i];
    }
    return r;
  }

  /// The communicator of the ranks that share every other coordinate with this rank, ranked by
  /// their coordinate on `Name`.
  template <fixed_string Name>
  axis_communicator<Name>& axis() noexcept {
    return *std::get<index_of<Name>()>(axes_);
  }
  template <fixed_string Name>
  int coordinate() const noexcept {
    return coords_[index_of<Name>()];
  }
  template <fixed_string Name>
  int size() const noexcept {
    return shape_[index_of<Name>()];
  }

  /// Every rank of the mesh (a split of the communicator it was made from, ranked alike).
  Comm& world() noexcept { return *world_; }

  /// One communicator over the axes `Names` (collective): the ranks that share every other
  /// coordinate, ranked row-major over `Names` in the order given (the last fastest). It runs
  /// over the mesh's communicator's transport and algorithm.
  template <fixed_string... Names>
  Comm flatten() {
    static_assert(sizeof...(Names) >= 1, "tutti::mesh::flatten: name at least one axis");
    constexpr std::array<std::size_t, sizeof...(Names)> picked{index_of<Names>()...};
    static_assert(distinct(picked), "tutti::mesh::flatten: an axis is named twice");
    int color = 0, key = 0;
    for (std::size_t i = 0; i < dimensions; ++i)
      if (std::find(picked.begin(), picked.end(), i) == picked.end()) color = color * shape_[i] + coords_[i];
    for (std::size_t i : picked) key = key * shape_[i] + coords_[i];
    return std::move(*world_->split(color, key));
  }

 private:
  static constexpr std::size_t find(std::string_view name) {
    for (std::size_t i = 0; i < dimensions; ++i)
      if (names[i] == name) return i;
    return dimensions;
  }

  std::string axes_text() const {
    std::string t;
    for (std::size_t i = 0; i < dimensions; ++i) {
      if (i) t += " x ";
      t += names[i];
    }
    return t;
  }

  /// Every rank's shape, compared on every rank: all raise the same error or none does.
  void agree_on_shape(Comm& comm) {
    const auto p = static_cast<std::size_t>(comm.size());
    std::vector<int> all(dimensions * p);
    comm.all_gather(view<const int>(shape_.data(), dimensions), view<int>(all), algo::direct{});
    for (std::size_t r = 1; r < p; ++r)
      if (!std::equal(all.begin(), all.begin() + dimensions, all.begin() + r * dimensions))
        throw mismatch_error("mesh (" + axes_text() + "): rank 0 passed shape " +
                             detail::shape_text<dimensions>(all.data()) + ", rank " + std::to_string(r) +
                             " passed " + detail::shape_text<dimensions>(all.data() + r * dimensions) +
                             " (every rank must pass the same shape)");
    long long product = 1;
    for (std::size_t i = 0; i < dimensions; ++i) {
      if (shape_[i] < 1)
        throw usage_error("mesh (" + axes_text() + "): shape " + detail::shape_text<dimensions>(shape_.data()) +
                          " gives axis \"" + std::string(names[i]) + "\" " + std::to_string(shape_[i]) +
                          " ranks; every axis needs at least one");
      product = std::min(product * shape_[i], 1LL << 40);
    }
    if (product != comm.size())
      throw usage_error("mesh (" + axes_text() + "): shape " + detail::shape_text<dimensions>(shape_.data()) +
                        " holds " + std::to_string(product) + " ranks, but the communicator has " +
                        std::to_string(comm.size()) + " (the product of the shape must equal its size)");
  }

  /// The split of axis i: color from the other coordinates, key the coordinate on it.
  std::pair<int, int> slice_of(std::size_t axis_index) const {
    int color = 0;
    for (std::size_t j = 0; j < dimensions; ++j)
      if (j != axis_index) color = color * shape_[j] + coords_[j];
    return {color, coords_[axis_index]};
  }

  template <std::size_t... I>
  void make_axes(std::index_sequence<I...>) {
    (make_axis<I>(), ...);
  }

  template <std::size_t I>
  void make_axis() {
    using Ax = detail::nth_type<I, Axes...>;
    const auto [color, key] = slice_of(I);
    algorithm_of<Ax> a{};
    if constexpr (std::is_void_v<typename Ax::algorithm_type>) a = world_->algorithm();
    if constexpr (!own_group<Ax>) {
      std::get<I>(axes_).emplace(std::move(*world_->split(color, key, a)));
    } else {
      check_within_hosts(I);
      // The slice agrees on a name over the communicator's links, then makes its own group.
      auto slice = world_->split(color, key);
      std::get<I>(axes_).emplace(detail::one_host_group<transport_of<Ax>>(
          *slice, a, world_->settings(), "mesh axis \"" + std::string(Ax::name) + "\""));
    }
  }

  /// Raises `config_error` on every rank if any slice of axis i spans two hosts (every rank has
  /// every rank's key hash, so all decide alike).
  void check_within_hosts(std::size_t i) {
    int stride = 1;  // between ranks that differ by one on axis i
    for (std::size_t j = dimensions; j-- > i + 1;) stride *= shape_[j];
    const int p = world_->size();
    for (int r = 0; r < p; ++r) {
      const int first = r - (r / stride) % shape_[i] * stride;  // r with coordinate i set to 0
      if (node_[static_cast<std::size_t>(r)] == node_[static_cast<std::size_t>(first)]) continue;
      const auto texts = detail::gather_node_texts(*world_);
      throw config_error("mesh (" + axes_text() + "): axis \"" + std::string(names[i]) +
                         "\" has a transport of one host, but its ranks " + std::to_string(first) + " and " +
                         std::to_string(r) + " are on different hosts (node keys '" +
                         texts[static_cast<std::size_t>(first)] + "' and '" + texts[static_cast<std::size_t>(r)] +
                         "'); give that axis the communicator's transport, or order the ranks host by host");
    }
    detail::log(log_level::info, world_->settings(), world_->rank(),
                "mesh (" + axes_text() + "): axis \"" + std::string(names[i]) + "\" lies within hosts");
  }

  shape_type shape_{};
  shape_type coords_{};
  std::optional<Comm> world_;
  std::tuple<std::optional<communicator_of<Axes>>...> axes_;
  std::vector<std::uint64_t> node_;  // every rank's node key hash, where an axis has a one-host transport
};

/// Makes a mesh of `comm`'s ranks with the axes `Axes` and the run-time `shape` (collective).
template <class... Axes, class Comm>
mesh_of<Comm, Axes...> mesh(Comm& comm, const std::array<int, sizeof...(Axes)>& shape) {
  return mesh_of<Comm, Axes...>(comm, shape);
}

}  // namespace tutti
