#pragma once
// Dense weight loaders of the AVX-512 translation units (dense_gemm_avx512.cpp,
// dense_token_groups_avx512.cpp): 16 consecutive weights of a row as fp32. Internal linkage
// only: included by ISA translation units (src/kernels/check_isa_objects.cmake).
#include <immintrin.h>

#include <cstdint>

namespace fp4serve::kernels::avx512 {
namespace {

// Each loader turns 16 consecutive weights of a row into fp32; `bytes` is the element size.
struct Bf16 {
  static constexpr int bytes = 2;
  static __m512 load(const std::uint8_t* p) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  }
};
struct F16 {
  static constexpr int bytes = 2;
  static __m512 load(const std::uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
};
struct F32 {
  static constexpr int bytes = 4;
  static __m512 load(const std::uint8_t* p) { return _mm512_loadu_ps(p); }
};
// E4M3 "fn" by bit manipulation: normal codes map to fp32 by re-biasing the exponent (+120),
// subnormals (exponent 0) are mantissa * 2^-9, 0x7F/0xFF are NaN; the sign is copied.
struct Fp8 {
  static constexpr int bytes = 1;
  static __m512 load(const std::uint8_t* p) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i em = _mm512_and_si512(v, _mm512_set1_epi32(0x7F));
    const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(em, 20), _mm512_set1_epi32(120 << 23));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(em), _mm512_set1_ps(1.0f / 512.0f));
    __m512 r = _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(em, _mm512_set1_epi32(8)), _mm512_castsi512_ps(normal), sub);
    r = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(em, _mm512_set1_epi32(0x7F)), r, _mm512_set1_ps(__builtin_nanf("")));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
  }
};

}  // namespace
}  // namespace fp4serve::kernels::avx512
