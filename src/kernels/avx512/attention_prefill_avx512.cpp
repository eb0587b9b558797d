// Causal GQA attention for a prefill, AVX-512: flash attention over tiles of query rows.
//
// A task takes up to kPrefillTileTokens consecutive query tokens and every query head that shares
// one KV head (Qwen3-30B-A3B: 16 tokens x 8 heads = 128 query rows), and walks the visible
// positions in chunks of kChunk:
//  1. scores: each block of 32 key rows is transposed once (dimension-major, two vectors of
//     positions per dimension) and then serves every query row of the tile: per dimension two
//     loads and one broadcast per row feed two FMAs per row (6 rows, two chains: 24
//     accumulators), so the FMAs no longer wait on a load each, and no horizontal sums are left;
//  2. per query row, the chunk's softmax numerators and the running max and sum
//     (kernels/online_softmax.h), so a task's buffers stay the size of one chunk at any depth;
//  3. values: per block of 32 value rows, each group of query rows keeps its accumulators for a
//     piece of up to 128 dimensions in registers over the block (3 rows x 8 vectors; head_dim
//     256, Qwen3.5's, in two pieces).
// Reading each key and value row once per tile instead of once per query token is what lifts
// this above the per-token kernel (attention_avx512.cpp) at depth, where the rows of one KV head
// no longer fit in L2 (docs/perf.md, session 26).
//
// A row's dot product runs over the even and the odd dimensions in two fp32 FMA chains; its value
// sums run over its visible positions in order: a token's output does not depend on which tile
// or thread computed it. Positions past a token's own (the causal mask) never enter its sums.
// ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/avx512/attention_rows.h"
#include "kernels/isa_kernels.h"
#include "kernels/kv_cache.h"
#include "kernels/kv_isa.h"
#include "kernels/online_softmax.h"
#include "kernels/prefill_tiles.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx512 {

namespace {

constexpr std::int64_t kChunk = kPrefillChunk;  // positions per softmax step
constexpr std::int64_t kBlock = 32;   // positions per transposed key block and per value block
constexpr int kScoreRows = 6;         // query rows per score kernel: 2 chains x 2 x 6 accumulators
constexpr int kValueRegs = 24;        // accumulators of the value kernel

// kt[d * kBlock + j] = element d of key row j (j < n; zero for the missing rows of a short block).
template <Kv E>
void transpose_keys(const std::byte* const* rows, std::int64_t n, std::int64_t D, float* kt) {
  for (std::int64_t half = 0; half < kBlock / 16; ++half) {
    for (std::int64_t d0 = 0; d0 < D; d0 += 16) {
      __m512 r[16];
      for (std::int64_t j = 0; j < 16; ++j) {
        const std::int64_t row = 16 * half + j;
        r[j] = row < n ? load16<E>(rows[row], d0) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (std::int64_t e = 0; e < 16; ++e) _mm512_store_ps(kt + (d0 + e) * kBlock + 16 * half, r[e]);
    }
  }
}

// s[r * s_stride + j] = scale * (q row r . key j) for R query rows (q, D apart) and the block's 32
// keys (kt). Each dot product runs as two FMA chains (even and odd dimensions) added at the end:
// one chain of 128 terms was 1.4x the two-pass kernel's error on large scores (2.8e-6 against the
// double-precision reference).
template <int R>
__attribute__((noinline)) void score_rows(const float* q, std::int64_t D, const float* kt, float scale, float* s,
                                          std::int64_t s_stride) {
  __m512 lo[2][R], hi[2][R];
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < R; ++r) lo[c][r] = hi[c][r] = _mm512_setzero_ps();
  for (std::int64_t d = 0; d < D; d += 2) {
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const __m512 k0 = _mm512_load_ps(kt + (d + c) * kBlock), k1 = _mm512_load_ps(kt + (d + c) * kBlock + 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 b = _mm512_set1_ps(q[r * D + d + c]);
        lo[c][r] = _mm512_fmadd_ps(b, k0, lo[c][r]);
        hi[c][r] = _mm512_fmadd_ps(b, k1, hi[c][r]);
      }
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(s + r * s_stride, _mm512_mul_ps(_mm512_add_ps(lo[0][r], lo[1][r]), sc));
    _mm512_storeu_ps(s + r * s_stride + 16, _mm512_mul_ps(_mm512_add_ps(hi[0][r], hi[1][r]), sc));
  }
}

using ScoreFn = void (*)(const float*, std::int64_t, const float*, float, float*, std::int64_t);
constexpr ScoreFn kScoreFns[kScoreRows] = {score_rows<1>, score_rows<2>, score_rows<3>,
                                           score_rows<4>, score_rows<5>, score_rows<6>};

// o[r * D + (0 .. 16 V)] += sum over j in [0, n) of p[r * p_stride + j] * v[j * D + (0 .. 16 V)],
// for R query rows: one piece of 16 V dimensions of rows D floats apart.
template <int V, int R>
__attribute__((noinline)) void value_rows(const float* v_rows, std::int64_t D, std::int64_t n, const float* p,
                                          std::int64_t p_stride, float* o) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_loadu_ps(o + r * D + 16 * v);
  for (std::int64_t j = 0; j < n; ++j) {
    const float* row = v_rows + j * D;
    __m512 b[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) b[r] = _mm512_set1_ps(p[r * p_stride + j]);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      __m512 x = _mm512_loadu_ps(row + 16 * v);
      // One load per vector of the row, not one per query row: left to itself GCC folds the
      // load into each FMA, and three loads per three FMAs made this loop wait on the load ports.
      __asm__("" : "+v"(x));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][v] = _mm512_fmadd_ps(b[r], x, acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(o + r * D + 16 * v, acc[r][v]);
}

template <int V>
constexpr int kValueRows = kValueRegs / V < 8 ? kValueRegs / V : 8;

using ValueFn = void (*)(const float*, std::int64_t, std::int64_t, const float*, std::int64_t, float*);

// rows: 1 .. kValueRows<V> (the instances past it are never called).
template <int V>
ValueFn value_fn(std::int64_t rows) {
  constexpr ValueFn fns[8] = {value_rows<V, 1>, value_rows<V, 2>, value_rows<V, 3>, value_rows<V, 4>,
                              value_rows<V, 5>, value_rows<V, 6>, value_rows<V, 7>, value_rows<V, 8>};
  return fns[rows - 1];
}

// The largest of s[0, n), NaN skipped (a NaN lane keeps the running max, the second operand).
float row_max(const float* s, std::int64_t n) {
  __m512 mx = _mm512_set1_ps(-__builtin_huge_valf());
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) mx = _mm512_max_ps(_mm512_loadu_ps(s + j), mx);
  if (j < n) {
    const auto m = static_cast<__mmask16>((1u << (n - j)) - 1);
    mx = _mm512_mask_max_ps(mx, m, _mm512_maskz_loadu_ps(m, s + j), mx);
  }
  return _mm512_reduce_max_ps(mx);
}

void scale_floats(float* x, std::int64_t n, float c) {
  const __m512 cv = _mm512_set1_ps(c);
  for (std::int64_t j = 0; j < n; j += 16) {
    const auto m = n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(x + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), cv));
  }
}

constexpr PrefillVectorOps kVectorOps{avx512::softmax_numerators, row_max, scale_floats};

// Query tokens [i0, i0 + T) of a, every query head of KV head g.
template <Kv E, int V>
void tile_task(const AttentionArgs& a, std::int64_t i0, std::int64_t T, std::int64_t g) {
  const std::int64_t D = a.head_dim, G = a.num_heads / a.num_kv_heads, Q = T * G;  // query rows: token-major
  const std::int64_t visible_max = a.past + i0 + T;
  const PrefillTileScratch tile = start_prefill_tile(a, i0, T, g, kBlock);
  float *const q = tile.q, *const o = tile.o, *const s = tile.s, *const kt = tile.keys, *const wide = tile.values;

  const std::byte* rows[kBlock];
  RowWalker keys(a, a.k_offset, g), values(a, a.v_offset, g);
  for (std::int64_t c0 = 0; c0 < visible_max; c0 += kChunk) {
    const std::int64_t cn = visible_max - c0 < kChunk ? visible_max - c0 : kChunk;
    // 1. Scores of every query row against the chunk's keys (the causal mask comes in step 2).
    for (std::int64_t b0 = 0; b0 < cn; b0 += kBlock) {
      const std::int64_t n = cn - b0 < kBlock ? cn - b0 : kBlock;
      for (std::int64_t j = 0; j < n; ++j) rows[j] = keys.next();
      transpose_keys<E>(rows, n, D, kt);
      for (std::int64_t r0 = 0; r0 < Q; r0 += kScoreRows) {
        const std::int64_t R = Q - r0 < kScoreRows ? Q - r0 : kScoreRows;
        kScoreFns[R - 1](q + r0 * D, D, kt, a.scale, s + r0 * kChunk + b0, kChunk);
      }
    }
    // 2. Softmax numerators over each row's visible part of the chunk; earlier sums rescaled.
    prefill_chunk_softmax(a, i0, T, c0, cn, tile, kVectorOps);
    // 3. Value sums: each row over its visible positions of each block, in order.
    for (std::int64_t b0 = 0; b0 < cn; b0 += kBlock) {
      const std::int64_t n = cn - b0 < kBlock ? cn - b0 : kBlock;
      // Copied (and widened) into L1 first, fp32 rows too: read in place from the cache, the
      // first group of rows to reach each one waited on it.
      for (std::int64_t j = 0; j < n; ++j) {
        const std::byte* row = values.next();
        for (std::int64_t d = 0; d < D; d += 16) _mm512_store_ps(wide + j * D + d, load16<E>(row, d));
      }
      // Positions every row of a group sees together, then each row's own rest (the mask).
      for_each_value_span(a, i0, T, kValueRows<V>, c0 + b0, n,
                          [&](std::int64_t r0, std::int64_t R, std::int64_t from, std::int64_t count) {
                            for (std::int64_t d0 = 0; d0 < D; d0 += 16 * V)
                              value_fn<V>(R)(wide + from * D + d0, D, count, s + r0 * kChunk + b0 + from, kChunk, o + r0 * D + d0);
                          });
    }
  }
  finish_prefill_tile(a, i0, T, g, tile);
}

template <Kv E>
PrefillTileFn tile_fn(std::int64_t head_dim) {
  switch (head_dim / 16) {
    case 1: return tile_task<E, 1>;
    case 2: return tile_task<E, 2>;
    case 3: return tile_task<E, 3>;
    case 4: return tile_task<E, 4>;
    case 5: return tile_task<E, 5>;
    case 6: return tile_task<E, 6>;
    case 7: return tile_task<E, 7>;
    case 8: return tile_task<E, 8>;
    default: return head_dim % 128 == 0 ? tile_task<E, 8> : nullptr;  // pieces of 128 (Qwen3.5: 256)
  }
}

}  // namespace

const PrefillVectorOps& prefill_vector_ops() { return kVectorOps; }

void attention_prefill_tiles(const AttentionArgs& a, std::int64_t threads) {
  PrefillTileFn fn = nullptr;
  with_kv_type(a.kv_dtype, [&a, &fn](auto type) { fn = tile_fn<decltype(type)::kValue>(a.head_dim); });
  run_prefill_tiles(a, prefill_tile_tokens(a, threads), fn);
}

}  // namespace fp4serve::kernels::avx512
