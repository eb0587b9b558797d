// Bulk NVFP4 block helpers. The E2M1 rounding is rewritten without branches: float_to_e2m1's
// code is the number of bounds strictly below |x|, plus one on the three midpoints that round up
// to an even code, which is the same as counting `|x| > m` for the midpoints 0.25, 1.25, 2.5, 5
// and `|x| >= m` for 0.75, 1.75, 3.5. Written as the negated opposite comparison (`!(|x| <= m)`),
// each test is also true for NaN, which therefore counts to 7 as in the reference.
#include "numerics/nvfp4_bulk.h"

#include <cmath>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FP4SERVE_BULK_AVX512 1
// GCC 12 reports the intrinsics' deliberately undefined pass-through operands as "maybe
// uninitialized" once they are inlined here; the warning is false (as in src/kernels).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace fp4serve::nvfp4 {
namespace {

constexpr int kBlock = 16;

inline std::uint8_t e2m1_branch_free(float v) {
  const float a = std::fabs(v);
  const int code = int{!(a <= 0.25f)} + int{!(a < 0.75f)} + int{!(a <= 1.25f)} + int{!(a < 1.75f)} +
                   int{!(a <= 2.5f)} + int{!(a < 3.5f)} + int{!(a <= 5.0f)};
  return static_cast<std::uint8_t>((v < 0.0f ? 8 : 0) | code);
}

}  // namespace

void block_amaxes_portable(const float* x, std::size_t blocks, float* amaxes) {
  for (std::size_t b = 0; b < blocks; ++b) {
    float m = 0.0f;
    bool nan = false;
    for (int k = 0; k < kBlock; ++k) {
      const float a = std::fabs(x[b * kBlock + k]);
      nan |= std::isnan(a);
      m = a > m ? a : m;
    }
    amaxes[b] = nan ? std::nanf("") : m;
  }
}

void encode_blocks_div_portable(const float* x, const float* denoms, std::size_t blocks, std::uint8_t* packed) {
  for (std::size_t b = 0; b < blocks; ++b) {
    const float denom = denoms[b];
    for (int j = 0; j < kBlock / 2; ++j) {
      const std::uint8_t lo = e2m1_branch_free(x[b * kBlock + 2 * j] / denom);
      const std::uint8_t hi = e2m1_branch_free(x[b * kBlock + 2 * j + 1] / denom);
      packed[b * (kBlock / 2) + j] = static_cast<std::uint8_t>(lo | (hi << 4));
    }
  }
}

#ifdef FP4SERVE_BULK_AVX512

bool has_avx512_bulk() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return ok;
}

__attribute__((target("avx512f,avx512dq"))) void block_amaxes_avx512(const float* x, std::size_t blocks,
                                                                      float* amaxes) {
  for (std::size_t b = 0; b < blocks; ++b) {
    const __m512 v = _mm512_abs_ps(_mm512_loadu_ps(x + b * kBlock));
    // The max of non-negative floats is one value whatever the order; a NaN anywhere makes the
    // whole block NaN, as torch.amax (and nvfp4::amax) do.
    amaxes[b] = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) ? std::nanf("") : _mm512_reduce_max_ps(v);
  }
}

__attribute__((target("avx512f,avx512dq"))) void encode_blocks_div_avx512(const float* x, const float* denoms,
                                                                           std::size_t blocks,
                                                                           std::uint8_t* packed) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i sign_code = _mm512_set1_epi32(8);
  const __m512 zero = _mm512_setzero_ps();
  // (midpoint, predicate true when |x| rounds above it; NaN counts as above)
  const __m512 m025 = _mm512_set1_ps(0.25f), m075 = _mm512_set1_ps(0.75f), m125 = _mm512_set1_ps(1.25f),
               m175 = _mm512_set1_ps(1.75f), m250 = _mm512_set1_ps(2.5f), m350 = _mm512_set1_ps(3.5f),
               m500 = _mm512_set1_ps(5.0f);
  for (std::size_t b = 0; b < blocks; ++b) {
    const __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + b * kBlock), _mm512_set1_ps(denoms[b]));
    const __m512 a = _mm512_abs_ps(v);
    __m512i code = _mm512_setzero_si512();
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, m025, _CMP_NLE_UQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, m075, _CMP_NLT_UQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, m125, _CMP_NLE_UQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, m175, _CMP_NLT_UQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, m250, _CMP_NLE_UQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, m350, _CMP_NLT_UQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, m500, _CMP_NLE_UQ), code, one);
    code = _mm512_mask_or_epi32(code, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), code, sign_code);
    // Each 64-bit lane holds element 2j in its low dword and 2j+1 in its high dword: shifting the
    // lane right by 28 moves the high code to bits 4..7, and vpmovqb keeps the low byte.
    const __m512i pairs = _mm512_or_si512(code, _mm512_srli_epi64(code, 28));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(packed + b * (kBlock / 2)), _mm512_cvtepi64_epi8(pairs));
  }
}

void block_amaxes(const float* x, std::size_t blocks, float* amaxes) {
  if (has_avx512_bulk()) return block_amaxes_avx512(x, blocks, amaxes);
  block_amaxes_portable(x, blocks, amaxes);
}

void encode_blocks_div(const float* x, const float* denoms, std::size_t blocks, std::uint8_t* packed) {
  if (has_avx512_bulk()) return encode_blocks_div_avx512(x, denoms, blocks, packed);
  encode_blocks_div_portable(x, denoms, blocks, packed);
}

#else  // no x86-64 intrinsics: the portable loops only

bool has_avx512_bulk() { return false; }
void block_amaxes_avx512(const float* x, std::size_t blocks, float* amaxes) {
  block_amaxes_portable(x, blocks, amaxes);
}
void encode_blocks_div_avx512(const float* x, const float* denoms, std::size_t blocks, std::uint8_t* packed) {
  encode_blocks_div_portable(x, denoms, blocks, packed);
}
void block_amaxes(const float* x, std::size_t blocks, float* amaxes) { block_amaxes_portable(x, blocks, amaxes); }
void encode_blocks_div(const float* x, const float* denoms, std::size_t blocks, std::uint8_t* packed) {
  encode_blocks_div_portable(x, denoms, blocks, packed);
}

#endif

}  // namespace fp4serve::nvfp4
