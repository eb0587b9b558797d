// Exhaustive tests of the scalar formats: every code is decoded, checked against an independent
// derivation of its value, encoded back, and every rounding boundary between two neighbouring
// codes (the midpoint and the floats on either side of it) is probed.
#include "numerics/scalar_formats.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace fp4serve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float up(float x) { return std::nextafter(x, kInf); }
float down(float x) { return std::nextafter(x, -kInf); }

// Positive finite codes of a format, in increasing value order, with their values.
struct Ladder {
  std::vector<std::uint32_t> codes;
  std::vector<float> values;
};

// Probes the rounding boundary between every pair of neighbouring codes of `ladder`:
// the midpoint goes to the code with the even mantissa (the even code), a float just below it to
// the lower code, just above it to the upper code; and each exact value maps to itself.
// Negative inputs must give the same code with the sign bit set.
void check_round_to_nearest_even(const Ladder& ladder, const std::function<std::uint32_t(float)>& encode,
                                 std::uint32_t sign_bit) {
  for (std::size_t i = 0; i < ladder.codes.size(); ++i) {
    const float v = ladder.values[i];
    const std::uint32_t c = ladder.codes[i];
    ASSERT_EQ(encode(v), c) << "exact value " << v;
    if (v != 0.0f) {
      ASSERT_EQ(encode(-v), c | sign_bit) << "exact value " << -v;
    }
    if (i + 1 == ladder.codes.size()) break;
    const float next = ladder.values[i + 1];
    const std::uint32_t next_code = ladder.codes[i + 1];
    const double mid_d = (static_cast<double>(v) + next) / 2;
    const auto mid = static_cast<float>(mid_d);
    ASSERT_EQ(static_cast<double>(mid), mid_d) << "midpoint not exact in fp32";
    const std::uint32_t even = (c % 2 == 0) ? c : next_code;
    ASSERT_EQ(encode(mid), even) << "tie at " << mid;
    ASSERT_EQ(encode(down(mid)), c) << "below tie " << mid;
    ASSERT_EQ(encode(up(mid)), next_code) << "above tie " << mid;
    ASSERT_EQ(encode(-mid), even | sign_bit) << "tie at " << -mid;
    ASSERT_EQ(encode(-up(mid)), next_code | sign_bit) << "above tie " << -mid;
  }
}

// Decoded values of consecutive codes must increase strictly over the given range.
template <class Decode>
void check_strictly_increasing(std::uint32_t first, std::uint32_t last, Decode decode) {
  for (std::uint32_t c = first; c < last; ++c) {
    ASSERT_LT(decode(c), decode(c + 1)) << "codes " << c << " and " << c + 1;
  }
}

// ---- E2M1 ----------------------------------------------------------------------------------

TEST(E2M1, DecodeMatchesBitLayoutForAllSixteenCodes) {
  for (int c = 0; c < 16; ++c) {
    const int e = (c >> 1) & 3;
    const int m = c & 1;
    // bias 1; e == 0 is subnormal: m * 2^(1-1) * 0.5
    const double mag = e == 0 ? 0.5 * m : (1.0 + 0.5 * m) * std::ldexp(1.0, e - 1);
    const double expected = (c & 8) ? -mag : mag;
    EXPECT_EQ(static_cast<double>(e2m1_to_float(static_cast<std::uint8_t>(c))), expected) << "code " << c;
  }
  EXPECT_FALSE(std::signbit(e2m1_to_float(8))) << "-0 decodes to +0.0 as in ModelOpt's table";
  EXPECT_EQ(e2m1_to_float(0xF7), 6.0f) << "only the low 4 bits are used";
}

TEST(E2M1, EncodeDecodeRoundTripsEveryCode) {
  for (int c = 0; c < 16; ++c) {
    const std::uint8_t back = float_to_e2m1(e2m1_to_float(static_cast<std::uint8_t>(c)));
    EXPECT_EQ(back, c == 8 ? 0 : c) << "code " << c;
  }
}

TEST(E2M1, RoundsToNearestTiesToEven) {
  Ladder ladder;
  for (std::uint32_t c = 0; c < 8; ++c) {
    ladder.codes.push_back(c);
    ladder.values.push_back(e2m1_to_float(static_cast<std::uint8_t>(c)));
  }
  check_round_to_nearest_even(ladder, [](float x) { return std::uint32_t{float_to_e2m1(x)}; }, 8);
}

TEST(E2M1, MatchesNearestValueOnADenseSweep) {
  // Reference by brute force: the representable magnitude closest to |x|, ties to the even code.
  for (int i = 0; i <= 9000; ++i) {
    const float x = static_cast<float>(i) / 1024.0f;
    int best = 0;
    for (int c = 1; c < 8; ++c) {
      const float dc = std::fabs(x - e2m1_to_float(static_cast<std::uint8_t>(c)));
      const float db = std::fabs(x - e2m1_to_float(static_cast<std::uint8_t>(best)));
      if (dc < db || (dc == db && c % 2 == 0)) best = c;
    }
    ASSERT_EQ(float_to_e2m1(x), best) << "x = " << x;
    ASSERT_EQ(float_to_e2m1(-x), x == 0.0f ? 0 : best | 8) << "x = " << -x;
  }
}

TEST(E2M1, SaturatesSignsAndNaN) {
  EXPECT_EQ(float_to_e2m1(5.0f), 6);  // tie between 4 and 6 -> 4 (code 6, even)
  EXPECT_EQ(float_to_e2m1(up(5.0f)), 7);
  EXPECT_EQ(float_to_e2m1(1e30f), 7);
  EXPECT_EQ(float_to_e2m1(kInf), 7);
  EXPECT_EQ(float_to_e2m1(-kInf), 15);
  EXPECT_EQ(float_to_e2m1(-0.0f), 0) << "sign bit is `x < 0`, as in ModelOpt";
  EXPECT_EQ(float_to_e2m1(-0.1f), 8) << "small negatives keep the sign: code 8";
  EXPECT_EQ(float_to_e2m1(-1e-40f), 8);
  EXPECT_EQ(float_to_e2m1(kNaN), 7) << "torch.searchsorted puts NaN past every bound";
  EXPECT_EQ(float_to_e2m1(-kNaN), 7);
}

// ---- E4M3 ----------------------------------------------------------------------------------

Ladder e4m3_ladder() {
  Ladder l;
  for (std::uint32_t c = 0; c <= 0x7E; ++c) {
    l.codes.push_back(c);
    l.values.push_back(e4m3_to_float(static_cast<std::uint8_t>(c)));
  }
  return l;
}

TEST(E4M3, DecodeAllCodes) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<std::uint8_t>(c));
    const int e = (c >> 3) & 0xF;
    const int m = c & 7;
    if (e == 0xF && m == 7) {
      EXPECT_TRUE(std::isnan(v)) << "code " << c;
      ++nans;
      continue;
    }
    ASSERT_FALSE(std::isnan(v)) << "code " << c;
    ASSERT_FALSE(std::isinf(v)) << "E4M3 fn has no Inf, code " << c;
    // Independent derivation for normals: rebias the exponent into an fp32 bit pattern.
    if (e != 0) {
      const std::uint32_t bits = (static_cast<std::uint32_t>(c & 0x80) << 24) |
                                 static_cast<std::uint32_t>(e - 7 + 127) << 23 |
                                 static_cast<std::uint32_t>(m) << 20;
      EXPECT_EQ(std::bit_cast<std::uint32_t>(v), bits) << "code " << c;
    } else {
      EXPECT_EQ(std::fabs(static_cast<double>(v)), m / 512.0) << "subnormal code " << c;
      EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << "code " << c;
    }
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  check_strictly_increasing(0, 0x7E, [](std::uint32_t c) { return e4m3_to_float(static_cast<std::uint8_t>(c)); });
}

TEST(E4M3, RoundTripEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const float v = e4m3_to_float(code);
    EXPECT_EQ(float_to_e4m3_torch(v), code) << "torch-style, code " << c;  // NaN keeps its sign
    if (std::isnan(v)) {
      EXPECT_EQ(float_to_e4m3_satfinite(v), 0x7F);
    } else {
      EXPECT_EQ(float_to_e4m3_satfinite(v), code) << "satfinite, code " << c;
    }
  }
}

TEST(E4M3, RoundsToNearestEvenIncludingSubnormals) {
  const Ladder l = e4m3_ladder();
  check_round_to_nearest_even(l, [](float x) { return std::uint32_t{float_to_e4m3_torch(x)}; }, 0x80);
  check_round_to_nearest_even(l, [](float x) { return std::uint32_t{float_to_e4m3_satfinite(x)}; }, 0x80);
  // Below half the smallest subnormal everything goes to zero; the tie 2^-10 goes to even (0).
  EXPECT_EQ(float_to_e4m3_torch(0x1p-10f), 0x00);
  EXPECT_EQ(float_to_e4m3_torch(up(0x1p-10f)), 0x01);
  EXPECT_EQ(float_to_e4m3_torch(1e-40f), 0x00);
  EXPECT_EQ(float_to_e4m3_torch(-1e-40f), 0x80);
}

TEST(E4M3, TorchCastOverflowsToNaNButSatfiniteSaturates) {
  EXPECT_EQ(float_to_e4m3_torch(464.0f), 0x7E) << "tie between 448 and the NaN slot -> even";
  EXPECT_EQ(float_to_e4m3_torch(up(464.0f)), 0x7F);
  EXPECT_EQ(float_to_e4m3_torch(479.0f), 0x7F);
  EXPECT_EQ(float_to_e4m3_torch(480.0f), 0x7F);
  EXPECT_EQ(float_to_e4m3_torch(-1e9f), 0xFF);
  EXPECT_EQ(float_to_e4m3_torch(kInf), 0x7F);
  EXPECT_EQ(float_to_e4m3_torch(-kNaN), 0xFF);
  for (float x : {up(464.0f), 480.0f, 1e9f, 3.0e38f, kInf}) {
    EXPECT_EQ(float_to_e4m3_satfinite(x), 0x7E) << x;
    EXPECT_EQ(float_to_e4m3_satfinite(-x), 0xFE) << -x;
  }
  EXPECT_EQ(float_to_e4m3_satfinite(kNaN), 0x7F);
  EXPECT_EQ(float_to_e4m3_satfinite(-kNaN), 0x7F);
}

TEST(E4M3, EncodeIsMonotonic) {
  // Sweep every fp32 exponent/mantissa-top combination from 2^-12 up past 480.
  float prev_value = -1.0f;
  for (float x = 0x1p-12f; x < 600.0f; x *= 1.0009765625f) {
    const float v = e4m3_to_float(float_to_e4m3_satfinite(x));
    ASSERT_GE(v, prev_value) << "x = " << x;
    prev_value = v;
  }
}

// ---- E5M2 ----------------------------------------------------------------------------------

TEST(E5M2, DecodeAllCodes) {
  for (int c = 0; c < 256; ++c) {
    const float v = e5m2_to_float(static_cast<std::uint8_t>(c));
    const int e = (c >> 2) & 0x1F;
    const int m = c & 3;
    if (e == 0x1F) {
      EXPECT_TRUE(m == 0 ? std::isinf(v) : std::isnan(v)) << "code " << c;
      continue;
    }
    // E5M2 is the top byte of an IEEE half, so decode via the FP16 decoder's bit pattern.
    const float via_half = fp16_to_float(static_cast<std::uint16_t>(c << 8));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(v), std::bit_cast<std::uint32_t>(via_half)) << "code " << c;
  }
  EXPECT_EQ(e5m2_to_float(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_float(0x01), 0x1p-16f);
  EXPECT_EQ(e5m2_to_float(0x7C), kInf);
  EXPECT_EQ(e5m2_to_float(0xFC), -kInf);
  check_strictly_increasing(0, 0x7C, [](std::uint32_t c) { return e5m2_to_float(static_cast<std::uint8_t>(c)); });
}

TEST(E5M2, RoundTripAndRounding) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const float v = e5m2_to_float(code);
    if (std::isnan(v)) {
      EXPECT_EQ(float_to_e5m2(v), (code & 0x80) | 0x7F) << "code " << c;
    } else {
      EXPECT_EQ(float_to_e5m2(v), code) << "code " << c;
    }
  }
  Ladder l;
  for (std::uint32_t c = 0; c <= 0x7B; ++c) {
    l.codes.push_back(c);
    l.values.push_back(e5m2_to_float(static_cast<std::uint8_t>(c)));
  }
  check_round_to_nearest_even(l, [](float x) { return std::uint32_t{float_to_e5m2(x)}; }, 0x80);
  EXPECT_EQ(float_to_e5m2(61440.0f), 0x7C) << "tie past the max rounds to even = Inf";
  EXPECT_EQ(float_to_e5m2(down(61440.0f)), 0x7B);
  EXPECT_EQ(float_to_e5m2(1e9f), 0x7C);
  EXPECT_EQ(float_to_e5m2(-kInf), 0xFC);
  EXPECT_EQ(float_to_e5m2(kNaN), 0x7F);
}

// ---- UE8M0 ---------------------------------------------------------------------------------

TEST(UE8M0, DecodeAllCodes) {
  for (int c = 0; c < 255; ++c) {
    const float v = ue8m0_to_float(static_cast<std::uint8_t>(c));
    EXPECT_EQ(static_cast<double>(v), std::ldexp(1.0, c - 127)) << "code " << c;
  }
  EXPECT_TRUE(std::isnan(ue8m0_to_float(0xFF)));
  EXPECT_EQ(ue8m0_to_float(127), 1.0f);
  check_strictly_increasing(0, 254, [](std::uint32_t c) { return ue8m0_to_float(static_cast<std::uint8_t>(c)); });
}

// ---- BF16 / FP16 ---------------------------------------------------------------------------

TEST(BF16, AllPatternsRoundTrip) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float v = bf16_to_float(bits);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(v), b << 16) << std::hex << b;
    const bool is_nan = (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
    ASSERT_EQ(std::isnan(v), is_nan) << std::hex << b;
    if (is_nan) {
      // NaN stays NaN with its sign; quiet NaNs come back bit for bit.
      const std::uint16_t back = float_to_bf16(v);
      ASSERT_TRUE(std::isnan(bf16_to_float(back))) << std::hex << b;
      ASSERT_EQ(back & 0x8000, b & 0x8000) << std::hex << b;
      if (b & 0x40) {
        ASSERT_EQ(back, bits) << std::hex << b;
      }
    } else {
      ASSERT_EQ(float_to_bf16(v), bits) << std::hex << b;
    }
  }
}

TEST(BF16, RoundsToNearestEvenAtEveryBoundary) {
  Ladder l;
  for (std::uint32_t c = 0; c <= 0x7F7F; ++c) {  // every finite non-negative value
    l.codes.push_back(c);
    l.values.push_back(bf16_to_float(static_cast<std::uint16_t>(c)));
  }
  check_round_to_nearest_even(l, [](float x) { return std::uint32_t{float_to_bf16(x)}; }, 0x8000);
  const float max_bf16 = bf16_to_float(0x7F7F);
  // max + half an ulp (2^127 * 2^-8) is a tie; max has an odd mantissa, so it rounds to Inf.
  const float tie = max_bf16 + std::ldexp(1.0f, 119);
  EXPECT_EQ(float_to_bf16(tie), 0x7F80);
  EXPECT_EQ(float_to_bf16(down(tie)), 0x7F7F);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-kInf), 0xFF80);
}

TEST(FP16, AllPatternsDecodeRoundTrip) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float v = fp16_to_float(bits);
    const std::uint32_t e = (b >> 10) & 0x1F;
    const std::uint32_t m = b & 0x3FF;
    const bool negative = (b & 0x8000) != 0;
    if (e == 0x1F) {
      ASSERT_EQ(std::isnan(v), m != 0) << std::hex << b;
      ASSERT_EQ(std::isinf(v), m == 0) << std::hex << b;
    } else if (e == 0) {
      ASSERT_EQ(static_cast<double>(v), (negative ? -1.0 : 1.0) * m * std::ldexp(1.0, -24)) << std::hex << b;
    } else {
      // Independent derivation: rebias the exponent into an fp32 bit pattern.
      const std::uint32_t expect = (negative ? 0x80000000u : 0u) | (e - 15 + 127) << 23 | m << 13;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(v), expect) << std::hex << b;
    }
    ASSERT_EQ(std::signbit(v), negative) << std::hex << b;
    const std::uint16_t back = float_to_fp16(v);
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(fp16_to_float(back))) << std::hex << b;
      ASSERT_EQ(back & 0x8000, b & 0x8000) << std::hex << b;
      if (b & 0x200) {
        ASSERT_EQ(back, bits) << "quiet NaN payload kept " << std::hex << b;
      }
    } else {
      ASSERT_EQ(back, bits) << std::hex << b;
    }
  }
}

TEST(FP16, RoundsToNearestEvenAtEveryBoundary) {
  Ladder l;
  for (std::uint32_t c = 0; c <= 0x7BFF; ++c) {
    l.codes.push_back(c);
    l.values.push_back(fp16_to_float(static_cast<std::uint16_t>(c)));
  }
  check_round_to_nearest_even(l, [](float x) { return std::uint32_t{float_to_fp16(x)}; }, 0x8000);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00) << "tie past 65504 (odd mantissa) -> Inf";
  EXPECT_EQ(float_to_fp16(down(65520.0f)), 0x7BFF);
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000) << "tie between 0 and the smallest subnormal -> 0";
  EXPECT_EQ(float_to_fp16(up(0x1p-25f)), 0x0001);
  EXPECT_EQ(float_to_fp16(-1e-30f), 0x8000);
  EXPECT_EQ(float_to_fp16(kInf), 0x7C00);
  EXPECT_EQ(float_to_fp16(1e6f), 0x7C00);
}

}  // namespace
}  // namespace fp4serve
