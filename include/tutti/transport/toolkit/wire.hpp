/// \file
/// The one wire encoding of a message header, shared by every transport: a 64-byte frame of a
/// 32-bit magic (which kind of frame), the fingerprint (52 bytes, fixed layout, no padding, so no
/// uninitialised byte ever travels) and the payload's byte count. tcp writes the frame in front
/// of every payload, shm in its byte rings, mpi as the header message; the fingerprint's words
/// (`fingerprint_words`) are what shm publishes in its control blocks and mpi agrees on.
///
/// Ranks of one job run the same build on the same architecture: fields are in the host's byte
/// order, as the payloads are.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/fingerprint.hpp"

namespace tutti::toolkit::wire {

/// Bytes of an encoded fingerprint and of a whole frame.
inline constexpr std::size_t fingerprint_bytes = 52;
inline constexpr std::size_t frame_bytes = 64;

/// Frame kinds (the magic): a message header, and the notices transports send between messages.
enum class kind : std::uint32_t {
  message = 0x6d697474u,  ///< "ttim": a header; its payload follows
  failure = 0x66697474u,  ///< "ttif": the sender failed; `bytes` of reason text follow
  stall = 0x73697474u,    ///< "ttis": the sender timed out; `bytes` of its message follow, then its failure
  waiting = 0x77697474u,  ///< "ttiw": the sender waits to receive in the call of this fingerprint
  note = 0x6e697474u,     ///< "ttin": the sender's last words (a usage error); `bytes` of text follow
};

/// Writes `f` as 52 bytes at `out`.
TUTTI_DECL void encode(const fingerprint& f, std::byte* out) noexcept;

/// Reads what `encode` wrote. A collective id off the wire may be out of range: check it with
/// `is_collective` before naming it.
TUTTI_DECL fingerprint decode(const std::byte* in) noexcept;

/// A frame as it travels: `magic`, then the fingerprint, then the byte count (64 bytes).
struct frame {
  std::uint32_t magic = 0;
  std::array<std::byte, fingerprint_bytes> fp{};
  std::uint64_t bytes = 0;

  static frame of(kind k, const header& h) noexcept;
  /// Writes `of(k, h)` at `at` (64 bytes) with `context` as the fingerprint's: a frame built
  /// where it travels, not copied there.
  static void put(kind k, const header& h, std::uint64_t context, std::byte* at) noexcept;
  /// Whether the 64 bytes at `at` are what `put(k, h, context, ...)` writes: a receiver's check
  /// of the frame where it lies (the wire's fingerprint bytes are its members' bytes in order).
  static bool matches(const std::byte* at, kind k, const header& h, std::uint64_t context) noexcept {
    const auto* fp = reinterpret_cast<const std::byte*>(&h.fp);
    std::uint32_t m, t, u;
    std::uint64_t c, b, e, f;
    std::memcpy(&m, at, sizeof m);
    std::memcpy(&c, at + 4, sizeof c);
    std::memcpy(&e, at + 44, sizeof e);
    std::memcpy(&f, fp + 40, sizeof f);
    std::memcpy(&t, at + 52, sizeof t);
    std::memcpy(&u, fp + 48, sizeof u);
    std::memcpy(&b, at + 56, sizeof b);
    const std::uint64_t scalars =
        (m ^ static_cast<std::uint32_t>(k)) | (c ^ context) | (e ^ f) | (t ^ u) | (b ^ h.bytes);
#if defined(__GNUC__)  // (as fingerprint's operator==: vector extensions, no intrinsics header)
    using v2 = long long __attribute__((vector_size(16)));
    v2 x[2], y[2];
    std::memcpy(x, at + 12, sizeof x);  // the fingerprint's bytes 8..39, after its context
    std::memcpy(y, fp + 8, sizeof y);
    const v2 d = (x[0] ^ y[0]) | (x[1] ^ y[1]);
    return (static_cast<std::uint64_t>(d[0] | d[1]) | scalars) == 0;
#else
    std::uint64_t x[4], y[4];
    std::memcpy(x, at + 12, sizeof x);
    std::memcpy(y, fp + 8, sizeof y);
    return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | scalars) == 0;
#endif
  }
  header head() const noexcept { return {decode(fp.data()), bytes}; }
  bool is(kind k) const noexcept { return magic == static_cast<std::uint32_t>(k); }
};
static_assert(sizeof(frame) == frame_bytes && alignof(frame) == 8);
// A fingerprint's first 52 bytes are its members in order, without padding: `encode` and
// `decode` copy them as they lie, and `frame::matches` compares them so.
static_assert(offsetof(fingerprint, seq) == 8 && offsetof(fingerprint, count) == 16 &&
              offsetof(fingerprint, shape) == 24 && offsetof(fingerprint, dtype) == 32 &&
              offsetof(fingerprint, op) == 36 && offsetof(fingerprint, root) == 40 && offsetof(fingerprint, algo) == 44 &&
              offsetof(fingerprint, coll) == 48 && offsetof(fingerprint, elem_size) == 49 &&
              offsetof(fingerprint, reserved) == 50);

/// The fingerprint as whole 64-bit words (the last one zero-padded): for words that are stored
/// and loaded one atomic at a time (shm's control blocks) or reduced (mpi's agreement).
inline constexpr std::size_t fingerprint_words = (fingerprint_bytes + 7) / 8;
TUTTI_DECL std::array<std::uint64_t, fingerprint_words> to_words(const fingerprint& f) noexcept;
inline fingerprint from_words(const std::uint64_t* w) noexcept { return decode(reinterpret_cast<const std::byte*>(w)); }

}  // namespace tutti::toolkit::wire

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/toolkit/wire.ipp"
#endif
