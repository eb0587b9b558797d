// MXFP4 dequantization properties; bit-exact agreement with ModelOpt is in golden_test.cpp.
#include "numerics/mxfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "numerics/scalar_formats.h"
#include "util/error.h"

namespace fp4serve::mxfp4 {
namespace {

TEST(Mxfp4, EveryCodeTimesPowerOfTwoScaleWithLowNibbleFirst) {
  // Two rows of one block each; byte j holds elements 2j (low) and 2j+1 (high).
  std::vector<std::uint8_t> packed(32);
  for (int j = 0; j < 32; ++j) packed[j] = static_cast<std::uint8_t>(((j + 1) % 16) << 4 | (j % 16));
  const std::vector<std::uint8_t> scales = {127 + 3, 127 - 2};  // 2^3 and 2^-2
  std::vector<float> out(64);
  dequantize(packed, scales, 2, 32, out);
  for (int k = 0; k < 64; ++k) {
    const int j = k / 2;
    const int code = (k % 2 == 0) ? j % 16 : (j + 1) % 16;
    const double scale = k < 32 ? 8.0 : 0.25;
    EXPECT_EQ(static_cast<double>(out[k]), e2m1_to_float(static_cast<std::uint8_t>(code)) * scale) << k;
  }
}

TEST(Mxfp4, ExtremeScales) {
  std::vector<std::uint8_t> packed(16, 0x71);  // 0.5 then 6.0
  std::vector<float> out(32);
  dequantize(packed, std::vector<std::uint8_t>{0}, 1, 32, out);
  EXPECT_EQ(static_cast<double>(out[0]), std::ldexp(0.5, -127)) << "smallest product is an fp32 subnormal";
  EXPECT_EQ(static_cast<double>(out[1]), std::ldexp(6.0, -127));
  dequantize(packed, std::vector<std::uint8_t>{254}, 1, 32, out);
  EXPECT_EQ(static_cast<double>(out[0]), std::ldexp(0.5, 127));
  EXPECT_TRUE(std::isinf(out[1])) << "6 * 2^127 overflows fp32";
  dequantize(packed, std::vector<std::uint8_t>{0xFF}, 1, 32, out);
  for (float v : out) EXPECT_TRUE(std::isnan(v)) << "scale 0xFF is NaN";
}

TEST(Mxfp4, BadSizesThrowNamingTheParameter) {
  std::vector<std::uint8_t> packed(16), scales(1);
  std::vector<float> out(32);
  auto message_of = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "no exception";
  };
  EXPECT_NE(message_of([&] { dequantize(packed, scales, 1, 16, out); }).find("cols"), std::string::npos);
  EXPECT_NE(message_of([&] { dequantize(packed, scales, 2, 32, out); }).find("'packed'"), std::string::npos);
  EXPECT_NE(message_of([&] { dequantize(packed, {}, 1, 32, out); }).find("'scales'"), std::string::npos);
  EXPECT_NE(message_of([&] { dequantize(packed, scales, 1, 32, std::span(out).first(31)); }).find("'out'"),
            std::string::npos);
  EXPECT_NE(message_of([&] { dequantize(packed, scales, -1, 32, out); }).find("rows"), std::string::npos);
}

}  // namespace
}  // namespace fp4serve::mxfp4
