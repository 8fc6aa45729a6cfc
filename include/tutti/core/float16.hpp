/// \file
/// 16-bit floating-point element types. Both store 16 bits and compute in float: every
/// arithmetic expression widens to float, and the reduce kernels accumulate in float and narrow
/// once per reduction step with round-to-nearest-even.
#pragma once

#include <bit>
#include <cstdint>

namespace tutti {

/// Google brain float: 8 exponent bits, 7 mantissa bits (the top half of an IEEE float).
struct bfloat16 {
  std::uint16_t bits = 0;

  constexpr bfloat16() = default;
  constexpr bfloat16(float f) noexcept : bits(from_float(f)) {}  // NOLINT: implicit, like float
  constexpr operator float() const noexcept { return to_float(bits); }

  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 r;
    r.bits = b;
    return r;
  }
  static constexpr float to_float(std::uint16_t b) noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
  }
  /// Round to nearest even; NaN stays NaN (quiet).
  static constexpr std::uint16_t from_float(float f) noexcept {
    auto u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(u >> 16);
  }
  friend constexpr bool operator==(bfloat16 a, bfloat16 b) noexcept {
    return float(a) == float(b);
  }
};

/// IEEE 754 binary16: 5 exponent bits, 10 mantissa bits.
struct float16 {
  std::uint16_t bits = 0;

  constexpr float16() = default;
  constexpr float16(float f) noexcept : bits(from_float(f)) {}  // NOLINT: implicit, like float
  constexpr operator float() const noexcept { return to_float(bits); }

  static constexpr float16 from_bits(std::uint16_t b) noexcept {
    float16 r;
    r.bits = b;
    return r;
  }
  static constexpr float to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    std::uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf/NaN
    if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return std::bit_cast<float>(sign);  // signed zero
    // Subnormal half: value = mant * 2^-24, exactly representable as a float.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  /// Round to nearest even, overflow to infinity, NaN stays NaN.
  static constexpr std::uint16_t from_float(float f) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
    if (a < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
      if (a < 0x33000000u) return sign;  // < 2^-25 rounds to zero
      const std::uint32_t exp = a >> 23;
      const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
      const std::uint32_t shift = 126 - exp;  // 14..24 here
      std::uint32_t r = mant >> shift;
      const std::uint32_t rem = mant & ((1u << shift) - 1u);
      const std::uint32_t half = 1u << (shift - 1);
      if (rem > half || (rem == half && (r & 1u))) ++r;
      return static_cast<std::uint16_t>(sign | r);
    }
    std::uint32_t r = a - 0x38000000u;  // rebias exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  friend constexpr bool operator==(float16 a, float16 b) noexcept { return float(a) == float(b); }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);

}  // namespace tutti
