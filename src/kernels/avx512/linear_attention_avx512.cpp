// Gated DeltaNet ops with AVX-512 (16 lanes over channels / value dims), fp32 FMA. The generic
// wrappers (linear_attention_wrappers.cpp) apply SiLU, exp and the conv state update. ISA
// translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstdint>

#include "kernels/isa_kernels.h"
#include "kernels/linear_attention_wrappers.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx512 {

namespace {

// Row r of x' = [state (K-1 rows); x].
const float* window_row(const Conv1dArgs& a, std::int64_t r) {
  return r < a.kernel - 1 ? a.state + r * a.channels : a.x + (r - (a.kernel - 1)) * a.channels;
}

void conv_rows(const Conv1dArgs& a, std::int64_t t0, std::int64_t t1) {
  const std::int64_t C = a.channels;
  for (std::int64_t t = t0; t < t1; ++t) {
    float* out = a.out + t * C;
    std::int64_t c = 0;
    for (; c + 16 <= C; c += 16) {
      __m512 acc = _mm512_setzero_ps();
      for (std::int64_t j = 0; j < a.kernel; ++j)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a.weight + j * C + c), _mm512_loadu_ps(window_row(a, t + j) + c), acc);
      _mm512_storeu_ps(out + c, acc);
    }
    if (c < C) {
      const __mmask16 mask = static_cast<__mmask16>((1u << (C - c)) - 1u);
      __m512 acc = _mm512_setzero_ps();
      for (std::int64_t j = 0; j < a.kernel; ++j)
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a.weight + j * C + c),
                              _mm512_maskz_loadu_ps(mask, window_row(a, t + j) + c), acc);
      _mm512_mask_storeu_ps(out + c, mask, acc);
    }
  }
}

// The delta rule separates by value column: S^T k, the update and S^T q of columns [c, c+16)
// read only those columns of S. So each task owns one value head's 16-column slice of S
// (dk x 16 floats, in L1) for all m steps, and one pass over it per step serves this step's
// update and output and the next step's decay and S^T k (the same fp32 operations, in the same
// order, as two passes).
void delta_slice(const DeltaRuleArgs& a, const float* decay, std::int64_t h, std::int64_t c) {
  const std::int64_t dk = a.dk, dv = a.dv, Hk = a.num_k_heads, Hv = a.num_v_heads;
  const std::int64_t kh = h / (Hv / Hk);
  const __mmask16 mask = dv - c >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (dv - c)) - 1u);
  // Work on a contiguous copy of the slice: rows of the state are dv floats apart, a power of two
  // for real models, which maps the whole slice onto a few L1 sets.
  float* state = a.state + h * dk * dv + c;
  float* S = static_cast<float*>(thread_scratch(kScratchLinearAttention, static_cast<std::size_t>(dk) * 16 * sizeof(float)));
  for (std::int64_t i = 0; i < dk; ++i) _mm512_store_ps(S + i * 16, _mm512_maskz_loadu_ps(mask, state + i * dv));
  // Step 0's decay and S^T k.
  __m512 mem = _mm512_setzero_ps();
  {
    const __m512 dec = _mm512_set1_ps(decay[h]);
    const float* k = a.k + kh * dk;
    for (std::int64_t i = 0; i < dk; ++i) {
      const __m512 s = _mm512_mul_ps(_mm512_load_ps(S + i * 16), dec);
      _mm512_store_ps(S + i * 16, s);
      mem = _mm512_fmadd_ps(s, _mm512_set1_ps(k[i]), mem);
    }
  }
  for (std::int64_t t = 0; t < a.m; ++t) {
    const float* q = a.q + (t * Hk + kh) * dk;
    const float* k = a.k + (t * Hk + kh) * dk;
    const __m512 v = _mm512_maskz_loadu_ps(mask, a.v + (t * Hv + h) * dv + c);
    const __m512 delta = _mm512_mul_ps(_mm512_sub_ps(v, mem), _mm512_set1_ps(a.beta[t * Hv + h]));
    __m512 out = _mm512_setzero_ps();
    if (t + 1 < a.m) {
      const float* k_next = a.k + ((t + 1) * Hk + kh) * dk;
      const __m512 dec = _mm512_set1_ps(decay[(t + 1) * Hv + h]);
      __m512 mem_next = _mm512_setzero_ps();
      for (std::int64_t i = 0; i < dk; ++i) {
        const __m512 s = _mm512_fmadd_ps(_mm512_set1_ps(k[i]), delta, _mm512_load_ps(S + i * 16));
        out = _mm512_fmadd_ps(s, _mm512_set1_ps(q[i]), out);
        const __m512 s_next = _mm512_mul_ps(s, dec);
        _mm512_store_ps(S + i * 16, s_next);
        mem_next = _mm512_fmadd_ps(s_next, _mm512_set1_ps(k_next[i]), mem_next);
      }
      mem = mem_next;
    } else {
      for (std::int64_t i = 0; i < dk; ++i) {
        const __m512 s = _mm512_fmadd_ps(_mm512_set1_ps(k[i]), delta, _mm512_load_ps(S + i * 16));
        _mm512_store_ps(S + i * 16, s);
        out = _mm512_fmadd_ps(s, _mm512_set1_ps(q[i]), out);
      }
    }
    _mm512_mask_storeu_ps(a.out + (t * Hv + h) * dv + c, mask, out);
  }
  for (std::int64_t i = 0; i < dk; ++i) _mm512_mask_storeu_ps(state + i * dv, mask, _mm512_load_ps(S + i * 16));
}

}  // namespace

void conv1d(const Conv1dArgs& a) {
  parallel_for(a.m, 4, [&a](std::int64_t t0, std::int64_t t1) { conv_rows(a, t0, t1); });
}

void delta_rule(const DeltaRuleArgs& a, const float* decay) {
  const std::int64_t slices = (a.dv + 15) / 16;
  parallel_for(a.num_v_heads * slices, 1, [&a, decay, slices](std::int64_t b, std::int64_t e) {
    for (std::int64_t task = b; task < e; ++task) delta_slice(a, decay, task / slices, task % slices * 16);
  });
}

}  // namespace fp4serve::kernels::avx512
