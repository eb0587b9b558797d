#pragma once
// NVFP4: 16 E2M1 elements share one E4M3 block scale; a per-tensor FP32 scale sits on top.
// Formulas follow NVIDIA ModelOpt's NVFP4QTensor exactly (operation order included), so packed
// weights and scales match the real tool bit for bit. Packing: element 2j in the low nibble of
// byte j, element 2j+1 in the high nibble. Block scales are row-major [rows, cols/16].
// Every function checks its sizes and throws fp4serve::Error naming the bad parameter.
#include <cstdint>
#include <span>

namespace fp4serve::nvfp4 {

inline constexpr int kBlock = 16;
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kE4M3Max = 448.0f;

// weight_scale_2 = amax(|w|) / (6 * 448), computed in fp32 as ModelOpt does.
float global_scale_from_amax(float amax);
// max |x|; NaN if any element is NaN (as torch.max); 0 for an empty span.
float amax(std::span<const float> values);

// Quantizes a row-major [rows, cols] matrix (cols % 16 == 0) with a given weight_scale_2, which
// must be finite and > 0 (ModelOpt itself emits NaN scales for an all-zero tensor; we refuse).
// packed: rows*cols/2 bytes; block_scales: rows*cols/16 E4M3 codes.
// Per block (ModelOpt 0.47 NVFP4QTensor.get_weights_scaling_factor + quantize):
//   s = amax_b / (6 * ws2); s == 0 -> 1.0; clamp to [2^-9, 448]; E4M3 (torch cast);
//   code = E2M1(w / (float(E4M3) * ws2)).
void quantize(std::span<const float> w, std::int64_t rows, std::int64_t cols, float weight_scale_2,
              std::span<std::uint8_t> packed, std::span<std::uint8_t> block_scales);

// w[r,c] = e2m1(code) * (e4m3(scale) * weight_scale_2), both products in fp32.
void dequantize(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> block_scales,
                float weight_scale_2, std::int64_t rows, std::int64_t cols, std::span<float> out);

// W4A4 activation quantization as vLLM's CPU reference defines it (ref_nvfp4_quant), which is
// the emulation of the GPU kernels: `global` = 1 / input_scale. Per block:
//   s = E4M3(clamp(global * (amax_b * fp32(1/6)), +-448)); out_scale = 1 / (s * (1/global))
//   (1e-8 when that product is 0); code = E2M1(clamp(x * out_scale, +-6)).
// Writes codes and E4M3 block scales like quantize().
void quantize_activations(std::span<const float> x, std::int64_t rows, std::int64_t cols, float global,
                          std::span<std::uint8_t> packed, std::span<std::uint8_t> block_scales);
// Activation dequantization matching vLLM's ref_nvfp4_quant_dequant:
// x = e2m1 * (e4m3(scale) / global), both operations in fp32.
void dequantize_activations(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> block_scales,
                            float global, std::int64_t rows, std::int64_t cols, std::span<float> out);

// ---- compressed-tensors (llm-compressor "nvfp4-pack-quantized") ----------------------------
// CT stores the tensor scale inverted: weight_global_scale = 2688 / amax (= 1 / weight_scale_2
// up to rounding) and divides by it. Packing and scale layout are the same as ModelOpt's.

// generate_gparam: amax clamped to >= FLT_MIN, then 448*6/amax, which torch evaluates as
// reciprocal(amax) * 2688; NaN or Inf results become 1.0.
float ct_global_scale_from_amax(float amax);

// CT quantization (calculate_qparams + NVFP4PackedCompressor.compress), global_scale finite > 0.
// Per block: s = E4M3(clamp(global * (amax_b / 6), +-448)); s == 0 -> 0.125 (FP8 "eps");
//   code = E2M1(clamp(w / (float(s) / global), +-6)).
void quantize_ct(std::span<const float> w, std::int64_t rows, std::int64_t cols, float global_scale,
                 std::span<std::uint8_t> packed, std::span<std::uint8_t> block_scales);

// CT dequantization (forward_helpers._dequantize): w = e2m1 * (e4m3(scale) / global_scale).
// Versus dequantize(..., 1/global_scale) this may differ in the last fp32 ulp.
void dequantize_ct(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> block_scales,
                   float global_scale, std::int64_t rows, std::int64_t cols, std::span<float> out);

}  // namespace fp4serve::nvfp4
