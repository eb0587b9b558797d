// The VectorMath table for AVX2 + FMA: exp_approx() of kernels/vector_math.h on 8 lanes, step
// for step, so every lane equals the scalar function bit for bit. Tails use maskload/maskstore.
// ISA translation unit: no standard-library templates, no inline code shared with generic files
// (the constants header holds only constexpr values).
#include <immintrin.h>

#include <cstdint>

#include "kernels/isa_kernels.h"
#include "kernels/vector_math.h"

namespace fp4serve::kernels::avx2 {

namespace {

namespace c = vector_math_constants;

__m256 pow2(__m256i k) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23)); }

__m256 exp8(__m256 x) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 magic = _mm256_set1_ps(c::kRoundMagic);
  const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(c::kExpMaxInput)), _mm256_set1_ps(c::kExpMinInput));
  const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(c::kLog2e), magic);
  const __m256 nf = _mm256_sub_ps(t, magic);
  const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(magic));
  __m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(c::kLn2Hi), xc);
  r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(c::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(c::kExpPoly[0]);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kExpPoly[1]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kExpPoly[2]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kExpPoly[3]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kExpPoly[4]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kExpPoly[5]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kExpPoly[6]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kExpPoly[7]));
  const __m256i n1 = _mm256_srai_epi32(n, 1);
  const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, pow2(n1)), pow2(_mm256_sub_epi32(n, n1)));
  return _mm256_blendv_ps(y, _mm256_add_ps(x, x), nan);
}

__m256 silu8(__m256 x) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// Lanes [0, left) set, left in [0, 8].
__m256i tail_mask(std::int64_t left) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

__m256d add_pd(__m256d acc, __m256 v) {
  return _mm256_add_pd(acc, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
}

}  // namespace

void vec_exp(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m, exp8(_mm256_maskload_ps(x + i, m)));
  }
}

void silu_mul(float* gate, const float* up, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    const __m256 g = silu8(_mm256_maskload_ps(gate + i, m));
    _mm256_maskstore_ps(gate + i, m, _mm256_mul_ps(g, _mm256_maskload_ps(up + i, m)));
  }
}

void silu(float* x, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, silu8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(x + i, m, silu8(_mm256_maskload_ps(x + i, m)));
  }
}

double softmax_numerators_max(float* s, std::int64_t n, float* max_out) {
  // max: a NaN lane keeps the running max (the second operand), as the scalar comparison does.
  const __m256 neg_inf = _mm256_set1_ps(-__builtin_huge_valf());
  __m256 mx = neg_inf;
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(_mm256_loadu_ps(s + i), mx);
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    mx = _mm256_max_ps(_mm256_blendv_ps(neg_inf, _mm256_maskload_ps(s + i, m), _mm256_castsi256_ps(m)), mx);
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float top = _mm_cvtss_f32(h);
  if (max_out != nullptr) *max_out = top;
  const __m256 vmax = _mm256_set1_ps(top);
  __m256d sum0 = _mm256_setzero_pd(), sum1 = _mm256_setzero_pd();
  i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), vmax));
    const __m256 b = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i + 8), vmax));
    _mm256_storeu_ps(s + i, a);
    _mm256_storeu_ps(s + i + 8, b);
    sum0 = add_pd(sum0, a);
    sum1 = add_pd(sum1, b);
  }
  for (; i < n; i += 8) {
    const __m256i m = tail_mask(n - i < 8 ? n - i : 8);
    const __m256 a = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(s + i, m), vmax)), _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(s + i, m, a);
    sum0 = add_pd(sum0, a);
  }
  const __m256d sum = _mm256_add_pd(sum0, sum1);
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(sum), _mm256_extractf128_pd(sum, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

double softmax_numerators(float* s, std::int64_t n) { return softmax_numerators_max(s, n, nullptr); }

void weighted_sum(float* y, const float* const* rows, const float* w, std::int64_t k, std::int64_t n) {
  std::int64_t j = 0;
  // Four vectors per pass: each weight broadcast feeds four independent fma chains.
  for (; j + 32 <= n; j += 32) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (std::int64_t i = 0; i < k; ++i) {
      const __m256 wi = _mm256_set1_ps(w[i]);
      const float* r = rows[i] + j;
      a0 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r), a0);
      a1 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 8), a1);
      a2 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 16), a2);
      a3 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 24), a3);
    }
    _mm256_storeu_ps(y + j, a0);
    _mm256_storeu_ps(y + j + 8, a1);
    _mm256_storeu_ps(y + j + 16, a2);
    _mm256_storeu_ps(y + j + 24, a3);
  }
  for (; j < n; j += 8) {
    const __m256i m = tail_mask(n - j < 8 ? n - j : 8);
    __m256 a = _mm256_setzero_ps();
    for (std::int64_t i = 0; i < k; ++i) a = _mm256_fmadd_ps(_mm256_set1_ps(w[i]), _mm256_maskload_ps(rows[i] + j, m), a);
    _mm256_maskstore_ps(y + j, m, a);
  }
}

double sum_squares(const float* x, std::int64_t n) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), b = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    const __m256d c = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 8)), d = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 12));
    s0 = _mm256_fmadd_pd(a, a, s0);
    s1 = _mm256_fmadd_pd(b, b, s1);
    s2 = _mm256_fmadd_pd(c, c, s2);
    s3 = _mm256_fmadd_pd(d, d, s3);
  }
  const __m256d s = _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  double total = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
  return total;
}

}  // namespace fp4serve::kernels::avx2
