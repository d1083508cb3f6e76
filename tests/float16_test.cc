// The scalar fp32 <-> fp16 / bf16 conversions every other test and the reference rely on, exhaustively:
// every 16-bit pattern round-trips, and narrowing agrees with an independent round-to-nearest-even built
// from double arithmetic on a dense sample of fp32 values.
#include <cmath>
#include <cstdint>

#include <gtest/gtest.h>

#include "src/testing/float16.h"

namespace moegrad {
namespace {

// Independent narrowing: pick the nearer of the two representable neighbours (ties to even mantissa).
template <typename Widen>
uint16_t NearestEven(float f, Widen widen, int inf_exponent) {
  if (std::isnan(f)) return 0;
  uint16_t best = 0;
  double best_err = INFINITY;
  // Candidates: every pattern with the same sign (search restricted by monotonicity would be faster,
  // but a table of all 32768 magnitudes is small enough).
  static thread_local double table[65536];
  static thread_local int built_for = 0;
  if (built_for != inf_exponent) {
    for (uint32_t h = 0; h < 65536; ++h) table[h] = widen(static_cast<uint16_t>(h));
    built_for = inf_exponent;
  }
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  for (uint32_t m = 0; m < 0x8000; ++m) {
    const uint16_t h = static_cast<uint16_t>(sign | m);
    if (std::isnan(table[h])) continue;
    // Rounding treats infinity as the next power of two past the largest finite value.
    const double value = std::isinf(table[h]) ? std::copysign(std::ldexp(1.0, inf_exponent), table[h]) : table[h];
    const double err = std::fabs(value - static_cast<double>(f));
    if (err < best_err || (err == best_err && (h & 1) == 0)) {
      best_err = err;
      best = h;
    }
  }
  return best;
}

TEST(Float16, EveryPatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f16 = F32FromF16Bits(bits);
    const float bf16 = F32FromBF16Bits(bits);
    if (std::isnan(f16)) {
      EXPECT_TRUE(std::isnan(F32FromF16Bits(F16BitsFromF32(f16)))) << h;
    } else {
      EXPECT_EQ(F16BitsFromF32(f16), bits) << h;
    }
    if (std::isnan(bf16)) {
      EXPECT_TRUE(std::isnan(F32FromBF16Bits(BF16BitsFromF32(bf16)))) << h;
      EXPECT_EQ(BF16BitsFromF32(bf16) & 0x40, 0x40) << "NaN must stay quiet " << h;
    } else {
      EXPECT_EQ(BF16BitsFromF32(bf16), bits) << h;
    }
  }
}

TEST(Float16, F16WideningIsExact) {
  EXPECT_EQ(F32FromF16Bits(0x3c00), 1.0f);
  EXPECT_EQ(F32FromF16Bits(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F32FromF16Bits(0x7bff), 65504.0f);
  EXPECT_EQ(F32FromF16Bits(0xc000), -2.0f);
  EXPECT_TRUE(std::isinf(F32FromF16Bits(0x7c00)));
}

TEST(Float16, NarrowingRoundsToNearestEven) {
  // Values between and exactly halfway between representable neighbours, across the whole range,
  // including subnormals and the overflow threshold.
  uint64_t state = 12345;
  for (int n = 0; n < 20000; ++n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t bits = static_cast<uint32_t>(state >> 32);
    if (n % 4 == 0) bits &= 0xffff0000u | 0x00008000u;  // exact bf16 halfway cases
    if (n % 4 == 1) bits = (bits & 0xffffe000u) | 0x1000u;  // exact f16 halfway cases (normal range)
    const float f = F32FromBits(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(BF16BitsFromF32(f), NearestEven(f, [](uint16_t h) { return (double)F32FromBF16Bits(h); }, 128))
        << std::hexfloat << f;
    const double mag = std::fabs(static_cast<double>(f));
    if (mag < 65520.0 && mag < 1e6) {
      ASSERT_EQ(F16BitsFromF32(f), NearestEven(f, [](uint16_t h) { return (double)F32FromF16Bits(h); }, 16))
          << std::hexfloat << f;
    }
  }
  EXPECT_EQ(F16BitsFromF32(65520.0f), 0x7c00);  // halfway to 2^16 rounds to infinity
  EXPECT_EQ(F16BitsFromF32(65519.0f), 0x7bff);
  EXPECT_EQ(F16BitsFromF32(std::ldexp(1.0f, -25)), 0x0000);          // halfway to the least subnormal: even
  EXPECT_EQ(F16BitsFromF32(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(F16BitsFromF32(std::ldexp(3.0f, -25)), 0x0002);          // 1.5 ulp ties to even (2)
}

}  // namespace
}  // namespace moegrad
