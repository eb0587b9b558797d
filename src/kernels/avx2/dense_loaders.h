#pragma once
// Dense weight loaders of the AVX2 translation units (dense_gemm_avx2.cpp,
// dense_token_groups_avx2.cpp): 8 consecutive weights of a row as fp32. Internal linkage only:
// included by ISA translation units (src/kernels/check_isa_objects.cmake).
#include <immintrin.h>

#include <cstdint>

namespace fp4serve::kernels::avx2 {
namespace {

struct Bf16 {
  static constexpr int bytes = 2;
  static __m256 load(const std::uint8_t* p) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
};
struct F16 {
  static constexpr int bytes = 2;
  static __m256 load(const std::uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
struct F32 {
  static constexpr int bytes = 4;
  static __m256 load(const std::uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};
// E4M3 "fn": exponent re-biased by +120 for normal codes, mantissa * 2^-9 for subnormals,
// 0x7F/0xFF NaN, sign copied.
struct Fp8 {
  static constexpr int bytes = 1;
  static __m256 load(const std::uint8_t* p) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i em = _mm256_and_si256(v, _mm256_set1_epi32(0x7F));
    const __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(em, 20), _mm256_set1_epi32(120 << 23)));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(em), _mm256_set1_ps(1.0f / 512.0f));
    const __m256 is_sub = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), em));
    const __m256 is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(em, _mm256_set1_epi32(0x7F)));
    __m256 r = _mm256_blendv_ps(normal, sub, is_sub);
    r = _mm256_blendv_ps(r, _mm256_set1_ps(__builtin_nanf("")), is_nan);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
    return _mm256_or_ps(r, _mm256_castsi256_ps(sign));
  }
};

}  // namespace
}  // namespace fp4serve::kernels::avx2
