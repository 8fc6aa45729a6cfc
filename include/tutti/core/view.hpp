/// \file
/// `tutti::view<T, Memory>`: a non-owning typed window on contiguous user memory. Collectives
/// read and write through views; they never copy user data into library-owned buffers unless an
/// algorithm or transport needs a staging area (documented where it happens). `Memory` says
/// where the elements live (`host_memory` by default): element access (`[]`, iteration, `span`)
/// exists only for memory the CPU may touch, so a schedule written for any memory kind cannot
/// dereference a device's.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>  // std::ranges::data, size and the range concepts (bits/ranges_base.h), without <ranges>
#include <span>
#include <type_traits>

#include "tutti/core/memory.hpp"

namespace tutti {

/// A typed, non-owning view of `size()` contiguous elements of a trivially copyable `T` in memory
/// of kind `Memory`. `view<const T>` is an input view; `view<T>` converts to it implicitly.
///
///     std::vector<float> v(1024);
///     auto a = tutti::view(v);            // view<float>
///     auto b = tutti::view(v.data(), 8);  // view<float>
///     tutti::view<const float> c = a;     // input view
template <class T, memory_kind Memory = host_memory>
class view {
  static_assert(std::is_trivially_copyable_v<std::remove_const_t<T>>,
                "tutti::view<T>: T must be trivially copyable, since collectives move it as bytes");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using memory = Memory;
  using size_type = std::size_t;
  using iterator = T*;

  constexpr view() noexcept = default;
  constexpr view(T* data, std::size_t size) noexcept : data_(data), size_(size) {}

  /// From any contiguous sized range of T in host memory (std::vector, std::array, std::span,
  /// C arrays).
  template <class R>
    requires(Memory::host_accessible && !std::same_as<std::remove_cvref_t<R>, view> &&
             std::ranges::contiguous_range<R> &&
             std::ranges::sized_range<R> &&
             std::convertible_to<std::remove_reference_t<std::ranges::range_reference_t<R>> (*)[],
                                 T (*)[]>)
  constexpr view(R&& r) noexcept  // NOLINT(google-explicit-constructor): views are cheap handles
      : data_(std::ranges::data(r)), size_(std::ranges::size(r)) {}

  /// `view<T>` converts to `view<const T>`.
  template <class U>
    requires(std::same_as<const U, T> && !std::same_as<U, T>)
  constexpr view(view<U, Memory> other) noexcept : data_(other.data()), size_(other.size()) {}

  /// The address of the first element (in `Memory`: not for the CPU to load unless host).
  constexpr T* data() const noexcept { return data_; }
  constexpr std::size_t size() const noexcept { return size_; }
  constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T* begin() const noexcept
    requires(Memory::host_accessible)
  {
    return data_;
  }
  constexpr T* end() const noexcept
    requires(Memory::host_accessible)
  {
    return data_ + size_;
  }
  constexpr T& operator[](std::size_t i) const noexcept
    requires(Memory::host_accessible)
  {
    return data_[i];
  }

  /// Elements [offset, offset + count).
  constexpr view subview(std::size_t offset, std::size_t count) const noexcept { return {data_ + offset, count}; }
  constexpr std::span<T> span() const noexcept
    requires(Memory::host_accessible)
  {
    return {data_, size_};
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

template <class T>
view(T*, std::size_t) -> view<T>;
template <class R>
  requires std::ranges::contiguous_range<R>
view(R&&) -> view<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

/// A view of device memory (`view<T, device_memory>`): `tutti::device_view(ptr, n)` for `n`
/// elements at the device pointer `ptr` (`device_view<const T>` for an input). It has no element
/// access, so no host code (a schedule included) can dereference it; the device transports check
/// once per allocation, when they first meet it, that it lies on their device.
///
///     float* d;  cudaMalloc(&d, n * sizeof(float));
///     comm.all_reduce(tutti::device_view(d, n), tutti::op::sum{}, stream);
template <class T>
class device_view : public view<T, device_memory> {
 public:
  constexpr device_view() noexcept = default;
  constexpr device_view(T* data, std::size_t size) noexcept : view<T, device_memory>(data, size) {}
  constexpr device_view(view<T, device_memory> v) noexcept : view<T, device_memory>(v) {}  // NOLINT: the same thing
  /// `device_view<T>` converts to `device_view<const T>`.
  template <class U>
    requires(std::same_as<const U, T> && !std::same_as<U, T>)
  constexpr device_view(view<U, device_memory> other) noexcept : view<T, device_memory>(other.data(), other.size()) {}
  constexpr device_view subview(std::size_t offset, std::size_t count) const noexcept {
    return {this->data() + offset, count};
  }
};
template <class T>
device_view(T*, std::size_t) -> device_view<T>;

namespace detail {
template <class T, class M>
std::true_type view_base_test(const view<T, M>*);
std::false_type view_base_test(...);
/// A `view` of any memory kind, or a type derived from one (`device_view`).
template <class T>
struct is_view : decltype(view_base_test(static_cast<const T*>(nullptr))) {};

/// One trivially copyable object that is not a range, a pointer or a view: a buffer of one.
template <class X>
concept single_value = std::is_trivially_copyable_v<std::remove_cvref_t<X>> && !std::ranges::range<X> &&
                       !std::is_pointer_v<std::remove_cvref_t<X>> && !std::is_array_v<std::remove_cvref_t<X>> &&
                       !is_view<std::remove_cvref_t<X>>::value && !std::is_same_v<std::remove_cvref_t<X>, std::nullptr_t>;
}  // namespace detail

/// What a collective accepts as a buffer: a `view`, a contiguous sized range of a trivially
/// copyable type (`std::vector`, `std::array`, `std::span`, a C array), or a single trivially
/// copyable value (a buffer of one element). Not a pointer: say how many elements it points to
/// with `tutti::view(p, n)`.
template <class X>
concept viewable = detail::is_view<std::remove_cvref_t<X>>::value ||
                   (std::ranges::contiguous_range<X> && std::ranges::sized_range<X> &&
                    std::is_trivially_copyable_v<std::ranges::range_value_t<X>>) ||
                   detail::single_value<X>;

/// The view of a buffer (see `viewable`): itself for a view; const elements for a const range or
/// value.
template <viewable X>
constexpr auto as_view(X&& x) noexcept {
  if constexpr (detail::is_view<std::remove_cvref_t<X>>::value) {
    using V = std::remove_cvref_t<X>;
    return view<typename V::element_type, typename V::memory>(x.data(), x.size());  // a device_view: its view
  } else if constexpr (std::ranges::range<X>) {
    return view<std::remove_reference_t<std::ranges::range_reference_t<X>>>(std::ranges::data(x), std::ranges::size(x));
  } else {
    return view<std::remove_reference_t<X>>(std::addressof(x), 1);
  }
}

/// The view type `as_view` makes of an `X`.
template <viewable X>
using view_of = decltype(as_view(std::declval<X>()));

namespace detail {

/// True when the byte ranges of two views overlap.
template <class A, class B, class M>
bool overlaps(view<A, M> a, view<B, M> b) noexcept {
  if (a.empty() || b.empty()) return false;
  auto a0 = reinterpret_cast<std::uintptr_t>(a.data());
  auto b0 = reinterpret_cast<std::uintptr_t>(b.data());
  return a0 < b0 + b.size_bytes() && b0 < a0 + a.size_bytes();
}
}  // namespace detail

}  // namespace tutti
