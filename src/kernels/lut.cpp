#include "kernels/lut.h"

#include <cstring>

#include "numerics/scalar_formats.h"

namespace fp4serve::kernels {

const DecodeTables& decode_tables() {
  static const DecodeTables tables = [] {
    DecodeTables t{};
    for (int c = 0; c < 16; ++c) t.e2m1[c] = e2m1_to_float(static_cast<std::uint8_t>(c));
    for (int c = 0; c < 8; ++c) t.e2m1_mag[c] = t.e2m1[c];
    for (int c = 0; c < 256; ++c) t.e4m3[c] = e4m3_to_float(static_cast<std::uint8_t>(c));
    for (int s = 0; s < 256; ++s)
      for (int c = 0; c < 16; ++c) {
        const float v = t.e2m1[c] * t.e4m3[s];  // exact, so dropping the low half is exact too
        std::uint32_t bits;
        std::memcpy(&bits, &v, sizeof(bits));
        t.e2m1_scaled_bf16[s][c] = static_cast<std::uint16_t>(bits >> 16);
      }
    return t;
  }();
  return tables;
}

}  // namespace fp4serve::kernels
