// Gated DeltaNet ops with AVX2 + FMA (8 lanes over channels / value dims, scalar tails), fp32.
// The generic wrappers (linear_attention_wrappers.cpp) apply SiLU, exp and the conv state
// update. ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstdint>

#include "kernels/isa_kernels.h"
#include "kernels/linear_attention_wrappers.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx2 {

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
    for (; c + 8 <= C; c += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (std::int64_t j = 0; j < a.kernel; ++j)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a.weight + j * C + c), _mm256_loadu_ps(window_row(a, t + j) + c), acc);
      _mm256_storeu_ps(out + c, acc);
    }
    for (; c < C; ++c) {
      float acc = 0.0f;
      for (std::int64_t j = 0; j < a.kernel; ++j) acc += a.weight[j * C + c] * window_row(a, t + j)[c];
      out[c] = acc;
    }
  }
}

// As the AVX-512 version (see there): one task per value head and 8-column slice of S, one pass
// over the slice per step. Columns past the last full 8 go through the same steps in scalar code.
void delta_slice8(const DeltaRuleArgs& a, const float* decay, std::int64_t h, std::int64_t c) {
  const std::int64_t dk = a.dk, dv = a.dv, Hk = a.num_k_heads, Hv = a.num_v_heads;
  const std::int64_t kh = h / (Hv / Hk);
  // A contiguous copy of the slice (see the AVX-512 version).
  float* state = a.state + h * dk * dv + c;
  float* S = static_cast<float*>(thread_scratch(kScratchLinearAttention, static_cast<std::size_t>(dk) * 8 * sizeof(float)));
  for (std::int64_t i = 0; i < dk; ++i) _mm256_store_ps(S + i * 8, _mm256_loadu_ps(state + i * dv));
  __m256 mem = _mm256_setzero_ps();
  {
    const __m256 dec = _mm256_set1_ps(decay[h]);
    const float* k = a.k + kh * dk;
    for (std::int64_t i = 0; i < dk; ++i) {
      const __m256 s = _mm256_mul_ps(_mm256_load_ps(S + i * 8), dec);
      _mm256_store_ps(S + i * 8, s);
      mem = _mm256_fmadd_ps(s, _mm256_set1_ps(k[i]), mem);
    }
  }
  for (std::int64_t t = 0; t < a.m; ++t) {
    const float* q = a.q + (t * Hk + kh) * dk;
    const float* k = a.k + (t * Hk + kh) * dk;
    const __m256 v = _mm256_loadu_ps(a.v + (t * Hv + h) * dv + c);
    const __m256 delta = _mm256_mul_ps(_mm256_sub_ps(v, mem), _mm256_set1_ps(a.beta[t * Hv + h]));
    __m256 out = _mm256_setzero_ps();
    if (t + 1 < a.m) {
      const float* k_next = a.k + ((t + 1) * Hk + kh) * dk;
      const __m256 dec = _mm256_set1_ps(decay[(t + 1) * Hv + h]);
      __m256 mem_next = _mm256_setzero_ps();
      for (std::int64_t i = 0; i < dk; ++i) {
        const __m256 s = _mm256_fmadd_ps(_mm256_set1_ps(k[i]), delta, _mm256_load_ps(S + i * 8));
        out = _mm256_fmadd_ps(s, _mm256_set1_ps(q[i]), out);
        const __m256 s_next = _mm256_mul_ps(s, dec);
        _mm256_store_ps(S + i * 8, s_next);
        mem_next = _mm256_fmadd_ps(s_next, _mm256_set1_ps(k_next[i]), mem_next);
      }
      mem = mem_next;
    } else {
      for (std::int64_t i = 0; i < dk; ++i) {
        const __m256 s = _mm256_fmadd_ps(_mm256_set1_ps(k[i]), delta, _mm256_load_ps(S + i * 8));
        _mm256_store_ps(S + i * 8, s);
        out = _mm256_fmadd_ps(s, _mm256_set1_ps(q[i]), out);
      }
    }
    _mm256_storeu_ps(a.out + (t * Hv + h) * dv + c, out);
  }
  for (std::int64_t i = 0; i < dk; ++i) _mm256_storeu_ps(state + i * dv, _mm256_load_ps(S + i * 8));
}

void delta_column(const DeltaRuleArgs& a, const float* decay, std::int64_t h, std::int64_t c) {
  const std::int64_t dk = a.dk, dv = a.dv, Hk = a.num_k_heads, Hv = a.num_v_heads;
  const std::int64_t kh = h / (Hv / Hk);
  float* S = a.state + h * dk * dv + c;
  for (std::int64_t t = 0; t < a.m; ++t) {
    const float* q = a.q + (t * Hk + kh) * dk;
    const float* k = a.k + (t * Hk + kh) * dk;
    const float dec = decay[t * Hv + h];
    float mem = 0.0f;
    for (std::int64_t i = 0; i < dk; ++i) {
      S[i * dv] *= dec;
      mem = S[i * dv] * k[i] + mem;
    }
    const float delta = (a.v[(t * Hv + h) * dv + c] - mem) * a.beta[t * Hv + h];
    float out = 0.0f;
    for (std::int64_t i = 0; i < dk; ++i) {
      S[i * dv] = k[i] * delta + S[i * dv];
      out = S[i * dv] * q[i] + out;
    }
    a.out[(t * Hv + h) * dv + c] = out;
  }
}

}  // namespace

void conv1d(const Conv1dArgs& a) {
  parallel_for(a.m, 4, [&a](std::int64_t t0, std::int64_t t1) { conv_rows(a, t0, t1); });
}

void delta_rule(const DeltaRuleArgs& a, const float* decay) {
  const std::int64_t full = a.dv / 8, slices = full + (a.dv % 8 != 0 ? 1 : 0);
  parallel_for(a.num_v_heads * slices, 1, [&a, decay, slices, full](std::int64_t b, std::int64_t e) {
    for (std::int64_t task = b; task < e; ++task) {
      const std::int64_t h = task / slices, slice = task % slices;
      if (slice < full) {
        delta_slice8(a, decay, h, slice * 8);
      } else {
        for (std::int64_t c = full * 8; c < a.dv; ++c) delta_column(a, decay, h, c);
      }
    }
  });
}

}  // namespace fp4serve::kernels::avx2
