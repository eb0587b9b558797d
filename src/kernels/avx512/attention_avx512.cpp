// Causal GQA attention for one sequence, AVX-512: q.k dot products and the weighted V sum in
// fp32 vectors over head_dim (a multiple of 16); softmax numerators with the 16-lane exp of
// vector_math_avx512.cpp.
//
// head_dim <= 128 (Qwen3: 128) has register-resident paths: the query and the V accumulators
// stay in registers (head_dim / 16 is a template argument), each key row is loaded once per
// FMA, and the 16 dot products of a block of positions are summed horizontally together (one
// transpose-and-add tree, ~3 instructions per position instead of ~9 for one reduction each).
// Positions walk the paged cache block by block without a division per position.
//  - Prefill (enough tasks): tiles of query tokens x the query heads of one KV head, flash
//    attention in attention_prefill_avx512.cpp.
//  - Decode (few tasks) over a long cache: the grouped tasks, each over a slice of the
//    positions (flash-decoding, kernels/attention_split.h). Splitting by head instead read every
//    key and value row once per query head (8 times) from L2 or memory.
//  - Decode over a short cache (< 2 slices of kMinSplitPositions): one task per (query token,
//    head), so every core has work; the rows stay in L2.
// Wider heads take the general path, several passes over the cache.
// An F16 or BF16 cache (kernels/kv_cache.h) is widened to fp32 as each row is loaded: every
// path is a template over the element type, so the fp32 code is the same instructions as before.
// ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention_split.h"
#include "kernels/isa_kernels.h"
#include "kernels/kv_cache.h"
#include "kernels/avx512/attention_rows.h"
#include "kernels/kv_isa.h"
#include "kernels/prefill_tiles.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx512 {

namespace {

// Heads up to 256 wide keep their accumulators in registers; wider ones take several passes.
constexpr std::int64_t kMaxVecs = 16;
// The prefill tiles keep up to 8 vectors of a row's value sums in registers: head_dim up to 128,
// or a multiple of 128 in pieces.
constexpr std::int64_t kMaxTileVecs = 8;

// {sum(v[0]), ..., sum(v[15])}: pairs within 128-bit lanes, then quads, then across lanes.
__m512 hsum16(const __m512* v) {
  __m512 t[8], u[4];
  for (int j = 0; j < 8; ++j)
    t[j] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * j], v[2 * j + 1]), _mm512_unpackhi_ps(v[2 * j], v[2 * j + 1]));
  for (int j = 0; j < 4; ++j)
    u[j] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * j], t[2 * j + 1], 0x44), _mm512_shuffle_ps(t[2 * j], t[2 * j + 1], 0xEE));
  // u[j] lane group g holds the partial sums of v[4j .. 4j+3] over 128-bit lane g.
  const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xDD));
}

template <Kv E, int V>
void one_head_regs(const AttentionArgs& a, std::int64_t i, std::int64_t h) {
  const std::int64_t D = a.head_dim, visible = a.past + i + 1;
  const std::int64_t kvh = h / (a.num_heads / a.num_kv_heads);
  const float* q = a.q + (i * a.num_heads + h) * D;
  float* scores = static_cast<float*>(thread_scratch(kScratchAttention, static_cast<std::size_t>(visible) * sizeof(float)));
  __m512 qv[V];
  for (int v = 0; v < V; ++v) qv[v] = _mm512_loadu_ps(q + 16 * v);
  const __m512 scale = _mm512_set1_ps(a.scale);
  RowWalker keys(a, a.k_offset, kvh);
  std::int64_t p = 0;
  for (; p + 16 <= visible; p += 16) {
    __m512 acc[16];
    for (int j = 0; j < 16; ++j) {
      const std::byte* k = keys.next();
      __m512 s = _mm512_mul_ps(qv[0], load16<E>(k, 0));
      for (int v = 1; v < V; ++v) s = _mm512_fmadd_ps(qv[v], load16<E>(k, 16 * v), s);
      acc[j] = s;
    }
    _mm512_storeu_ps(scores + p, _mm512_mul_ps(hsum16(acc), scale));
  }
  for (; p < visible; ++p) {
    const std::byte* k = keys.next();
    __m512 s = _mm512_mul_ps(qv[0], load16<E>(k, 0));
    for (int v = 1; v < V; ++v) s = _mm512_fmadd_ps(qv[v], load16<E>(k, 16 * v), s);
    scores[p] = _mm512_reduce_add_ps(s) * a.scale;
  }
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / avx512::softmax_numerators(scores, visible)));
  __m512 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_ps();
  RowWalker values(a, a.v_offset, kvh);
  for (p = 0; p < visible; ++p) {
    const __m512 s = _mm512_set1_ps(scores[p]);
    const std::byte* row = values.next();
    for (int v = 0; v < V; ++v) acc[v] = _mm512_fmadd_ps(s, load16<E>(row, 16 * v), acc[v]);
  }
  float* out = a.out + (i * a.num_heads + h) * D;
  for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + 16 * v, _mm512_mul_ps(acc[v], inv));
}

template <Kv E>
void one_head(const AttentionArgs& a, std::int64_t i, std::int64_t h) {
  const std::int64_t D = a.head_dim, visible = a.past + i + 1;
  const std::int64_t kvh = h / (a.num_heads / a.num_kv_heads);
  const float* q = a.q + (i * a.num_heads + h) * D;
  float* scores = static_cast<float*>(thread_scratch(kScratchAttention, static_cast<std::size_t>(visible) * sizeof(float)));
  RowWalker keys(a, a.k_offset, kvh);
  for (std::int64_t p = 0; p < visible; ++p) {
    const std::byte* k = keys.next();
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    std::int64_t d = 0;
    for (; d + 32 <= D; d += 32) {
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), load16<E>(k, d), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d + 16), load16<E>(k, d + 16), acc1);
    }
    if (d < D) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), load16<E>(k, d), acc0);
    scores[p] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) * a.scale;
  }
  const float inv = static_cast<float>(1.0 / avx512::softmax_numerators(scores, visible));
  float* out = a.out + (i * a.num_heads + h) * D;
  for (std::int64_t d0 = 0; d0 < D; d0 += kMaxVecs * 16) {
    const std::int64_t vecs = (D - d0) / 16 < kMaxVecs ? (D - d0) / 16 : kMaxVecs;
    __m512 acc[kMaxVecs];
    for (std::int64_t j = 0; j < kMaxVecs; ++j) acc[j] = _mm512_setzero_ps();
    RowWalker values(a, a.v_offset, kvh);
    for (std::int64_t p = 0; p < visible; ++p) {
      const __m512 s = _mm512_set1_ps(scores[p]);
      const std::byte* v = values.next();
      for (std::int64_t j = 0; j < vecs; ++j) acc[j] = _mm512_fmadd_ps(s, load16<E>(v, d0 + 16 * j), acc[j]);
    }
    const __m512 scale = _mm512_set1_ps(inv);
    for (std::int64_t j = 0; j < vecs; ++j) _mm512_storeu_ps(out + d0 + 16 * j, _mm512_mul_ps(acc[j], scale));
  }
}

constexpr std::int64_t kMaxGroup = 64;  // query heads per KV head on the grouped path

// Rows this far ahead of the one being read are requested to L2: a KV head's row is 512 of
// every 2 KB at a position (Qwen3: 4 KV heads) and a cache block of 16 positions is 3 MB from
// the next (all layers together), runs too short for the hardware prefetcher. One decode step's
// attention over 48 layers at 2048 positions: 26-31 ms against 33-34 (kernels_bench
// attention_decode_30b, docs/perf.md, session 13); to L1 instead it was slower.
constexpr std::int64_t kAheadRows = 32;

// The split decode's widest head (its widened 16-bit rows live on the stack): Qwen3.5's 256.
constexpr std::int64_t kMaxSliceDim = 256;

// The next `count` rows of `w` (none if count <= 0), `row_bytes` each, to L2.
inline void prefetch_rows(RowWalker& w, std::int64_t count, std::int64_t row_bytes) {
  for (std::int64_t j = 0; j < count; ++j) {
    const char* r = reinterpret_cast<const char*>(w.next());
    for (std::int64_t off = 0; off < row_bytes; off += 64) _mm_prefetch(r + off, _MM_HINT_T1);
  }
}

// A block's prefetches in G shares, one before each query head's work on the block. A software
// prefetch holds one of the core's few line fill buffers until its line arrives, and the next
// waits for a free one: the block's 128 lines (16 rows of 512 B) requested at once stalled the
// core until most had arrived (43 % of the kernel's samples sat right after them, docs/perf.md,
// session 26); in shares, the heads' FMAs run while the lines come. kernels_bench
// attention_decode_30b over 2048 / 8192 positions, f32: 27.9-28.6 / 119-121 ms -> 22.3-23.8 /
// 99.6-107; f16: 18-20 / 80-90 -> 15.8 / 69 (docs/perf.md, session 27).
class SpreadPrefetch {
 public:
  SpreadPrefetch(RowWalker& ahead, std::int64_t row_bytes, std::int64_t shares)
      : ahead_(ahead), row_bytes_(row_bytes), shares_(shares) {}
  void start_block(std::int64_t rows) {
    left_ = rows;
    per_share_ = (rows + shares_ - 1) / shares_;
  }
  void share() {
    if (left_ <= 0) return;
    const std::int64_t c = left_ < per_share_ ? left_ : per_share_;
    prefetch_rows(ahead_, c, row_bytes_);
    left_ -= c;
  }

 private:
  RowWalker& ahead_;
  std::int64_t row_bytes_, shares_, left_ = 0, per_share_ = 0;
};

// All query heads of KV head g for query token i over positions [first, last) (one slice of a
// split decode), blocks of 16 through L1; the unnormalized sums go to `part`. head_dim in pieces
// of V vectors (one piece up to 128; Qwen3.5's 256 in two), so a piece of the query and of the
// value sums stays in registers.
template <Kv E, int V, bool kPieces = false>
void kv_group_slice(const AttentionArgs& a, std::int64_t i, std::int64_t g, std::int64_t first, std::int64_t last,
                    const SlicePartial& part) {
  constexpr std::int64_t kBlock = 16;
  // One piece: head_dim a constant, the loops over pieces and widened elements fixed at compile
  // time (run-time bounds there cost Qwen3-30B-A3B's decode 5-10 %).
  const std::int64_t D = kPieces ? a.head_dim : 16 * V, visible = last - first;
  const std::int64_t G = a.num_heads / a.num_kv_heads, h0 = g * G;
  const std::int64_t stride = (visible + kBlock - 1) / kBlock * kBlock;  // scores row per head
  float* scores = static_cast<float*>(thread_scratch(kScratchAttention, static_cast<std::size_t>(G * stride) * sizeof(float)));
  float* accs = part.acc;  // [G][D]: the slice's sums go straight to its partial
  const float* q = a.q + (i * a.num_heads + h0) * D;
  const __m512 scale = _mm512_set1_ps(a.scale);
  const std::byte* rows[kBlock];
  // A 16-bit cache's block of rows, widened once here for all G heads (widening it once per head
  // cost more than the bytes it saves: docs/perf.md, session 15). fp32 rows are read in place.
  alignas(64) float wide[kBlock * kMaxSliceDim];
  auto widen = [&rows, &wide, D](std::int64_t n) __attribute__((always_inline)) {
    if constexpr (E != Kv::F32) {
      for (std::int64_t j = 0; j < n; ++j) {
        for (std::int64_t d = 0; d < D; d += 16) _mm512_store_ps(wide + j * D + d, load16<E>(rows[j], d));
        rows[j] = reinterpret_cast<const std::byte*>(wide + j * D);
      }
    }
  };

  const std::int64_t ahead = kAheadRows;
  RowWalker keys(a, a.k_offset, g, first), keys_ahead(a, a.k_offset, g, first);
  for (std::int64_t j = 0; j < ahead && j < visible; ++j) keys_ahead.next();
  SpreadPrefetch keys_prefetch(keys_ahead, D * kKvElementBytes<E>, G);
  for (std::int64_t p0 = 0; p0 < visible; p0 += kBlock) {
    const std::int64_t n = visible - p0 < kBlock ? visible - p0 : kBlock;
    for (std::int64_t j = 0; j < n; ++j) rows[j] = keys.next();
    keys_prefetch.start_block(visible - p0 - ahead < kBlock ? visible - p0 - ahead : kBlock);
    widen(n);
    for (std::int64_t h = 0; h < G; ++h) {
      keys_prefetch.share();
      __m512 acc[kBlock];
      for (std::int64_t j = 0; j < kBlock; ++j) acc[j] = _mm512_setzero_ps();
      for (std::int64_t d0 = 0; d0 < D; d0 += 16 * V) {
        __m512 qv[V];
        for (int v = 0; v < V; ++v) qv[v] = _mm512_loadu_ps(q + h * D + d0 + 16 * v);
        // All 16 unrolled with a guard, not a loop to n: indexed by a run-time count, acc[] would
        // live in memory.
#pragma GCC unroll 16
        for (std::int64_t j = 0; j < kBlock; ++j) {
          if (j >= n) continue;
          __m512 s = acc[j];
          for (int v = 0; v < V; ++v) s = _mm512_fmadd_ps(qv[v], load16<Kv::F32>(rows[j], d0 + 16 * v), s);
          acc[j] = s;
        }
      }
      // Unused lanes of the last block land in the row's padding.
      _mm512_storeu_ps(scores + h * stride + p0, _mm512_mul_ps(hsum16(acc), scale));
    }
  }

  for (std::int64_t h = 0; h < G; ++h) slice_softmax(scores + h * stride, visible, avx512::softmax_numerators_max, &part, h);
  for (std::int64_t x = 0; x < G * D; x += 16) _mm512_storeu_ps(accs + x, _mm512_setzero_ps());
  RowWalker values(a, a.v_offset, g, first), values_ahead(a, a.v_offset, g, first);
  for (std::int64_t j = 0; j < ahead && j < visible; ++j) values_ahead.next();
  SpreadPrefetch values_prefetch(values_ahead, D * kKvElementBytes<E>, G);
  for (std::int64_t p0 = 0; p0 < visible; p0 += kBlock) {
    const std::int64_t n = visible - p0 < kBlock ? visible - p0 : kBlock;
    for (std::int64_t j = 0; j < n; ++j) rows[j] = values.next();
    values_prefetch.start_block(visible - p0 - ahead < kBlock ? visible - p0 - ahead : kBlock);
    widen(n);
    for (std::int64_t h = 0; h < G; ++h) {
      values_prefetch.share();
      const float* sc = scores + h * stride + p0;
      for (std::int64_t d0 = 0; d0 < D; d0 += 16 * V) {
        float* ah = accs + h * D + d0;
        __m512 acc[V];
        for (int v = 0; v < V; ++v) acc[v] = _mm512_loadu_ps(ah + 16 * v);
        for (std::int64_t j = 0; j < n; ++j) {
          const __m512 s = _mm512_set1_ps(sc[j]);
          for (int v = 0; v < V; ++v) acc[v] = _mm512_fmadd_ps(s, load16<Kv::F32>(rows[j], d0 + 16 * v), acc[v]);
        }
        for (int v = 0; v < V; ++v) _mm512_storeu_ps(ah + 16 * v, acc[v]);
      }
    }
  }
}

using HeadFn = void (*)(const AttentionArgs&, std::int64_t, std::int64_t);

// The grouped slice kernel of one head width (split decode).
template <Kv E>
SliceKernel group_slice_fn(std::int64_t head_dim) {
  switch (head_dim / 16) {
    case 1: return kv_group_slice<E, 1>;
    case 2: return kv_group_slice<E, 2>;
    case 3: return kv_group_slice<E, 3>;
    case 4: return kv_group_slice<E, 4>;
    case 5: return kv_group_slice<E, 5>;
    case 6: return kv_group_slice<E, 6>;
    case 7: return kv_group_slice<E, 7>;
    case 8: return kv_group_slice<E, 8>;
    default: return head_dim % 128 == 0 && head_dim <= kMaxSliceDim ? kv_group_slice<E, 8, true> : nullptr;  // pieces of 128
  }
}

template <Kv E>
HeadFn head_fn(std::int64_t head_dim) {
  switch (head_dim / 16) {
    case 1: return one_head_regs<E, 1>;
    case 2: return one_head_regs<E, 2>;
    case 3: return one_head_regs<E, 3>;
    case 4: return one_head_regs<E, 4>;
    case 5: return one_head_regs<E, 5>;
    case 6: return one_head_regs<E, 6>;
    case 7: return one_head_regs<E, 7>;
    case 8: return one_head_regs<E, 8>;
    default: return one_head<E>;
  }
}

template <Kv E>
void attention_of(const AttentionArgs& a) {
  const std::int64_t group = a.num_heads / a.num_kv_heads;
  // Four (token, KV head) tasks per thread at least (prefill): tiles of tokens
  // (attention_prefill_avx512.cpp).
  if ((a.head_dim <= 16 * kMaxTileVecs || a.head_dim % (16 * kMaxTileVecs) == 0) && enough_prefill_tasks(a, kernel_threads()))
    return attention_prefill_tiles(a, kernel_threads());
  // Else, over a long cache, slices of the positions (decode, kernels/attention_split.h).
  const SliceKernel slice = group > 1 && group <= kMaxGroup ? group_slice_fn<E>(a.head_dim) : nullptr;
  if (slice != nullptr)
    if (const std::int64_t splits = attention_splits(a, kernel_threads()); splits >= 2) return split_attention(a, splits, slice);
  // Decode over a short cache: the per-head split, so every core has work.
  const HeadFn fn = head_fn<E>(a.head_dim);
  parallel_for(a.m * a.num_heads, 1, [&a, fn](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) fn(a, t / a.num_heads, t % a.num_heads);
  });
}

}  // namespace

// The wrapper (gemm_wrappers.cpp) has checked kv_dtype: F32, F16 or BF16.
void attention(const AttentionArgs& a) {
  with_kv_type(a.kv_dtype, [&a](auto type) { attention_of<decltype(type)::kValue>(a); });
}

}  // namespace fp4serve::kernels::avx512
