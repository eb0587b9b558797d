// Causal GQA attention for a prefill, AVX2 + FMA: the flash attention over tiles of query rows of
// avx512/attention_prefill_avx512.cpp with 8 lanes and 16 registers (see there for the steps and
// why). Blocks of 16 positions (two vectors of scores per row), 3 query rows per score call (two
// FMA chains each: 12 accumulators), 3 rows x 4 vectors per value call over head_dim in pieces of
// 32, so head_dim must be a multiple of 32 (else the per-token kernel in attention_avx2.cpp).
// ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/avx2/attention_rows.h"
#include "kernels/isa_kernels.h"
#include "kernels/kv_isa.h"
#include "kernels/online_softmax.h"
#include "kernels/prefill_tiles.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx2 {

namespace {

constexpr std::int64_t kChunk = kPrefillChunk;
constexpr std::int64_t kBlock = 16;  // positions per transposed key block and per value block
constexpr int kScoreRows = 3;
constexpr int kValueRows = 3;
constexpr int kValueVecs = 4;  // head_dim pieces of 32

// Transposes 8 rows of 8 floats in place: r[j] becomes column j.
inline void transpose8(__m256* r) {
  __m256 t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  // u[4k + c], 128-bit lane l: column 4l + c of rows 4k .. 4k + 3.
  for (int k = 0; k < 2; ++k) {
    u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
    u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
    u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
    u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// kt[d * kBlock + j] = element d of key row j (j < n; zero for the missing rows of a short block).
template <Kv E>
void transpose_keys(const std::byte* const* rows, std::int64_t n, std::int64_t D, float* kt) {
  for (std::int64_t half = 0; half < kBlock / 8; ++half) {
    for (std::int64_t d0 = 0; d0 < D; d0 += 8) {
      __m256 r[8];
      for (std::int64_t j = 0; j < 8; ++j) {
        const std::int64_t row = 8 * half + j;
        r[j] = row < n ? load8<E>(rows[row], d0) : _mm256_setzero_ps();
      }
      transpose8(r);
      for (std::int64_t e = 0; e < 8; ++e) _mm256_store_ps(kt + (d0 + e) * kBlock + 8 * half, r[e]);
    }
  }
}

// s[r * s_stride + j] = scale * (q row r . key j) for R query rows and the block's 16 keys; two
// FMA chains per dot product (even and odd dimensions), as on AVX-512.
template <int R>
__attribute__((noinline)) void score_rows(const float* q, std::int64_t D, const float* kt, float scale, float* s,
                                          std::int64_t s_stride) {
  // acc[(2 * chain + half) * R + r]: one flat array (GCC kept a [2][R] one in memory too, storing
  // every accumulator on each pass).
  __m256 acc[4 * R];
#pragma GCC unroll 12
  for (int x = 0; x < 4 * R; ++x) acc[x] = _mm256_setzero_ps();
  for (std::int64_t d = 0; d < D; d += 2) {
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const __m256 k0 = _mm256_load_ps(kt + (d + c) * kBlock), k1 = _mm256_load_ps(kt + (d + c) * kBlock + 8);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 b = _mm256_broadcast_ss(q + r * D + d + c);
        acc[(2 * c) * R + r] = _mm256_fmadd_ps(b, k0, acc[(2 * c) * R + r]);
        acc[(2 * c + 1) * R + r] = _mm256_fmadd_ps(b, k1, acc[(2 * c + 1) * R + r]);
      }
    }
  }
  const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(s + r * s_stride, _mm256_mul_ps(_mm256_add_ps(acc[r], acc[2 * R + r]), sc));
    _mm256_storeu_ps(s + r * s_stride + 8, _mm256_mul_ps(_mm256_add_ps(acc[R + r], acc[3 * R + r]), sc));
  }
}

using ScoreFn = void (*)(const float*, std::int64_t, const float*, float, float*, std::int64_t);
constexpr ScoreFn kScoreFns[kScoreRows] = {score_rows<1>, score_rows<2>, score_rows<3>};

// o[r * D + d0 ...] (32 dims) += sum over j in [0, n) of p[r * p_stride + j] * v[j * D + d0 ...],
// for R query rows.
template <int R>
__attribute__((noinline)) void value_rows(const float* v, std::int64_t D, std::int64_t n, const float* p,
                                          std::int64_t p_stride, float* o) {
  __m256 acc[R * kValueVecs];  // acc[r * kValueVecs + x], flat as in score_rows
#pragma GCC unroll 12
  for (int y = 0; y < R * kValueVecs; ++y) acc[y] = _mm256_loadu_ps(o + (y / kValueVecs) * D + 8 * (y % kValueVecs));
  for (std::int64_t j = 0; j < n; ++j) {
    const float* row = v + j * D;
#pragma GCC unroll 4
    for (int x = 0; x < kValueVecs; ++x) {
      __m256 val = _mm256_loadu_ps(row + 8 * x);
      __asm__("" : "+x"(val));  // one load per vector, not one per query row (see the AVX-512 file)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        acc[r * kValueVecs + x] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + r * p_stride + j), val, acc[r * kValueVecs + x]);
    }
  }
#pragma GCC unroll 12
  for (int y = 0; y < R * kValueVecs; ++y) _mm256_storeu_ps(o + (y / kValueVecs) * D + 8 * (y % kValueVecs), acc[y]);
}

using ValueFn = void (*)(const float*, std::int64_t, std::int64_t, const float*, std::int64_t, float*);
constexpr ValueFn kValueFns[kValueRows] = {value_rows<1>, value_rows<2>, value_rows<3>};

// The largest of s[0, n), NaN skipped (a NaN lane keeps the running max, the second operand).
float row_max(const float* s, std::int64_t n) {
  __m256 mx = _mm256_set1_ps(-__builtin_huge_valf());
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) mx = _mm256_max_ps(_mm256_loadu_ps(s + j), mx);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  float top = lanes[0];
  for (int l = 1; l < 8; ++l) top = lanes[l] > top ? lanes[l] : top;
  for (; j < n; ++j) top = s[j] > top ? s[j] : top;
  return top;
}

void scale_floats(float* x, std::int64_t n, float c) {
  const __m256 cv = _mm256_set1_ps(c);
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), cv));
  for (; j < n; ++j) x[j] *= c;
}

constexpr PrefillVectorOps kVectorOps{avx2::softmax_numerators, row_max, scale_floats};

// Query tokens [i0, i0 + T) of a, every query head of KV head g.
template <Kv E>
void tile_task(const AttentionArgs& a, std::int64_t i0, std::int64_t T, std::int64_t g) {
  const std::int64_t D = a.head_dim, G = a.num_heads / a.num_kv_heads, Q = T * G;  // query rows: token-major
  const std::int64_t visible_max = a.past + i0 + T;
  const PrefillTileScratch tile = start_prefill_tile(a, i0, T, g, kBlock);
  float *const q = tile.q, *const o = tile.o, *const s = tile.s, *const kt = tile.keys, *const wide = tile.values;

  const std::byte* rows[kBlock];
  for (std::int64_t c0 = 0; c0 < visible_max; c0 += kChunk) {
    const std::int64_t cn = visible_max - c0 < kChunk ? visible_max - c0 : kChunk;
    // 1. Scores of every query row against the chunk's keys.
    for (std::int64_t b0 = 0; b0 < cn; b0 += kBlock) {
      const std::int64_t n = cn - b0 < kBlock ? cn - b0 : kBlock;
      for (std::int64_t j = 0; j < n; ++j) rows[j] = kv_row<E>(a, a.k_offset, g, c0 + b0 + j);
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
      for (std::int64_t j = 0; j < n; ++j) {
        const std::byte* row = kv_row<E>(a, a.v_offset, g, c0 + b0 + j);
        for (std::int64_t d = 0; d < D; d += 8) _mm256_store_ps(wide + j * D + d, load8<E>(row, d));
      }
      for_each_value_span(a, i0, T, kValueRows, c0 + b0, n,
                          [&](std::int64_t r0, std::int64_t R, std::int64_t from, std::int64_t count) {
                            for (std::int64_t d0 = 0; d0 < D; d0 += 8 * kValueVecs)
                              kValueFns[R - 1](wide + from * D + d0, D, count, s + r0 * kChunk + b0 + from, kChunk, o + r0 * D + d0);
                          });
    }
  }
  finish_prefill_tile(a, i0, T, g, tile);
}

}  // namespace

void attention_prefill_tiles(const AttentionArgs& a, std::int64_t threads) {
  PrefillTileFn fn = nullptr;
  with_kv_type(a.kv_dtype, [&fn](auto type) { fn = tile_task<decltype(type)::kValue>; });
  run_prefill_tiles(a, prefill_tile_tokens(a, threads), fn);
}

}  // namespace fp4serve::kernels::avx2
