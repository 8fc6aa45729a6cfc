/// \file
/// Definitions for tutti/transport/toolkit/wire.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <cstring>

#include "tutti/transport/toolkit/wire.hpp"

namespace tutti::toolkit::wire {

TUTTI_DECL void encode(const fingerprint& f, std::byte* out) noexcept {
  std::byte* p = out;
  auto put = [&p](const auto& v) {
    std::memcpy(p, &v, sizeof v);
    p += sizeof v;
  };
  put(f.context);
  put(f.seq);
  put(f.count);
  put(f.shape);
  put(f.dtype);
  put(f.op);
  put(f.root);
  put(f.algo);
  put(f.coll);
  put(f.elem_size);
  put(f.reserved);
}

TUTTI_DECL fingerprint decode(const std::byte* in) noexcept {
  fingerprint f;
  const std::byte* p = in;
  auto get = [&p](auto& v) {
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
  };
  get(f.context);
  get(f.seq);
  get(f.count);
  get(f.shape);
  get(f.dtype);
  get(f.op);
  get(f.root);
  get(f.algo);
  get(f.coll);
  get(f.elem_size);
  get(f.reserved);
  return f;
}

TUTTI_DECL frame frame::of(kind k, const header& h) noexcept {
  frame f;
  f.magic = static_cast<std::uint32_t>(k);
  encode(h.fp, f.fp.data());
  f.bytes = h.bytes;
  return f;
}

TUTTI_DECL std::array<std::uint64_t, fingerprint_words> to_words(const fingerprint& f) noexcept {
  std::array<std::uint64_t, fingerprint_words> w{};
  encode(f, reinterpret_cast<std::byte*>(w.data()));
  return w;
}

}  // namespace tutti::toolkit::wire
