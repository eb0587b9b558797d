// Causal GQA attention for one sequence, AVX2 + FMA: as the AVX-512 version with 8 lanes
// (head_dim a multiple of 8). ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstdint>

#include "kernels/isa_kernels.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx2 {

namespace {

constexpr std::int64_t kMaxVecs = 16;  // 128 dims per pass over the cache

float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

void one_head(const AttentionArgs& a, std::int64_t i, std::int64_t h) {
  const std::int64_t D = a.head_dim, visible = a.past + i + 1;
  const std::int64_t kvh = h / (a.num_heads / a.num_kv_heads);
  const std::int64_t kv_stride = a.num_kv_heads * D;
  const float* q = a.q + (i * a.num_heads + h) * D;
  float* scores = static_cast<float*>(thread_scratch(kScratchAttention, static_cast<std::size_t>(visible) * sizeof(float)));
  for (std::int64_t p = 0; p < visible; ++p) {
    const float* k = a.kv_blocks[p / a.block_tokens] + a.k_offset + (p % a.block_tokens) * kv_stride + kvh * D;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    std::int64_t d = 0;
    for (; d + 16 <= D; d += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(k + d + 8), acc1);
    }
    if (d < D) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc0);
    scores[p] = hsum(_mm256_add_ps(acc0, acc1)) * a.scale;
  }
  const float inv = static_cast<float>(1.0 / avx2::softmax_numerators(scores, visible));
  float* out = a.out + (i * a.num_heads + h) * D;
  for (std::int64_t d0 = 0; d0 < D; d0 += kMaxVecs * 8) {
    const std::int64_t vecs = (D - d0) / 8 < kMaxVecs ? (D - d0) / 8 : kMaxVecs;
    __m256 acc[kMaxVecs];
    for (std::int64_t j = 0; j < kMaxVecs; ++j) acc[j] = _mm256_setzero_ps();
    for (std::int64_t p = 0; p < visible; ++p) {
      const __m256 s = _mm256_set1_ps(scores[p]);
      const float* v = a.kv_blocks[p / a.block_tokens] + a.v_offset + (p % a.block_tokens) * kv_stride + kvh * D + d0;
      for (std::int64_t j = 0; j < vecs; ++j) acc[j] = _mm256_fmadd_ps(s, _mm256_loadu_ps(v + 8 * j), acc[j]);
    }
    const __m256 scale = _mm256_set1_ps(inv);
    for (std::int64_t j = 0; j < vecs; ++j) _mm256_storeu_ps(out + d0 + 8 * j, _mm256_mul_ps(acc[j], scale));
  }
}

}  // namespace

void attention(const AttentionArgs& a) {
  parallel_for(a.m * a.num_heads, 1, [&a](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) one_head(a, t / a.num_heads, t % a.num_heads);
  });
}

}  // namespace fp4serve::kernels::avx2
