#include "kernels/weight_rows.h"

#include <immintrin.h>

#include <bit>
#include <cstring>
#include <span>
#include <vector>

#include "kernels/lut.h"
#include "numerics/nvfp4.h"
#include "numerics/scalar_formats.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace fp4serve::kernels {

std::int64_t weight_row_bytes(const WeightMatrix& w) {
  switch (w.kind) {
    case SchemeKind::NVFP4: return w.k / 2;
    case SchemeKind::FP8: return w.k;
    case SchemeKind::Dense: break;
  }
  return w.k * static_cast<std::int64_t>(dtype_size(w.dtype));
}

std::span<const std::uint8_t> weight_codes(const WeightMatrix& w) {
  return {w.data, static_cast<std::size_t>(w.n * weight_row_bytes(w))};
}

std::span<const std::uint8_t> weight_block_scales(const WeightMatrix& w) {
  if (w.kind != SchemeKind::NVFP4) return {};
  return {w.block_scales, static_cast<std::size_t>(w.n * (w.k / nvfp4::kBlock))};
}

std::uint64_t weight_bytes(const WeightMatrix& w) { return weight_codes(w).size() + weight_block_scales(w).size(); }

namespace {

// The NVFP4 loop of dequantize_row below for AVX-512: each block's 16 codes as lanes, looked up
// in the same 16-entry table and multiplied by the same block scale, so the same bits per
// element (tested against nvfp4::dequantize); validation dequantizes every weight row it uses at
// each start, most of them for the MoE's reference outputs, which this took from 137-158 to
// 102-131 ms on Qwen3-30B-A3B's shapes (docs/perf.md, session 35).
// GCC 12 reads the unmasked intrinsics' undefined pass-through operand as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx512bw"))) void dequantize_nvfp4_avx512(const DecodeTables& t, const std::uint8_t* packed,
                                                                      const std::uint8_t* scales, float scale_2,
                                                                      std::size_t blocks, float* out) {
  const __m512 table = _mm512_loadu_ps(t.e2m1);
  const __m128i low = _mm_set1_epi8(0x0F);
  for (std::size_t b = 0; b < blocks; ++b) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + b * 8));
    // Element 2j is byte j's low nibble, element 2j + 1 its high one.
    const __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16(bytes, 4), low));
    const __m512 values = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), table);
    _mm512_storeu_ps(out + b * 16, _mm512_mul_ps(values, _mm512_set1_ps(t.e4m3[scales[b]] * scale_2)));
  }
}
#pragma GCC diagnostic pop

bool nvfp4_rows_on_avx512() {
  static const bool yes = cpu_features().usable(CpuFeature::AVX512F) && cpu_features().usable(CpuFeature::AVX512BW);
  return yes;
}

}  // namespace

void dequantize_row(const WeightMatrix& w, std::int64_t row, float* out) {
  const auto k = static_cast<std::size_t>(w.k);
  switch (w.kind) {
    case SchemeKind::NVFP4: {
      // nvfp4::dequantize's arithmetic (block scale = e4m3 * weight_scale_2, then e2m1 * that)
      // with its values tabulated once from the numerics functions: bit-identical, and cheap
      // enough for validation to dequantize every expert of a 30B model at start.
      const DecodeTables& t = decode_tables();
      const std::uint8_t* packed = w.data + row * (w.k / 2);
      const std::uint8_t* scales = w.block_scales + row * (w.k / nvfp4::kBlock);
      if (nvfp4_rows_on_avx512()) return dequantize_nvfp4_avx512(t, packed, scales, w.weight_scale_2, k / nvfp4::kBlock, out);
      for (std::size_t b = 0; b < k / nvfp4::kBlock; ++b) {
        const float s = t.e4m3[scales[b]] * w.weight_scale_2;
        for (std::size_t j = 0; j < nvfp4::kBlock / 2; ++j) {
          const std::uint8_t byte = packed[b * 8 + j];
          out[b * 16 + 2 * j] = t.e2m1[byte & 0x0F] * s;
          out[b * 16 + 2 * j + 1] = t.e2m1[byte >> 4] * s;
        }
      }
      return;
    }
    case SchemeKind::FP8: {
      const std::uint8_t* codes = w.data + row * w.k;
      const DecodeTables& t = decode_tables();
      for (std::size_t i = 0; i < k; ++i) out[i] = t.e4m3[codes[i]] * w.weight_scale_2;
      return;
    }
    case SchemeKind::Dense: break;
  }
  switch (w.dtype) {
    case DType::F32: std::memcpy(out, w.data + row * w.k * 4, k * 4); return;
    case DType::BF16: {
      // bf16_to_float's shift, written out so the loop vectorizes: a 397B checkpoint's BF16
      // projections put 200M weights through here at every start (docs/perf.md, session 36).
      const std::uint8_t* p = w.data + row * w.k * 2;
      for (std::size_t i = 0; i < k; ++i)
        out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(p[2 * i]) << 16 | static_cast<std::uint32_t>(p[2 * i + 1]) << 24);
      return;
    }
    case DType::F16: {
      const std::uint8_t* p = w.data + row * w.k * 2;
      for (std::size_t i = 0; i < k; ++i) out[i] = fp16_to_float(static_cast<std::uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
      return;
    }
    default: fail("dense weight of dtype ", dtype_name(w.dtype), " is not supported by the kernels");
  }
}

void fake_quantize_activations_nvfp4(float* x, std::int64_t k, float input_scale) {
  if (input_scale <= 0.0f) fail("W4A4 needs a static input_scale; this weight has none");
  const auto n = static_cast<std::size_t>(k);
  std::vector<std::uint8_t> packed(n / 2), scales(n / nvfp4::kBlock);
  const float global = 1.0f / input_scale;
  nvfp4::quantize_activations({x, n}, 1, k, global, packed, scales);
  nvfp4::dequantize_activations(packed, scales, global, 1, k, {x, n});
}

}  // namespace fp4serve::kernels
