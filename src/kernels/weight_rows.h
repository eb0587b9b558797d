#pragma once
// Dequantization of one weight row to fp32, for every storage kind. The scalar building block of
// the reference backends, and the definition every fast backend must reproduce.
#include <cstdint>
#include <span>

#include "kernels/kernels.h"

namespace fp4serve::kernels {

// Bytes of one row of w's data: k / 2 for NVFP4 codes (their block scales lie apart), k for FP8,
// k x the element size for dense weights.
std::int64_t weight_row_bytes(const WeightMatrix& w);
// w's data, and its E4M3 block scales (empty unless NVFP4), as they lie in memory.
std::span<const std::uint8_t> weight_codes(const WeightMatrix& w);
std::span<const std::uint8_t> weight_block_scales(const WeightMatrix& w);
// All of w's bytes a GEMM reads: codes plus block scales.
std::uint64_t weight_bytes(const WeightMatrix& w);

// out[0..w.k) = W[row, :] in fp32.
void dequantize_row(const WeightMatrix& w, std::int64_t row, float* out);

// NVFP4 W4A4 emulation: x[0..k) is quantized to NVFP4 with global 1/input_scale (16-element
// blocks, E4M3 block scales, as Blackwell kernels do) and dequantized back, in place.
void fake_quantize_activations_nvfp4(float* x, std::int64_t k, float input_scale);

}  // namespace fp4serve::kernels
