// Causal GQA attention for one sequence, AVX-512: q.k dot products and the weighted V sum in
// fp32 vectors over head_dim (a multiple of 16); softmax numerators in the generic helper.
// One task per (query token, head). ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstdint>

#include "kernels/isa_kernels.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx512 {

namespace {

// Heads up to 256 wide keep their accumulators in registers; wider ones take several passes.
constexpr std::int64_t kMaxVecs = 16;

void one_head(const AttentionArgs& a, std::int64_t i, std::int64_t h) {
  const std::int64_t D = a.head_dim, visible = a.past + i + 1;
  const std::int64_t kvh = h / (a.num_heads / a.num_kv_heads);
  const std::int64_t kv_stride = a.num_kv_heads * D;
  const float* q = a.q + (i * a.num_heads + h) * D;
  float* scores = static_cast<float*>(thread_scratch(kScratchAttention, static_cast<std::size_t>(visible) * sizeof(float)));
  for (std::int64_t p = 0; p < visible; ++p) {
    const float* k = a.kv_blocks[p / a.block_tokens] + a.k_offset + (p % a.block_tokens) * kv_stride + kvh * D;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    std::int64_t d = 0;
    for (; d + 32 <= D; d += 32) {
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(k + d), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d + 16), _mm512_loadu_ps(k + d + 16), acc1);
    }
    if (d < D) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(k + d), acc0);
    scores[p] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) * a.scale;
  }
  const float inv = static_cast<float>(1.0 / softmax_numerators(scores, visible));
  float* out = a.out + (i * a.num_heads + h) * D;
  for (std::int64_t d0 = 0; d0 < D; d0 += kMaxVecs * 16) {
    const std::int64_t vecs = (D - d0) / 16 < kMaxVecs ? (D - d0) / 16 : kMaxVecs;
    __m512 acc[kMaxVecs];
    for (std::int64_t j = 0; j < kMaxVecs; ++j) acc[j] = _mm512_setzero_ps();
    for (std::int64_t p = 0; p < visible; ++p) {
      const __m512 s = _mm512_set1_ps(scores[p]);
      const float* v = a.kv_blocks[p / a.block_tokens] + a.v_offset + (p % a.block_tokens) * kv_stride + kvh * D + d0;
      for (std::int64_t j = 0; j < vecs; ++j) acc[j] = _mm512_fmadd_ps(s, _mm512_loadu_ps(v + 16 * j), acc[j]);
    }
    const __m512 scale = _mm512_set1_ps(inv);
    for (std::int64_t j = 0; j < vecs; ++j) _mm512_storeu_ps(out + d0 + 16 * j, _mm512_mul_ps(acc[j], scale));
  }
}

}  // namespace

void attention(const AttentionArgs& a) {
  parallel_for(a.m * a.num_heads, 1, [&a](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) one_head(a, t / a.num_heads, t % a.num_heads);
  });
}

}  // namespace fp4serve::kernels::avx512
