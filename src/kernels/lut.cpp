#include "kernels/lut.h"

#include "numerics/scalar_formats.h"

namespace fp4serve::kernels {

const DecodeTables& decode_tables() {
  static const DecodeTables tables = [] {
    DecodeTables t{};
    for (int c = 0; c < 16; ++c) t.e2m1[c] = e2m1_to_float(static_cast<std::uint8_t>(c));
    for (int c = 0; c < 8; ++c) t.e2m1_mag[c] = t.e2m1[c];
    for (int c = 0; c < 256; ++c) t.e4m3[c] = e4m3_to_float(static_cast<std::uint8_t>(c));
    return t;
  }();
  return tables;
}

}  // namespace fp4serve::kernels
