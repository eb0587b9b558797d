// Causal GQA attention for one sequence, AVX2 + FMA: as the AVX-512 version with 8 lanes
// (head_dim a multiple of 8). Prefill takes tiles of tokens (attention_prefill_avx2.cpp) where
// head_dim is a multiple of 32, else one task per (query token, KV head) for all the heads of the
// group (kv_group); decode over a long cache the same tasks over slices of the positions
// (kernels/attention_split.h); decode over a short one one task per (query token, head), four
// keys per pass over q. Value accumulators stay in registers, 64 dims per pass.
// An F16 or BF16 cache (kernels/kv_cache.h) is widened to fp32 as each row is loaded: every
// path is a template over the element type.
// ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention_split.h"
#include "kernels/avx2/attention_rows.h"
#include "kernels/isa_kernels.h"
#include "kernels/kv_isa.h"
#include "kernels/prefill_tiles.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx2 {

namespace {

// Value passes: 8 accumulators (64 dims) stay in registers with the broadcast score; a
// run-time count of them spilled every accumulator to the stack (half of prefill's attention).
constexpr int kValueVecs = 8;

float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Lane j of the result: the sum of the 8 lanes of aj.
__m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// scores[p] = q . k_p * scale for p < visible; four keys per pass share each load of q.
template <Kv E>
void key_scores(const AttentionArgs& a, const float* q, std::int64_t kvh, std::int64_t visible, float* scores) {
  const std::int64_t D = a.head_dim;
  const __m128 scale = _mm_set1_ps(a.scale);
  std::int64_t p = 0;
  for (; p + 4 <= visible; p += 4) {
    const std::byte* k0 = kv_row<E>(a, a.k_offset, kvh, p);
    const std::byte* k1 = kv_row<E>(a, a.k_offset, kvh, p + 1);
    const std::byte* k2 = kv_row<E>(a, a.k_offset, kvh, p + 2);
    const std::byte* k3 = kv_row<E>(a, a.k_offset, kvh, p + 3);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (std::int64_t d = 0; d < D; d += 8) {
      const __m256 qd = _mm256_loadu_ps(q + d);
      a0 = _mm256_fmadd_ps(qd, load8<E>(k0, d), a0);
      a1 = _mm256_fmadd_ps(qd, load8<E>(k1, d), a1);
      a2 = _mm256_fmadd_ps(qd, load8<E>(k2, d), a2);
      a3 = _mm256_fmadd_ps(qd, load8<E>(k3, d), a3);
    }
    _mm_storeu_ps(scores + p, _mm_mul_ps(hsum4(a0, a1, a2, a3), scale));
  }
  for (; p < visible; ++p) {
    const std::byte* k = kv_row<E>(a, a.k_offset, kvh, p);
    __m256 acc = _mm256_setzero_ps();
    for (std::int64_t d = 0; d < D; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8<E>(k, d), acc);
    scores[p] = hsum(acc) * a.scale;
  }
}

// out[d0 .. d0 + 8V) = inv * sum_p scores[p] * v_p[d0 ..].
template <Kv E, int V>
void value_pass(const AttentionArgs& a, const float* scores, std::int64_t kvh, std::int64_t visible, std::int64_t d0,
                float inv, float* out) {
  __m256 acc[V];
  for (int j = 0; j < V; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b0 = 0; b0 < visible; b0 += a.block_tokens) {  // one cache block at a time
    const std::int64_t b1 = b0 + a.block_tokens < visible ? b0 + a.block_tokens : visible;
    const std::byte* v = kv_row<E>(a, a.v_offset, kvh, b0) + d0 * kKvElementBytes<E>;
    for (std::int64_t p = b0; p < b1; ++p, v += a.head_dim * kKvElementBytes<E>) {
      const __m256 s = _mm256_set1_ps(scores[p]);
      for (int j = 0; j < V; ++j) acc[j] = _mm256_fmadd_ps(s, load8<E>(v, 8 * j), acc[j]);
    }
  }
  const __m256 scale = _mm256_set1_ps(inv);
  for (int j = 0; j < V; ++j) _mm256_storeu_ps(out + d0 + 8 * j, _mm256_mul_ps(acc[j], scale));
}

template <Kv E>
void one_head(const AttentionArgs& a, std::int64_t i, std::int64_t h) {
  const std::int64_t D = a.head_dim, visible = a.past + i + 1;
  const std::int64_t kvh = h / (a.num_heads / a.num_kv_heads);
  const float* q = a.q + (i * a.num_heads + h) * D;
  float* scores = static_cast<float*>(thread_scratch(kScratchAttention, static_cast<std::size_t>(visible) * sizeof(float)));
  key_scores<E>(a, q, kvh, visible, scores);
  const float inv = static_cast<float>(1.0 / avx2::softmax_numerators(scores, visible));
  float* out = a.out + (i * a.num_heads + h) * D;
  std::int64_t d0 = 0;
  for (; d0 + 8 * kValueVecs <= D; d0 += 8 * kValueVecs) value_pass<E, kValueVecs>(a, scores, kvh, visible, d0, inv, out);
  for (; d0 < D; d0 += 8) value_pass<E, 1>(a, scores, kvh, visible, d0, inv, out);
}

constexpr std::int64_t kGroupBlock = 8;  // positions per block on the grouped path
constexpr std::int64_t kMaxGroup = 64;   // query heads per KV head on the grouped path

// Lane j: the sum of the 8 lanes of v[j].
__m256 hsum8(const __m256* v) {
  // Each t holds four vectors' partial sums: over lanes 0-3 in its low half, 4-7 in its high.
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

// acc[d0 .. d0 + 8V) += sum_j scores[j] * rows[j][d0 ..] over n rows.
template <Kv E, int V>
void add_values(const std::byte* const* rows, std::int64_t n, const float* scores, std::int64_t d0, float* acc_out) {
  __m256 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm256_loadu_ps(acc_out + d0 + 8 * v);
  for (std::int64_t j = 0; j < n; ++j) {
    const __m256 s = _mm256_set1_ps(scores[j]);
    for (int v = 0; v < V; ++v) acc[v] = _mm256_fmadd_ps(s, load8<E>(rows[j], d0 + 8 * v), acc[v]);
  }
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc_out + d0 + 8 * v, acc[v]);
}

// Prefill: all query heads of KV head g for query token i, 8 positions at a time, so each key and
// value row comes from L2 once per block and from L1 for the group's other heads (Qwen3-30B-A3B:
// 8 heads per KV head). The per-head path read every row from L2 once per head.
// Positions [first, last); part == nullptr: all of [0, visible), normalized into a.out.
template <Kv E>
void kv_group_range(const AttentionArgs& a, std::int64_t i, std::int64_t g, std::int64_t first, std::int64_t last,
                    const SlicePartial* part) {
  const std::int64_t D = a.head_dim, visible = last - first;
  const std::int64_t G = a.num_heads / a.num_kv_heads, h0 = g * G;
  const std::int64_t stride = (visible + kGroupBlock - 1) / kGroupBlock * kGroupBlock;  // scores row per head
  float* scores = static_cast<float*>(
      thread_scratch(kScratchAttention, static_cast<std::size_t>(G * (stride + D) + kGroupBlock * D) * sizeof(float)));
  float* accs = scores + G * stride;  // [G][D] value sums between blocks
  const float* q = a.q + (i * a.num_heads + h0) * D;
  const std::byte* rows[kGroupBlock];
  // A 16-bit cache's block of rows, widened once here for all G heads (once per head cost more
  // than the bytes it saves: docs/perf.md, session 15); fp32 rows are read in place. D floats
  // per row from the scratch after the value sums.
  float* wide = accs + G * D;
  auto widen = [&rows, wide, D](std::int64_t n) __attribute__((always_inline)) {
    if constexpr (E != Kv::F32) {
      for (std::int64_t j = 0; j < n; ++j) {
        for (std::int64_t d = 0; d < D; d += 8) _mm256_storeu_ps(wide + j * D + d, load8<E>(rows[j], d));
        rows[j] = reinterpret_cast<const std::byte*>(wide + j * D);
      }
    }
  };
  for (std::int64_t p0 = 0; p0 < visible; p0 += kGroupBlock) {
    const std::int64_t n = visible - p0 < kGroupBlock ? visible - p0 : kGroupBlock;
    // Past the last position, row 0 again: its scores land in the row's padding, never read.
    for (std::int64_t j = 0; j < kGroupBlock; ++j)
      rows[j] = kv_row<E>(a, a.k_offset, g, first + p0 + (j < n ? j : 0));
    widen(kGroupBlock);
    for (std::int64_t h = 0; h < G; ++h) {
      __m256 acc[kGroupBlock];
      for (std::int64_t j = 0; j < kGroupBlock; ++j) acc[j] = _mm256_setzero_ps();
      for (std::int64_t d = 0; d < D; d += 8) {
        const __m256 qd = _mm256_loadu_ps(q + h * D + d);
        for (std::int64_t j = 0; j < kGroupBlock; ++j) acc[j] = _mm256_fmadd_ps(qd, load8<Kv::F32>(rows[j], d), acc[j]);
      }
      _mm256_storeu_ps(scores + h * stride + p0, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(a.scale)));
    }
  }
  float inv[kMaxGroup];
  for (std::int64_t h = 0; h < G; ++h) inv[h] = slice_softmax(scores + h * stride, visible, avx2::softmax_numerators_max, part, h);
  if (part != nullptr) accs = part->acc;  // the slice's sums go straight to its partial
  for (std::int64_t x = 0; x < G * D; x += 8) _mm256_storeu_ps(accs + x, _mm256_setzero_ps());
  for (std::int64_t p0 = 0; p0 < visible; p0 += kGroupBlock) {
    const std::int64_t n = visible - p0 < kGroupBlock ? visible - p0 : kGroupBlock;
    for (std::int64_t j = 0; j < n; ++j) rows[j] = kv_row<E>(a, a.v_offset, g, first + p0 + j);
    widen(n);
    for (std::int64_t h = 0; h < G; ++h) {
      std::int64_t d0 = 0;
      for (; d0 + 8 * kValueVecs <= D; d0 += 8 * kValueVecs) add_values<Kv::F32, kValueVecs>(rows, n, scores + h * stride + p0, d0, accs + h * D);
      for (; d0 < D; d0 += 8) add_values<Kv::F32, 1>(rows, n, scores + h * stride + p0, d0, accs + h * D);
    }
  }
  if (part != nullptr) return;
  float* out = a.out + (i * a.num_heads + h0) * D;
  for (std::int64_t h = 0; h < G; ++h) {
    const __m256 sc = _mm256_set1_ps(inv[h]);
    for (std::int64_t d = 0; d < D; d += 8) _mm256_storeu_ps(out + h * D + d, _mm256_mul_ps(_mm256_loadu_ps(accs + h * D + d), sc));
  }
}

template <Kv E>
void kv_group(const AttentionArgs& a, std::int64_t i, std::int64_t g) { kv_group_range<E>(a, i, g, 0, a.past + i + 1, nullptr); }

template <Kv E>
void kv_group_slice(const AttentionArgs& a, std::int64_t i, std::int64_t g, std::int64_t first, std::int64_t last,
                    const SlicePartial& part) {
  kv_group_range<E>(a, i, g, first, last, &part);
}

template <Kv E>
void attention_of(const AttentionArgs& a) {
  const std::int64_t group = a.num_heads / a.num_kv_heads;
  // Four (token, KV head) tasks per thread at least (prefill): tiles of tokens
  // (attention_prefill_avx2.cpp) where head_dim is a multiple of 32, else one task per (token,
  // KV head).
  if (a.head_dim % 32 == 0 && enough_prefill_tasks(a, kernel_threads())) return attention_prefill_tiles(a, kernel_threads());
  if (group > 1 && group <= kMaxGroup) {
    // Over a long cache, the grouped tasks over slices of the positions (decode,
    // kernels/attention_split.h).
    if (a.m * a.num_kv_heads >= 4 * kernel_threads()) {
      parallel_for(a.m * a.num_kv_heads, 1, [&a](std::int64_t b, std::int64_t e) {
        for (std::int64_t t = b; t < e; ++t) kv_group<E>(a, t / a.num_kv_heads, t % a.num_kv_heads);
      });
      return;
    }
    if (const std::int64_t splits = attention_splits(a, kernel_threads()); splits >= 2)
      return split_attention(a, splits, kv_group_slice<E>);
  }
  // Decode over a short cache: the per-head split, so every core has work.
  parallel_for(a.m * a.num_heads, 1, [&a](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) one_head<E>(a, t / a.num_heads, t % a.num_heads);
  });
}

}  // namespace

// The wrapper (gemm_wrappers.cpp) has checked kv_dtype: F32, F16 or BF16.
void attention(const AttentionArgs& a) {
  with_kv_type(a.kv_dtype, [&a](auto type) { attention_of<decltype(type)::kValue>(a); });
}

}  // namespace fp4serve::kernels::avx2
