// MXFP4 dequantization (OCP microscaling, gpt-oss checkpoints). The block scale is a power of
// two, so e2m1 * 2^(e-127) is exact in fp32 (even 0.5 * 2^-127 is representable, as a
// subnormal) unless it overflows to Inf (scale codes >= 253); no operation order can change it.
#include "numerics/mxfp4.h"

#include <cstddef>

#include "numerics/scalar_formats.h"
#include "util/error.h"

namespace fp4serve::mxfp4 {

void dequantize(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> scales, std::int64_t rows,
                std::int64_t cols, std::span<float> out) {
  if (rows < 0) fail("mxfp4::dequantize: rows must be >= 0, got ", rows);
  if (cols < 0 || cols % kBlock != 0) {
    fail("mxfp4::dequantize: cols must be a non-negative multiple of ", kBlock, ", got ", cols);
  }
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (packed.size() < n / 2) fail("mxfp4::dequantize: span 'packed' has ", packed.size(), " bytes, needs ", n / 2);
  if (scales.size() < n / kBlock) {
    fail("mxfp4::dequantize: span 'scales' has ", scales.size(), " bytes, needs ", n / kBlock);
  }
  if (out.size() < n) fail("mxfp4::dequantize: span 'out' has ", out.size(), " elements, needs ", n);
  for (std::size_t b = 0; b < n / kBlock; ++b) {
    const float s = ue8m0_to_float(scales[b]);  // 0xFF is NaN, which poisons the whole block
    for (std::size_t k = b * kBlock; k < (b + 1) * kBlock; ++k) {
      // Low nibble = even element, as in NVFP4.
      const auto byte = packed[k / 2];
      const auto code = static_cast<std::uint8_t>(k % 2 == 0 ? (byte & 0x0F) : (byte >> 4));
      out[k] = e2m1_to_float(code) * s;
    }
  }
}

}  // namespace fp4serve::mxfp4
