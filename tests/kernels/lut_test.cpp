// The decode tables every fast backend reads, against the scalar numerics they are built from.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/lut.h"
#include "numerics/scalar_formats.h"

namespace fp4serve::kernels {
namespace {

float bf16_to_float(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// AMX decodes a block with one word permute into e2m1_scaled_bf16[scale]: every entry must be
// the exact product (bf16 holds it), NaN for the NaN scale codes, and keep the sign of zero.
TEST(DecodeTables, ScaledBf16TablesHoldEveryProductExactly) {
  const DecodeTables& t = decode_tables();
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 16; ++c) {
      const float want = e2m1_to_float(static_cast<std::uint8_t>(c)) * e4m3_to_float(static_cast<std::uint8_t>(s));
      const float got = bf16_to_float(t.e2m1_scaled_bf16[s][c]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "scale " << s << " code " << c;
        continue;
      }
      EXPECT_EQ(got, want) << "scale " << s << " code " << c;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << "scale " << s << " code " << c;
    }
}

}  // namespace
}  // namespace fp4serve::kernels
