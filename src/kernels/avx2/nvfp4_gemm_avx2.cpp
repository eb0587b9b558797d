// NVFP4 x fp32 GEMM, AVX2 + FMA. One 16-element block (8 bytes) per step:
//   v    = the 8 bytes zero-extended to 8 int32 lanes (lane j = elements 2j, 2j+1)
//   t    = |E2M1| table (8 entries) times the block scale
//   w_lo = permutevar8x32(t, v) with the sign of bit 3 (code bit 3 -> bit 31 by v << 28)
//   w_hi = permutevar8x32(t, v >> 4) with the sign of bit 7 (v << 24)
// so activations are pre-split into even/odd halves per block (prepare_x). The permute reads
// only the low 3 bits of each index, which is exactly the magnitude part of a code.
// ISA translation unit: no standard-library templates here (see avx512/nvfp4_gemm_avx512.cpp).
#include <immintrin.h>

#include <cstdint>

#include "kernels/isa_kernels.h"
#include "kernels/lut.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx2 {

namespace {

// xd[i][16b + j] = x[i][16b + 2j], xd[i][16b + 8 + j] = x[i][16b + 2j + 1], j < 8.
void prepare_x(const float* x, std::int64_t m, std::int64_t k, float* xd) {
  const __m256i pack = _mm256_set_epi32(7, 5, 3, 1, 6, 4, 2, 0);  // evens to lanes 0-3, odds to 4-7
  for (std::int64_t i = 0; i < m * k; i += 16) {
    const __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + i), pack);      // e0..e3 o0..o3
    const __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + i + 8), pack);  // e4..e7 o4..o7
    _mm256_storeu_ps(xd + i, _mm256_permute2f128_ps(a, b, 0x20));
    _mm256_storeu_ps(xd + i + 8, _mm256_permute2f128_ps(a, b, 0x31));
  }
}

struct Ctx {
  const std::uint8_t* data;
  const std::uint8_t* scales;
  std::int64_t k, n, m;
  float ws2;
  const float* xd;
  float* y;
  const float* e4m3;
  const float* mag;
};

float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

template <int R, int MB>
void kernel(const Ctx& c, std::int64_t n0, std::int64_t m0) {
  const __m256 mag = _mm256_loadu_ps(c.mag);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const std::int64_t row_bytes = c.k / 2, row_scales = c.k / 16, blocks = c.k / 16;
  const std::int64_t ahead = (4096 + row_bytes - 1) / row_bytes;  // rows
  __m256 acc[R][MB];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* wp = c.data + (n0 + r) * row_bytes + b * 8;
      // Short rows defeat the hardware prefetcher; fetch ~4 KB of rows ahead (as avx512).
      if ((b & 7) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(wp + ahead * row_bytes), _MM_HINT_T0);
        if ((b & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(c.scales + (n0 + r + ahead) * row_scales + b), _MM_HINT_T0);
      }
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wp)));
      const __m256 t = _mm256_mul_ps(mag, _mm256_set1_ps(c.e4m3[c.scales[(n0 + r) * row_scales + b]]));
      const __m256i slo = _mm256_and_si256(_mm256_slli_epi32(v, 28), sign);
      const __m256i shi = _mm256_and_si256(_mm256_slli_epi32(v, 24), sign);
      const __m256 wlo = _mm256_xor_ps(_mm256_permutevar8x32_ps(t, v), _mm256_castsi256_ps(slo));
      const __m256 whi = _mm256_xor_ps(_mm256_permutevar8x32_ps(t, _mm256_srli_epi32(v, 4)), _mm256_castsi256_ps(shi));
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) {
        const float* xp = c.xd + (m0 + i) * c.k + b * 16;
        acc[r][i] = _mm256_fmadd_ps(wlo, _mm256_loadu_ps(xp), acc[r][i]);
        acc[r][i] = _mm256_fmadd_ps(whi, _mm256_loadu_ps(xp + 8), acc[r][i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) c.y[(m0 + i) * c.n + n0 + r] = hsum(acc[r][i]) * c.ws2;
}

// 16 ymm registers: four rows for one activation row, two rows for up to four.
template <int R>
void rows(const Ctx& c, std::int64_t n0) {
  if constexpr (R == 4) {
    if (c.m == 1) return kernel<4, 1>(c, n0, 0);
    rows<2>(c, n0);
    rows<2>(c, n0 + 2);
  } else {
    std::int64_t m0 = 0;
    for (; m0 + 4 <= c.m; m0 += 4) kernel<R, 4>(c, n0, m0);
    switch (c.m - m0) {
      case 1: kernel<R, 1>(c, n0, m0); break;
      case 2: kernel<R, 2>(c, n0, m0); break;
      case 3: kernel<R, 3>(c, n0, m0); break;
      default: break;
    }
  }
}

}  // namespace

void nvfp4_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  float* xd = static_cast<float*>(thread_scratch(kScratchGemmActivations, static_cast<std::size_t>(m * w.k) * sizeof(float)));
  prepare_x(x, m, w.k, xd);
  const DecodeTables& t = decode_tables();
  const Ctx c{w.data, w.block_scales, w.k, w.n, m, w.weight_scale_2, xd, y, t.e4m3, t.e2m1_mag};
  parallel_for(w.n, 16, [&c](std::int64_t b, std::int64_t e) {
    std::int64_t n0 = b;
    for (; n0 + 4 <= e; n0 += 4) rows<4>(c, n0);
    for (; n0 < e; ++n0) rows<1>(c, n0);
  });
}

}  // namespace fp4serve::kernels::avx2
