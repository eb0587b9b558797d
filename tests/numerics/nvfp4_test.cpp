// Property tests of NVFP4 quantization: nibble order, zero blocks, scale selection, round-trip
// error bounds, argument checking, and the size of the compressed-tensors/ModelOpt difference.
// Bit-exact agreement with the real tools is in golden_test.cpp.
#include "numerics/nvfp4.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "numerics/scalar_formats.h"
#include "util/error.h"

namespace fp4serve::nvfp4 {
namespace {

struct Quantized {
  std::vector<std::uint8_t> packed;
  std::vector<std::uint8_t> scales;
};

Quantized quantize_modelopt(const std::vector<float>& w, std::int64_t rows, std::int64_t cols, float ws2) {
  Quantized q{std::vector<std::uint8_t>(w.size() / 2), std::vector<std::uint8_t>(w.size() / kBlock)};
  quantize(w, rows, cols, ws2, q.packed, q.scales);
  return q;
}

std::uint8_t code_at(const std::vector<std::uint8_t>& packed, std::size_t k) {
  return static_cast<std::uint8_t>(k % 2 == 0 ? packed[k / 2] & 0x0F : packed[k / 2] >> 4);
}

std::vector<float> gaussian(std::size_t n, std::uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::int64_t ulp_distance(float a, float b) {
  auto key = [](float x) {
    const auto i = std::bit_cast<std::int32_t>(x);
    return i < 0 ? static_cast<std::int64_t>(INT32_MIN) - i : static_cast<std::int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}

TEST(Nvfp4, GlobalScaleIsAmaxOver2688) {
  EXPECT_EQ(global_scale_from_amax(2688.0f), 1.0f);
  EXPECT_EQ(global_scale_from_amax(6.0f), 6.0f / 2688.0f);
  const std::vector<float> v = {0.5f, -7.25f, 3.0f, -0.0f};
  EXPECT_EQ(amax(v), 7.25f);
  EXPECT_EQ(amax(std::vector<float>{}), 0.0f);
  EXPECT_TRUE(std::isnan(amax(std::vector<float>{1.0f, NAN, 2.0f})));
}

TEST(Nvfp4, NibbleOrderEvenElementInLowNibble) {
  // ws2 = 2^-8 makes the block scale exactly 256 for a block amax of 6, so w / (256 * ws2) = w.
  std::vector<float> w(16, 0.0f);
  w[0] = 0.5f;   // code 1
  w[1] = 6.0f;   // code 7
  w[2] = -1.0f;  // code 0xA
  w[5] = 3.0f;   // code 5, high nibble of byte 2
  const Quantized q = quantize_modelopt(w, 1, 16, 0x1p-8f);
  EXPECT_EQ(q.scales[0], float_to_e4m3_torch(256.0f));
  EXPECT_EQ(q.packed[0], 0x71);
  EXPECT_EQ(q.packed[1], 0x0A);
  EXPECT_EQ(q.packed[2], 0x50);
  for (std::size_t i = 3; i < 8; ++i) EXPECT_EQ(q.packed[i], 0x00) << i;

  std::vector<float> out(16);
  dequantize(q.packed, q.scales, 0x1p-8f, 1, 16, out);
  EXPECT_EQ(out, w);
}

TEST(Nvfp4, AllZeroBlocksGetScaleOneAndZeroCodes) {
  std::vector<float> w = gaussian(64, 1, 1.0f);
  for (int k = 16; k < 32; ++k) w[k] = 0.0f;
  for (int k = 48; k < 64; ++k) w[k] = (k % 2) ? -0.0f : 0.0f;
  const float ws2 = global_scale_from_amax(amax(w));
  const Quantized q = quantize_modelopt(w, 2, 32, ws2);
  EXPECT_EQ(q.scales[1], 0x38);
  EXPECT_EQ(q.scales[3], 0x38);
  EXPECT_NE(q.scales[0], 0x38);
  for (std::size_t k = 16; k < 32; ++k) EXPECT_EQ(code_at(q.packed, k), 0) << k;
  for (std::size_t k = 48; k < 64; ++k) EXPECT_EQ(code_at(q.packed, k), 0) << "-0.0 gets no sign bit " << k;

  // compressed-tensors replaces a zero scale by its FP8 "eps" 0.125 instead.
  std::vector<std::uint8_t> packed(32), scales(4);
  quantize_ct(w, 2, 32, ct_global_scale_from_amax(amax(w)), packed, scales);
  EXPECT_EQ(scales[1], 0x20);
  EXPECT_EQ(scales[3], 0x20);
}

TEST(Nvfp4, TinyBlocksClampToSmallestSubnormalScale) {
  // Block amax / tensor amax = 1e-7: the exact block scale 448e-7 is far below 2^-9.
  std::vector<float> w(32, 0.0f);
  w[0] = 1.0f;
  w[16] = 1e-7f;
  w[17] = -0.6e-7f;
  const Quantized q = quantize_modelopt(w, 1, 32, global_scale_from_amax(1.0f));
  EXPECT_EQ(q.scales[1], 0x01);
  // compressed-tensors rounds that scale to 0 in E4M3 and then substitutes 0.125.
  std::vector<std::uint8_t> packed(16), scales(2);
  quantize_ct(w, 1, 32, ct_global_scale_from_amax(1.0f), packed, scales);
  EXPECT_EQ(scales[1], 0x20);
}

TEST(Nvfp4, BlockScaleIsAmaxOverSixWithinE4M3Precision) {
  const std::vector<float> w = gaussian(64 * 128, 2, 0.02f);
  const float ws2 = global_scale_from_amax(amax(w));
  const Quantized q = quantize_modelopt(w, 64, 128, ws2);
  for (std::size_t b = 0; b < q.scales.size(); ++b) {
    const float exact = amax(std::span(w).subspan(b * kBlock, kBlock)) / (6.0f * ws2);
    const float got = e4m3_to_float(q.scales[b]);
    ASSERT_LE(exact, 448.0f * 1.0001f);
    // Normal E4M3: relative rounding error <= 2^-4; subnormal: absolute error <= 2^-10.
    ASSERT_LE(std::fabs(got - exact), std::max(exact * 0x1p-4f, 0x1p-10f)) << "block " << b;
  }
}

TEST(Nvfp4, EveryCodeIsTheNearestE2M1ValueAndErrorIsBounded) {
  std::vector<float> w = gaussian(32 * 256, 3, 0.05f);
  w[77] = 3.0f;  // an outlier shrinks every other block's scale
  const std::int64_t rows = 32;
  const std::int64_t cols = 256;
  const float ws2 = global_scale_from_amax(amax(w));
  const Quantized q = quantize_modelopt(w, rows, cols, ws2);
  std::vector<float> out(w.size());
  dequantize(q.packed, q.scales, ws2, rows, cols, out);
  double err2 = 0.0;
  double ref2 = 0.0;
  for (std::size_t k = 0; k < w.size(); ++k) {
    const float denom = e4m3_to_float(q.scales[k / kBlock]) * ws2;
    const float scaled = w[k] / denom;
    const std::uint8_t code = code_at(q.packed, k);
    const float chosen = e2m1_to_float(code);
    // No other representable value is strictly closer (saturation: 6 is the closest beyond 6).
    for (int c = 0; c < 16; ++c) {
      ASSERT_LE(std::fabs(scaled - chosen), std::fabs(scaled - e2m1_to_float(static_cast<std::uint8_t>(c))))
          << "element " << k << " scaled " << scaled;
    }
    // The block scale is rounded to E4M3 (<= 2^-4 relative), so |scaled| stays below 6.375+.
    ASSERT_LE(std::fabs(scaled), 6.0f * (1.0f + 0x1p-4f) * 1.0001f) << k;
    // Dequantization multiplies back: the error is half a step of the E2M1 grid, at most 1.
    const float step_half = std::fabs(scaled) <= 2.0f ? 0.25f : std::fabs(scaled) <= 4.0f ? 0.5f : 1.0f;
    ASSERT_LE(std::fabs(w[k] - out[k]), step_half * denom * 1.0001f) << k;
    err2 += (w[k] - out[k]) * static_cast<double>(w[k] - out[k]);
    ref2 += w[k] * static_cast<double>(w[k]);
  }
  // Gaussian data loses about 10% (relative RMS) at 4 bits; this catches gross regressions.
  EXPECT_LT(std::sqrt(err2 / ref2), 0.15);
}

TEST(Nvfp4, DequantizeIsE2M1TimesScaleTimesWs2InFp32) {
  std::vector<std::uint8_t> packed(8);
  std::vector<std::uint8_t> scales(1);
  for (int i = 0; i < 8; ++i) packed[i] = static_cast<std::uint8_t>((2 * i + 1) << 4 | (2 * i));
  scales[0] = 0x4D;  // 6.5, an arbitrary E4M3 value
  const float ws2 = 0.000123f;
  std::vector<float> out(16);
  dequantize(packed, scales, ws2, 1, 16, out);
  const float s = e4m3_to_float(0x4D) * ws2;
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(out[k]),
              std::bit_cast<std::uint32_t>(e2m1_to_float(static_cast<std::uint8_t>(k)) * s))
        << k;
  }
}

TEST(Nvfp4, CompressedTensorsDequantDiffersByAtMostAnUlpFromModelOpt) {
  // CT divides by its global scale, ModelOpt multiplies by ws2 = 1/global. Over many scales the
  // two orders disagree in the last bit sometimes, never by more than one ulp of the block scale
  // (and so two ulps of the product with a 2-bit E2M1 value).
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> amax_dist(1e-3f, 1e3f);
  int scale_diffs = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const float global = ct_global_scale_from_amax(amax_dist(rng));
    const float ws2 = 1.0f / global;
    for (int sc = 0x01; sc < 0x7F; sc += 3) {
      const float ct = e4m3_to_float(static_cast<std::uint8_t>(sc)) / global;
      const float mo = e4m3_to_float(static_cast<std::uint8_t>(sc)) * ws2;
      const std::int64_t d = ulp_distance(ct, mo);
      ASSERT_LE(d, 1) << "global " << global << " scale code " << sc;
      scale_diffs += d != 0;
    }
  }
  EXPECT_GT(scale_diffs, 0) << "the two operation orders should not always agree";

  std::vector<float> w = gaussian(16 * 64, 5, 0.3f);
  const float global = ct_global_scale_from_amax(amax(w));
  std::vector<std::uint8_t> packed(w.size() / 2), scales(w.size() / kBlock);
  quantize_ct(w, 16, 64, global, packed, scales);
  std::vector<float> ct(w.size()), mo(w.size());
  dequantize_ct(packed, scales, global, 16, 64, ct);
  dequantize(packed, scales, 1.0f / global, 16, 64, mo);
  for (std::size_t k = 0; k < w.size(); ++k) ASSERT_LE(ulp_distance(ct[k], mo[k]), 2) << k;
}

TEST(Nvfp4, CtGlobalScaleEdgeCases) {
  EXPECT_EQ(ct_global_scale_from_amax(1.0f), (1.0f / 1.0f) * 2688.0f);
  EXPECT_EQ(ct_global_scale_from_amax(3.0f), (1.0f / 3.0f) * 2688.0f);
  EXPECT_EQ(ct_global_scale_from_amax(0.0f), 1.0f) << "2688 / FLT_MIN overflows; nan_to_num -> 1";
  EXPECT_EQ(ct_global_scale_from_amax(NAN), 1.0f);
}

TEST(Nvfp4, ActivationsRoundTripWithinHalfAStep) {
  std::vector<float> x = gaussian(8 * 64, 11, 2.0f);
  for (int k = 64; k < 128; ++k) x[k] = 0.0f;  // a zero row
  const float input_scale = amax(x) / 2688.0f;
  const float global = 1.0f / input_scale;
  std::vector<std::uint8_t> packed(x.size() / 2), scales(x.size() / kBlock);
  quantize_activations(x, 8, 64, global, packed, scales);
  std::vector<float> out(x.size());
  dequantize_activations(packed, scales, global, 8, 64, out);
  for (std::size_t b = 4; b < 8; ++b) EXPECT_EQ(scales[b], 0x00) << "zero block keeps scale 0";
  for (std::size_t k = 0; k < x.size(); ++k) {
    const float s = e4m3_to_float(scales[k / kBlock]) / global;
    if (s == 0.0f) {
      ASSERT_EQ(out[k], 0.0f);
      continue;
    }
    const float scaled = std::fabs(x[k] / s);
    const float step_half = scaled <= 2.0f ? 0.25f : scaled <= 4.0f ? 0.5f : 1.0f;
    ASSERT_LE(std::fabs(x[k] - out[k]), step_half * s * 1.0001f) << k;
  }
}

TEST(Nvfp4, ActivationsBeyondCalibrationSaturate) {
  // Calibrated for amax 1 but fed 100: the block scale clamps at 448 and elements at +-6.
  std::vector<float> x(16, 100.0f);
  x[3] = -100.0f;
  const float global = 2688.0f / 1.0f;
  std::vector<std::uint8_t> packed(8), scales(1);
  quantize_activations(x, 1, 16, global, packed, scales);
  EXPECT_EQ(scales[0], 0x7E);
  EXPECT_EQ(code_at(packed, 0), 0x7);
  EXPECT_EQ(code_at(packed, 3), 0xF);
}

TEST(Nvfp4, BadArgumentsThrowNamingTheParameter) {
  std::vector<float> w(32, 1.0f);
  std::vector<std::uint8_t> packed(16), scales(2);
  auto message_of = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "no exception";
  };
  EXPECT_NE(message_of([&] { quantize(w, 2, 15, 1.0f, packed, scales); }).find("cols"), std::string::npos);
  EXPECT_NE(message_of([&] { quantize(w, -1, 16, 1.0f, packed, scales); }).find("rows"), std::string::npos);
  EXPECT_NE(message_of([&] { quantize(w, 4, 16, 1.0f, packed, scales); }).find("'w'"), std::string::npos);
  EXPECT_NE(message_of([&] { quantize(w, 1, 32, 1.0f, std::span(packed).first(15), scales); }).find("'packed'"),
            std::string::npos);
  EXPECT_NE(message_of([&] { quantize(w, 1, 32, 1.0f, packed, std::span(scales).first(1)); }).find("'block_scales'"),
            std::string::npos);
  EXPECT_NE(message_of([&] { quantize(w, 1, 32, 0.0f, packed, scales); }).find("weight_scale_2"), std::string::npos);
  EXPECT_NE(message_of([&] { quantize(w, 1, 32, NAN, packed, scales); }).find("weight_scale_2"), std::string::npos);
  EXPECT_NE(message_of([&] { quantize_ct(w, 1, 32, -1.0f, packed, scales); }).find("global_scale"), std::string::npos);
  std::vector<float> out(31);
  EXPECT_NE(message_of([&] { dequantize(packed, scales, 1.0f, 1, 32, out); }).find("'out'"), std::string::npos);
  EXPECT_NE(message_of([&] { dequantize_ct(packed, scales, 1.0f, 1, 24, out); }).find("cols"), std::string::npos);
  EXPECT_NE(message_of([&] { quantize_activations(w, 1, 8, 1.0f, packed, scales); }).find("cols"), std::string::npos);
  EXPECT_NE(message_of([&] { dequantize_activations(packed, std::span(scales).first(1), 1.0f, 1, 32, w); })
                .find("'block_scales'"),
            std::string::npos);
  // Zero-sized problems are fine.
  EXPECT_NO_THROW(quantize({}, 0, 16, 1.0f, {}, {}));
}

}  // namespace
}  // namespace fp4serve::nvfp4
