#pragma once
// NVFP4: 16 E2M1 elements share one E4M3 block scale; a per-tensor FP32 scale sits on top.
// Formulas follow NVIDIA ModelOpt's NVFP4QTensor exactly (operation order included), so packed
// weights and scales match the real tool bit for bit. Packing: element 2j in the low nibble of
// byte j, element 2j+1 in the high nibble. Block scales are row-major [rows, cols/16].
#include <cstdint>
#include <span>

namespace fp4serve::nvfp4 {

inline constexpr int kBlock = 16;
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kE4M3Max = 448.0f;

// weight_scale_2 = amax(|w|) / (6 * 448), computed in fp32 as ModelOpt does.
float global_scale_from_amax(float amax);
float amax(std::span<const float> values);

// Quantizes a row-major [rows, cols] matrix (cols % 16 == 0) with a given weight_scale_2.
// packed: rows*cols/2 bytes; block_scales: rows*cols/16 E4M3 codes.
void quantize(std::span<const float> w, std::int64_t rows, std::int64_t cols, float weight_scale_2,
              std::span<std::uint8_t> packed, std::span<std::uint8_t> block_scales);

// w[r,c] = e2m1(code) * (e4m3(scale) * weight_scale_2), both products in fp32.
void dequantize(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> block_scales,
                float weight_scale_2, std::int64_t rows, std::int64_t cols, std::span<float> out);

// W4A4 activation quantization as the GPU kernels define it (vLLM's ref_nvfp4_quant):
// `global` = 1 / input_scale. Writes codes and E4M3 block scales like quantize().
void quantize_activations(std::span<const float> x, std::int64_t rows, std::int64_t cols, float global,
                          std::span<std::uint8_t> packed, std::span<std::uint8_t> block_scales);
// Activation dequantization matching quantize_activations: x = e2m1 * e4m3(scale) / global.
void dequantize_activations(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> block_scales,
                            float global, std::int64_t rows, std::int64_t cols, std::span<float> out);

}  // namespace fp4serve::nvfp4
