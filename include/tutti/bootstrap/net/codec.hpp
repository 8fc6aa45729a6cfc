/// \file
/// The byte codec that the rendezvous store and the tcp mesh share: little-endian integers and
/// length-prefixed strings (`writer`, `reader`, every read bounds-checked), length-prefixed
/// frames, `malformed` (what a parser raises for bytes that break a protocol), the head of the
/// answer to a hello, and the job token's bound and comparison. Pure functions of bytes, no
/// sockets: the fuzz targets include it alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "tutti/core/error.hpp"
#include "tutti/detail/attributes.hpp"

namespace tutti::detail::net {

/// The longest job token a hello may carry.
inline constexpr std::size_t max_token = 256;
/// The longest job id a hello may carry (TUTTI_JOB_ID is at most 64 bytes; a shrink or a grow
/// appends to it).
inline constexpr std::size_t max_job_id = 256;

/// Appends little-endian integers and length-prefixed strings.
struct writer {
  std::string out;
  template <class U>
  writer& num(U v) {
    using W = std::make_unsigned_t<U>;
    W w = static_cast<W>(v);
    for (std::size_t i = 0; i < sizeof(U); ++i) out += static_cast<char>((w >> (8 * i)) & 0xff);
    return *this;
  }
  writer& str(std::string_view s) {
    num(static_cast<std::uint32_t>(s.size()));
    out.append(s);
    return *this;
  }
};

/// Reads what `writer` wrote; every read is bounds-checked (`ok` turns false, values are 0/empty).
struct reader {
  std::string_view in;
  bool ok = true;
  template <class U>
  U num() {
    if (in.size() < sizeof(U)) {
      ok = false;
      in = {};
      return U{};
    }
    std::make_unsigned_t<U> w = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i)
      w |= static_cast<std::make_unsigned_t<U>>(static_cast<unsigned char>(in[i])) << (8 * i);
    in.remove_prefix(sizeof(U));
    return static_cast<U>(w);
  }
  std::string_view str(std::size_t limit);
};

/// Whether a peer's job token equals ours, in time that depends only on the lengths (a
/// stranger timing its refusals learns nothing about how much of the secret it guessed).
TUTTI_DECL bool same_token(std::string_view theirs, std::string_view ours);

inline std::string frame(const std::string& body) {
  writer w;
  w.num(static_cast<std::uint32_t>(body.size()));
  return w.out + body;
}

/// A message that breaks the protocol: what the pure parsers below raise. `reason` is what is
/// wrong ("frame of 4294967295 bytes"); `stranger`: the bytes are not tutti's protocol at all
/// (wrong magic), so the caller closes without answering.
struct malformed : error {
  explicit malformed(const std::string& why, bool stranger_ = false)
      : error(errc::aborted, "malformed message: " + why), reason(why), stranger(stranger_) {}
  std::string reason;
  bool stranger;
};

/// The head of an answer to a hello (the store's welcome, the tcp mesh's answer): magic u64,
/// status u8, u32 length of the text that follows (at most 4096 bytes).
struct answer_head {
  std::uint8_t status = 0;
  std::uint32_t text_bytes = 0;
};
inline constexpr std::size_t answer_head_bytes = 8 + 1 + 4;
inline constexpr std::size_t max_answer_text = 4096;
TUTTI_DECL answer_head parse_answer_head(std::string_view head, std::uint64_t want_magic);

}  // namespace tutti::detail::net

#if defined(TUTTI_DEFINITIONS)
#include "tutti/bootstrap/net/codec.ipp"
#endif
