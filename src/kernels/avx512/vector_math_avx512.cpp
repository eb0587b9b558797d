// The VectorMath table for AVX-512 (F/BW/VL + FMA): exp_approx() of kernels/vector_math.h on 16
// lanes, step for step, so every lane equals the scalar function bit for bit. Tails use masked
// loads and stores. ISA translation unit: no standard-library templates, no inline code shared
// with generic files (the constants header holds only constexpr values).
#include <immintrin.h>

#include <cstdint>

#include "kernels/isa_kernels.h"
#include "kernels/vector_math.h"

namespace fp4serve::kernels::avx512 {

namespace {

namespace c = vector_math_constants;

// Step 5 of exp_approx as one vscalefps: p * 2^n rounded once, as the two products are (the
// first exact, the second rounding once, also into the subnormals), and 2^128 overflows to +inf
// alike; the shifts, adds and two multiplies it replaces were a third of the loop's vector ops.
__m512 exp16(__m512 x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512 magic = _mm512_set1_ps(c::kRoundMagic);
  const __m512 xc = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(c::kExpMaxInput)), _mm512_set1_ps(c::kExpMinInput));
  const __m512 t = _mm512_fmadd_ps(xc, _mm512_set1_ps(c::kLog2e), magic);
  const __m512 nf = _mm512_sub_ps(t, magic);
  __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(c::kLn2Hi), xc);
  r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(c::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(c::kExpPoly[0]);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kExpPoly[1]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kExpPoly[2]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kExpPoly[3]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kExpPoly[4]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kExpPoly[5]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kExpPoly[6]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kExpPoly[7]));
  return _mm512_mask_add_ps(_mm512_scalef_ps(p, nf), nan, x, x);
}

__m512 silu16(__m512 x) {
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

__mmask16 tail_mask(std::int64_t left) { return static_cast<__mmask16>((1u << left) - 1u); }

// fp64 sum of the 16 lanes of v added to acc (two 8-lane halves).
__m512d add_pd(__m512d acc, __m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return _mm512_add_pd(acc, _mm512_add_pd(_mm512_cvtps_pd(lo), _mm512_cvtps_pd(hi)));
}

}  // namespace

void vec_exp(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void silu_mul(float* gate, const float* up, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(silu16(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = silu16(_mm512_maskz_loadu_ps(m, gate + i));
    _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void silu(float* x, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, silu16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, silu16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

double softmax_numerators_max(float* s, std::int64_t n, float* max_out) {
  // max: a NaN lane keeps the running max (the second operand), as the scalar comparison does.
  __m512 mx = _mm512_set1_ps(-__builtin_huge_valf());
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) mx = _mm512_max_ps(_mm512_loadu_ps(s + i), mx);
  if (i < n) mx = _mm512_mask_max_ps(mx, tail_mask(n - i), _mm512_maskz_loadu_ps(tail_mask(n - i), s + i), mx);
  const float top = _mm512_reduce_max_ps(mx);
  if (max_out != nullptr) *max_out = top;
  const __m512 vmax = _mm512_set1_ps(top);
  __m512d sum0 = _mm512_setzero_pd(), sum1 = _mm512_setzero_pd();
  i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i), vmax));
    const __m512 b = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i + 16), vmax));
    _mm512_storeu_ps(s + i, a);
    _mm512_storeu_ps(s + i + 16, b);
    sum0 = add_pd(sum0, a);
    sum1 = add_pd(sum1, b);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(n - i);
    const __m512 a = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + i), vmax)));
    _mm512_mask_storeu_ps(s + i, m, a);
    sum0 = add_pd(sum0, a);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(sum0, sum1));
}

double softmax_numerators(float* s, std::int64_t n) { return softmax_numerators_max(s, n, nullptr); }

void weighted_sum(float* y, const float* const* rows, const float* w, std::int64_t k, std::int64_t n) {
  std::int64_t j = 0;
  // Four vectors per pass: each weight broadcast feeds four independent fma chains.
  for (; j + 64 <= n; j += 64) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (std::int64_t i = 0; i < k; ++i) {
      const __m512 wi = _mm512_set1_ps(w[i]);
      const float* r = rows[i] + j;
      a0 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(r), a0);
      a1 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(r + 16), a1);
      a2 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(r + 32), a2);
      a3 = _mm512_fmadd_ps(wi, _mm512_loadu_ps(r + 48), a3);
    }
    _mm512_storeu_ps(y + j, a0);
    _mm512_storeu_ps(y + j + 16, a1);
    _mm512_storeu_ps(y + j + 32, a2);
    _mm512_storeu_ps(y + j + 48, a3);
  }
  for (; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(n - j);
    __m512 a = _mm512_setzero_ps();
    for (std::int64_t i = 0; i < k; ++i)
      a = _mm512_fmadd_ps(_mm512_set1_ps(w[i]), _mm512_maskz_loadu_ps(m, rows[i] + j), a);
    _mm512_mask_storeu_ps(y + j, m, a);
  }
}

double sum_squares(const float* x, std::int64_t n) {
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd(), s2 = s0, s3 = s0;
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i)), b = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    const __m512d c = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 16)), d = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 24));
    s0 = _mm512_fmadd_pd(a, a, s0);
    s1 = _mm512_fmadd_pd(b, b, s1);
    s2 = _mm512_fmadd_pd(c, c, s2);
    s3 = _mm512_fmadd_pd(d, d, s3);
  }
  for (; i < n; i += 8) {
    const __mmask8 m = n - i >= 8 ? static_cast<__mmask8>(0xFF) : static_cast<__mmask8>((1u << (n - i)) - 1u);
    const __m512d a = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, x + i));
    s0 = _mm512_fmadd_pd(a, a, s0);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(s0, s1), _mm512_add_pd(s2, s3)));
}

}  // namespace fp4serve::kernels::avx512
