#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace tutti {

/// A non-owning reference to a callable `void(const std::byte* data, std::size_t offset,
/// std::size_t bytes)`: what a zero-copy transport hands a peer's bytes to, without templating
/// the transport on it. A message may arrive in several pieces, in order; `offset` is where the
/// piece starts within the payload. Pieces start at multiples of 64 bytes.
class byte_consumer {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, byte_consumer>)
  byte_consumer(F&& f) noexcept  // NOLINT: a reference wrapper, meant to bind implicitly
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, const std::byte* data, std::size_t offset, std::size_t bytes) {
          (*static_cast<std::remove_reference_t<F>*>(o))(data, offset, bytes);
        }) {}

  void operator()(const std::byte* data, std::size_t offset, std::size_t bytes) const {
    call_(obj_, data, offset, bytes);
  }

 private:
  void* obj_;
  void (*call_)(void*, const std::byte*, std::size_t, std::size_t);
};

}  // namespace tutti
