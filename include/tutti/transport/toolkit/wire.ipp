/// \file
/// Definitions for tutti/transport/toolkit/wire.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <cstring>

#include "tutti/transport/toolkit/wire.hpp"

namespace tutti::toolkit::wire {

// The fingerprint's first 52 bytes are its members in order, without padding (wire.hpp's
// static_assert): encoded and decoded as they lie.
TUTTI_DECL void encode(const fingerprint& f, std::byte* out) noexcept { std::memcpy(out, &f, fingerprint_bytes); }

TUTTI_DECL fingerprint decode(const std::byte* in) noexcept {
  fingerprint f;
  std::memcpy(static_cast<void*>(&f), in, fingerprint_bytes);
  return f;
}

TUTTI_DECL frame frame::of(kind k, const header& h) noexcept {
  frame f;
  f.magic = static_cast<std::uint32_t>(k);
  encode(h.fp, f.fp.data());
  f.bytes = h.bytes;
  return f;
}

TUTTI_DECL void frame::put(kind k, const header& h, std::uint64_t context, std::byte* at) noexcept {
  const auto magic = static_cast<std::uint32_t>(k);
  std::memcpy(at, &magic, sizeof magic);
  std::memcpy(at + sizeof magic, &context, sizeof context);  // the fingerprint's first member
  std::memcpy(at + sizeof magic + sizeof context, reinterpret_cast<const std::byte*>(&h.fp) + sizeof context,
              fingerprint_bytes - sizeof context);
  std::memcpy(at + sizeof magic + fingerprint_bytes, &h.bytes, sizeof h.bytes);
}

TUTTI_DECL std::array<std::uint64_t, fingerprint_words> to_words(const fingerprint& f) noexcept {
  std::array<std::uint64_t, fingerprint_words> w{};
  encode(f, reinterpret_cast<std::byte*>(w.data()));
  return w;
}

}  // namespace tutti::toolkit::wire
