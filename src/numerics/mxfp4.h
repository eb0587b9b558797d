#pragma once
// MXFP4 (OCP microscaling): 32 E2M1 elements share one UE8M0 power-of-two scale; no tensor scale.
#include <cstdint>
#include <span>

namespace fp4serve::mxfp4 {

inline constexpr int kBlock = 32;

// packed: rows*cols/2 bytes (low nibble = even element); scales: rows*cols/32 UE8M0 codes.
void dequantize(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> scales, std::int64_t rows,
                std::int64_t cols, std::span<float> out);

}  // namespace fp4serve::mxfp4
