// Scalar conversions between fp32 and the 16-bit float formats, round-to-nearest-even, NaNs kept quiet.
// The SIMD kernels use these for row tails, the reference uses them for everything, and
// tests/float16_test.cc checks them exhaustively.
#pragma once

#include <cstdint>
#include <cstring>

namespace moegrad {

inline uint32_t F32Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float F32FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float F32FromBF16Bits(uint16_t h) { return F32FromBits(static_cast<uint32_t>(h) << 16); }

inline uint16_t BF16BitsFromF32(float f) {
  uint32_t u = F32Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float F32FromF16Bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return F32FromBits(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  if (exp != 0) return F32FromBits(sign | ((exp + 112u) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in fp32.
  const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -mag : mag;
}

inline uint16_t F16BitsFromF32(float f) {
  const uint32_t u = F32Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value / 2^-24 rounded to an integer, ties to even.
    if (abs < 0x33000000u) return sign;  // < 2^-25: rounds to zero
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24 (value = mant * 2^(exp-150); target unit 2^-24)
    const uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias and round the 13 dropped mantissa bits to nearest even (a carry may bump the exponent).
  const uint32_t v = abs - (112u << 23);
  const uint32_t r = (v + 0xfffu + ((v >> 13) & 1u)) >> 13;
  return static_cast<uint16_t>(sign | r);
}

}  // namespace moegrad
