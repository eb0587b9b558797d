// NVFP4 quantization and dequantization. Each routine restates one tool's fp32 operation order
// (ModelOpt, compressed-tensors, vLLM's reference) because a different but mathematically equal
// order changes the last bit of a scale, which can flip an E4M3 or E2M1 rounding decision.
#include "numerics/nvfp4.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "numerics/nvfp4_bulk.h"
#include "numerics/scalar_formats.h"
#include "util/error.h"

namespace fp4serve::nvfp4 {
namespace {

constexpr std::uint8_t kE4M3Eighth = 0x20;  // 0.125: compressed-tensors' FP8 "eps" for a zero scale

// Validates a [rows, cols] NVFP4 problem and returns rows*cols.
std::size_t check_shape(const char* fn, std::int64_t rows, std::int64_t cols) {
  if (rows < 0) fail("nvfp4::", fn, ": rows must be >= 0, got ", rows);
  if (cols < 0 || cols % kBlock != 0) {
    fail("nvfp4::", fn, ": cols must be a non-negative multiple of ", kBlock, ", got ", cols);
  }
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
}

void check_span(const char* fn, const char* param, std::size_t have, std::size_t need) {
  if (have < need) fail("nvfp4::", fn, ": span '", param, "' has ", have, " elements, needs ", need);
}

void check_scale(const char* fn, const char* param, float value) {
  if (!(value > 0.0f) || !std::isfinite(value)) {
    fail("nvfp4::", fn, ": '", param, "' must be finite and > 0, got ", value);
  }
}

// torch.clamp semantics: NaN passes through unchanged.
float clamp(float x, float lo, float hi) {
  if (x < lo) return lo;
  if (x > hi) return hi;
  return x;
}

// max |x| over one block; NaN propagates like torch.amax.
float block_amax(const float* x) {
  float m = 0.0f;
  for (int k = 0; k < kBlock; ++k) {
    const float a = std::fabs(x[k]);
    if (std::isnan(a)) return a;
    if (a > m) m = a;
  }
  return m;
}

void pack_pair(std::uint8_t* out, int k, std::uint8_t code) {
  // Element 2j goes in the low nibble of byte j, element 2j+1 in the high nibble.
  std::uint8_t& byte = out[k / 2];
  byte = (k % 2 == 0) ? static_cast<std::uint8_t>((byte & 0xF0) | code)
                      : static_cast<std::uint8_t>((byte & 0x0F) | (code << 4));
}

// e4m3_to_float as a table: the weight quantizers look it up once per 16 elements.
float e4m3_value(std::uint8_t code) {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<std::size_t>(c)] = e4m3_to_float(static_cast<std::uint8_t>(c));
    return t;
  }();
  return table[code];
}

// The weight quantizers' common shape: per block, a scale code from the block's amax
// (scale_code(amax)) and a divisor for its elements (divisor(code)); the codes are then
// float_to_e2m1(x / divisor), encoded in bulk. Blocks go through in runs that stay in L1.
template <class ScaleCode, class Divisor>
void quantize_blocks_div(const float* w, std::size_t blocks, std::uint8_t* packed, std::uint8_t* block_scales,
                         ScaleCode scale_code, Divisor divisor) {
  constexpr std::size_t kRun = 256;
  std::array<float, kRun> amaxes, denoms;
  for (std::size_t first = 0; first < blocks; first += kRun) {
    const std::size_t n = std::min(kRun, blocks - first);
    block_amaxes(w + first * kBlock, n, amaxes.data());
    for (std::size_t b = 0; b < n; ++b) {
      const std::uint8_t sc = scale_code(amaxes[b]);
      block_scales[first + b] = sc;
      denoms[b] = divisor(sc);
    }
    encode_blocks_div(w + first * kBlock, denoms.data(), n, packed + first * (kBlock / 2));
  }
}

std::uint8_t unpack(const std::uint8_t* in, std::size_t k) {
  return static_cast<std::uint8_t>((k % 2 == 0) ? (in[k / 2] & 0x0F) : (in[k / 2] >> 4));
}

// Shared loop for the three decoders: out = e2m1(code) * block_multiplier(scale code).
template <class ScaleFn>
void dequantize_blocks(const char* fn, std::span<const std::uint8_t> packed,
                       std::span<const std::uint8_t> block_scales, std::int64_t rows, std::int64_t cols,
                       std::span<float> out, ScaleFn block_multiplier) {
  const std::size_t n = check_shape(fn, rows, cols);
  check_span(fn, "packed", packed.size(), n / 2);
  check_span(fn, "block_scales", block_scales.size(), n / kBlock);
  check_span(fn, "out", out.size(), n);
  for (std::size_t b = 0; b < n / kBlock; ++b) {
    const float s = block_multiplier(block_scales[b]);
    for (std::size_t k = b * kBlock; k < (b + 1) * kBlock; ++k) {
      out[k] = e2m1_to_float(unpack(packed.data(), k)) * s;
    }
  }
}

}  // namespace

float global_scale_from_amax(float amax) { return amax / (kE2M1Max * kE4M3Max); }

float amax(std::span<const float> values) {
  // Whole blocks through the bulk helper; a NaN anywhere (rare) falls through to the scalar
  // loop below, which returns the first NaN as before.
  constexpr std::size_t kRun = 256;
  std::array<float, kRun> maxes;
  const std::size_t blocks = values.size() / kBlock;
  float bulk = 0.0f;
  for (std::size_t first = 0; first < blocks && !std::isnan(bulk); first += kRun) {
    const std::size_t n = std::min(kRun, blocks - first);
    block_amaxes(values.data() + first * kBlock, n, maxes.data());
    for (std::size_t b = 0; b < n; ++b) bulk = std::isnan(maxes[b]) || maxes[b] > bulk ? maxes[b] : bulk;
  }
  if (!std::isnan(bulk)) {
    float m = bulk;
    for (float v : values.subspan(blocks * kBlock)) {
      const float a = std::fabs(v);
      if (std::isnan(a)) return a;
      if (a > m) m = a;
    }
    return m;
  }
  float m = 0.0f;
  for (float v : values) {
    const float a = std::fabs(v);
    if (std::isnan(a)) return a;
    if (a > m) m = a;
  }
  return m;
}

void quantize(std::span<const float> w, std::int64_t rows, std::int64_t cols, float weight_scale_2,
              std::span<std::uint8_t> packed, std::span<std::uint8_t> block_scales) {
  const std::size_t n = check_shape("quantize", rows, cols);
  check_scale("quantize", "weight_scale_2", weight_scale_2);
  check_span("quantize", "w", w.size(), n);
  check_span("quantize", "packed", packed.size(), n / 2);
  check_span("quantize", "block_scales", block_scales.size(), n / kBlock);
  // ModelOpt: per_block_amax / (E2M1_MAX * weights_scaling_factor_2) - the product is one fp32
  // rounding, then the division another.
  const float divisor = kE2M1Max * weight_scale_2;
  auto scale_code = [&](float block_amax_value) {
    float s = block_amax_value / divisor;
    if (s == 0.0f) s = 1.0f;  // all-zero block: scale 1.0 (0x38), every code 0
    // _cast_per_block_scale_to_fp8 (ModelOpt >= 0.4x) clamps to [2^-9, 448] before the torch
    // cast, so a tiny block gets the smallest subnormal instead of 0 and nothing becomes NaN.
    return float_to_e4m3_torch(clamp(s, 0x1p-9f, kE4M3Max));
  };
  // quantize(): input / (weights_scaling_factor.to(float32) * weights_scaling_factor_2).
  quantize_blocks_div(w.data(), n / kBlock, packed.data(), block_scales.data(), scale_code,
                      [&](std::uint8_t sc) { return e4m3_value(sc) * weight_scale_2; });
}

void dequantize(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> block_scales,
                float weight_scale_2, std::int64_t rows, std::int64_t cols, std::span<float> out) {
  // ModelOpt dequantize: per_block_scale = float(e4m3) * double_scale, then e2m1 * that.
  dequantize_blocks("dequantize", packed, block_scales, rows, cols, out,
                    [&](std::uint8_t sc) { return e4m3_to_float(sc) * weight_scale_2; });
}

void quantize_activations(std::span<const float> x, std::int64_t rows, std::int64_t cols, float global,
                          std::span<std::uint8_t> packed, std::span<std::uint8_t> block_scales) {
  const std::size_t n = check_shape("quantize_activations", rows, cols);
  check_span("quantize_activations", "x", x.size(), n);
  check_span("quantize_activations", "packed", packed.size(), n / 2);
  check_span("quantize_activations", "block_scales", block_scales.size(), n / kBlock);
  // FLOAT4_E2M1_MAX_RECIPROCAL is a Python double; torch rounds it to fp32 when it multiplies an
  // fp32 tensor.
  const float inv_e2m1_max = static_cast<float>(1.0 / 6.0);
  // vLLM's get_reciprocal(t) = 1 / (t + (t == 0) * 1e8): a zero maps to 1e-8, not to Inf.
  auto reciprocal = [](float t) { return 1.0f / (t == 0.0f ? 1e8f : t); };
  const float inv_global = reciprocal(global);
  for (std::size_t b = 0; b < n / kBlock; ++b) {
    const float* src = x.data() + b * kBlock;
    float s = global * (block_amax(src) * inv_e2m1_max);
    s = clamp(s, -kE4M3Max, kE4M3Max);
    const std::uint8_t sc = float_to_e4m3_torch(s);
    block_scales[b] = sc;
    const float out_scale = reciprocal(e4m3_to_float(sc) * inv_global);
    std::uint8_t* dst = packed.data() + b * (kBlock / 2);
    for (int k = 0; k < kBlock; ++k) {
      pack_pair(dst, k, float_to_e2m1(clamp(src[k] * out_scale, -kE2M1Max, kE2M1Max)));
    }
  }
}

void dequantize_activations(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> block_scales,
                            float global, std::int64_t rows, std::int64_t cols, std::span<float> out) {
  // ref_nvfp4_quant_dequant: x_fp4 * (blockscale / global_scale).
  dequantize_blocks("dequantize_activations", packed, block_scales, rows, cols, out,
                    [&](std::uint8_t sc) { return e4m3_to_float(sc) / global; });
}

float ct_global_scale_from_amax(float amax) {
  // torch.clamp(min=tiny) lets NaN through; the NaN then becomes 1.0 below.
  const float a = amax < FLT_MIN ? FLT_MIN : amax;
  // `FP8_MAX * FP4_MAX / tensor` is Tensor.__rtruediv__, i.e. tensor.reciprocal() * 2688.
  const float g = (1.0f / a) * (kE4M3Max * kE2M1Max);
  return std::isfinite(g) ? g : 1.0f;  // torch.nan_to_num(nan=1, posinf=1, neginf=1)
}

void quantize_ct(std::span<const float> w, std::int64_t rows, std::int64_t cols, float global_scale,
                 std::span<std::uint8_t> packed, std::span<std::uint8_t> block_scales) {
  const std::size_t n = check_shape("quantize_ct", rows, cols);
  check_scale("quantize_ct", "global_scale", global_scale);
  check_span("quantize_ct", "w", w.size(), n);
  check_span("quantize_ct", "packed", packed.size(), n / 2);
  check_span("quantize_ct", "block_scales", block_scales.size(), n / kBlock);
  auto scale_code = [&](float block_amax_value) {
    // calculate_qparams: max_val_pos / (bit_range / 2), then global_scale * scales, then
    // round_to_quantized_type_dtype (clamp to the E4M3 range, torch cast).
    const float s = clamp(global_scale * (block_amax_value / kE2M1Max), -kE4M3Max, kE4M3Max);
    const std::uint8_t sc = float_to_e4m3_torch(s);
    return e4m3_value(sc) == 0.0f ? kE4M3Eighth : sc;  // zero scales (after rounding) -> eps
  };
  // _quantize: scale = scale / global_scale; scaled = x / scale; clamp to +-6; cast_to_fp4. The
  // clamp never changes the code (E2M1 saturates at 6 and NaN passes the clamp), so it is left out.
  quantize_blocks_div(w.data(), n / kBlock, packed.data(), block_scales.data(), scale_code,
                      [&](std::uint8_t sc) { return e4m3_value(sc) / global_scale; });
}

void dequantize_ct(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> block_scales,
                   float global_scale, std::int64_t rows, std::int64_t cols, std::span<float> out) {
  dequantize_blocks("dequantize_ct", packed, block_scales, rows, cols, out,
                    [&](std::uint8_t sc) { return e4m3_to_float(sc) / global_scale; });
}

}  // namespace fp4serve::nvfp4
