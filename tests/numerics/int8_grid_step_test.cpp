// The int8 activation grid's step (numerics/int8_grid_step.h): a bf16 value just above max / 127,
// so every grid value q * step splits into two bf16 parts exactly (what amx-int8's tiles rely on).
#include "numerics/int8_grid_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "numerics/scalar_formats.h"

namespace fp4serve::numerics {
namespace {

bool is_bf16(float v) { return bf16_to_float(float_to_bf16(v)) == v; }

// Round to nearest even bf16, as vcvtne2ps2bf16 does for normal inputs.
float to_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

TEST(Int8GridStep, IsABf16ValueJustAboveMaxOver127) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-100, 100);
  for (int i = 0; i < 100000; ++i) {
    const float max = std::ldexp(mantissa(gen), exponent(gen));
    const float step = int8_grid_step(max);
    ASSERT_TRUE(is_bf16(step)) << max;
    // Never below max / 127 (so |q| <= 127) and at most one bf16 ulp (2^-7 relative) above it.
    ASSERT_GE(static_cast<double>(step) * 127.0, static_cast<double>(max) * (1 - 1e-7)) << max;
    ASSERT_LE(static_cast<double>(step), static_cast<double>(max) / 127.0 * (1 + 0x1p-7 + 1e-6)) << max;
    ASSERT_LE(std::fabs(std::nearbyint(max * int8_grid_inverse(step))), 127.0f) << max;
  }
  EXPECT_EQ(int8_grid_step(127.0f), 1.0f);  // already a bf16 quotient: unchanged
}

TEST(Int8GridStep, EveryGridValueIsTwoBf16PartsExactly) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-60, 60);
  for (int i = 0; i < 2000; ++i) {
    const float step = int8_grid_step(std::ldexp(mantissa(gen), exponent(gen)));
    for (int q = -127; q <= 127; ++q) {
      const float v = static_cast<float>(q) * step;
      const float hi = to_bf16(v), lo = to_bf16(v - hi);
      ASSERT_EQ(hi + lo, v) << "q=" << q << " step=" << step;
    }
  }
}

TEST(Int8GridStep, ZeroAndTinyBlocks) {
  EXPECT_EQ(int8_grid_step(0.0f), 0.0f);
  EXPECT_EQ(int8_grid_inverse(0.0f), 0.0f);  // a zero block scales to zeros, not NaN
  // A subnormal max: max / 127 would underflow towards 0; the step stays FLT_MIN and q in range.
  const float tiny = std::numeric_limits<float>::denorm_min() * 1000;
  const float step = int8_grid_step(tiny);
  EXPECT_EQ(step, std::numeric_limits<float>::min());
  EXPECT_LE(std::fabs(std::nearbyint(tiny * int8_grid_inverse(step))), 127.0f);
  // The largest finite max stays finite.
  EXPECT_TRUE(std::isfinite(int8_grid_step(std::numeric_limits<float>::max())));
}

}  // namespace
}  // namespace fp4serve::numerics
