// Causal GQA attention for one sequence, AVX-512: q.k dot products and the weighted V sum in
// fp32 vectors over head_dim (a multiple of 16); softmax numerators with the 16-lane exp of
// vector_math_avx512.cpp.
//
// head_dim <= 128 (Qwen3: 128) has register-resident paths: the query and the V accumulators
// stay in registers (head_dim / 16 is a template argument), each key row is loaded once per
// FMA, and the 16 dot products of a block of positions are summed horizontally together (one
// transpose-and-add tree, ~3 instructions per position instead of ~9 for one reduction each).
// Positions walk the paged cache block by block without a division per position.
//  - Prefill (enough tasks): one task per (query token, KV head) computes all the query heads
//    that share that KV head, a block of positions at a time, so each key/value row comes from
//    L2 once per block and from L1 for the other heads (Qwen3-30B-A3B: 8 heads per KV head).
//    Reading each row from L2 once per head was the limit at 512 positions.
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
#include "kernels/kv_isa.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx512 {

namespace {

// Heads up to 256 wide keep their accumulators in registers; wider ones take several passes.
constexpr std::int64_t kMaxVecs = 16;

// Elements [i, i + 16) of a row, widened to fp32.
template <Kv E>
inline __m512 load16(const std::byte* row, std::int64_t i) {
  const std::byte* p = row + i * kKvElementBytes<E>;
  if constexpr (E == Kv::F32) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (E == Kv::F16) return _mm512_cvtph_ps(h);
    else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Row p of one cache side (key or value) of one KV head, walking positions in order.
class RowWalker {
 public:
  RowWalker(const AttentionArgs& a, std::int64_t side_offset, std::int64_t kvh, std::int64_t first = 0)
      : blocks_(a.kv_blocks), block_tokens_(a.block_tokens),
        stride_(a.num_kv_heads * a.head_dim * static_cast<std::int64_t>(kv_element_bytes(a.kv_dtype))),
        offset_((side_offset + kvh * a.head_dim) * static_cast<std::int64_t>(kv_element_bytes(a.kv_dtype))) {
    if (first > 0) {
      block_ = first / block_tokens_;
      in_block_ = first % block_tokens_;
      base_ = blocks_[block_++] + offset_;
    }
  }
  // The next position's row (the first call gives position `first`).
  const std::byte* next() {
    if (in_block_ == block_tokens_ || base_ == nullptr) {
      base_ = blocks_[block_] + offset_;
      ++block_;
      in_block_ = 0;
    }
    return base_ + (in_block_++) * stride_;
  }

 private:
  const std::byte* const* blocks_;
  std::int64_t block_tokens_, stride_, offset_;  // bytes
  const std::byte* base_ = nullptr;
  std::int64_t block_ = 0, in_block_ = 0;
};

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

// The next `count` rows of `w` (none if count <= 0), `row_bytes` each, to L2.
inline void prefetch_rows(RowWalker& w, std::int64_t count, std::int64_t row_bytes) {
  for (std::int64_t j = 0; j < count; ++j) {
    const char* r = reinterpret_cast<const char*>(w.next());
    for (std::int64_t off = 0; off < row_bytes; off += 64) _mm_prefetch(r + off, _MM_HINT_T1);
  }
}

// All query heads of KV head g for query token i over positions [first, last), blocks of 16
// through L1. part == nullptr: the whole range [0, visible), normalized into a.out.
template <Kv E, int V>
void kv_group_range(const AttentionArgs& a, std::int64_t i, std::int64_t g, std::int64_t first, std::int64_t last,
                    const SlicePartial* part) {
  constexpr std::int64_t kBlock = 16;
  const std::int64_t D = a.head_dim, visible = last - first;
  const std::int64_t G = a.num_heads / a.num_kv_heads, h0 = g * G;
  const std::int64_t stride = (visible + kBlock - 1) / kBlock * kBlock;  // scores row per head
  float* scores = static_cast<float*>(
      thread_scratch(kScratchAttention, static_cast<std::size_t>(G * (stride + D)) * sizeof(float)));
  float* accs = scores + G * stride;  // [G][D] V accumulators between blocks
  const float* q = a.q + (i * a.num_heads + h0) * D;
  const __m512 scale = _mm512_set1_ps(a.scale);
  const std::byte* rows[kBlock];
  // A 16-bit cache's block of rows, widened once here for all G heads (widening it once per head
  // cost more than the bytes it saves: docs/perf.md, session 15). fp32 rows are read in place.
  alignas(64) float wide[kBlock * V * 16];
  auto widen = [&rows, &wide](std::int64_t n) __attribute__((always_inline)) {
    if constexpr (E != Kv::F32) {
      for (std::int64_t j = 0; j < n; ++j) {
        for (int v = 0; v < V; ++v) _mm512_store_ps(wide + (j * V + v) * 16, load16<E>(rows[j], 16 * v));
        rows[j] = reinterpret_cast<const std::byte*>(wide + j * V * 16);
      }
    }
  };

  // Only split decode prefetches (measured there); prefill's rows are reused from L2 by the next
  // tokens' tasks. `ahead` = `visible` turns the prefetch off.
  const std::int64_t ahead = part != nullptr ? kAheadRows : visible;
  RowWalker keys(a, a.k_offset, g, first), keys_ahead(a, a.k_offset, g, first);
  for (std::int64_t j = 0; part != nullptr && j < ahead && j < visible; ++j) keys_ahead.next();
  for (std::int64_t p0 = 0; p0 < visible; p0 += kBlock) {
    const std::int64_t n = visible - p0 < kBlock ? visible - p0 : kBlock;
    for (std::int64_t j = 0; j < n; ++j) rows[j] = keys.next();
    prefetch_rows(keys_ahead, visible - p0 - ahead < kBlock ? visible - p0 - ahead : kBlock, D * kKvElementBytes<E>);
    widen(n);
    for (std::int64_t h = 0; h < G; ++h) {
      __m512 qv[V];
      for (int v = 0; v < V; ++v) qv[v] = _mm512_loadu_ps(q + h * D + 16 * v);
      __m512 acc[kBlock];
      for (std::int64_t j = 0; j < kBlock; ++j) {
        if (j >= n) {
          acc[j] = _mm512_setzero_ps();
          continue;
        }
        __m512 s = _mm512_mul_ps(qv[0], load16<Kv::F32>(rows[j], 0));
        for (int v = 1; v < V; ++v) s = _mm512_fmadd_ps(qv[v], load16<Kv::F32>(rows[j], 16 * v), s);
        acc[j] = s;
      }
      // Unused lanes of the last block land in the row's padding.
      _mm512_storeu_ps(scores + h * stride + p0, _mm512_mul_ps(hsum16(acc), scale));
    }
  }

  float inv[kMaxGroup];
  for (std::int64_t h = 0; h < G; ++h) inv[h] = slice_softmax(scores + h * stride, visible, avx512::softmax_numerators, part, h);
  if (part != nullptr) accs = part->acc;  // the slice's sums go straight to its partial
  for (std::int64_t x = 0; x < G * D; x += 16) _mm512_storeu_ps(accs + x, _mm512_setzero_ps());
  RowWalker values(a, a.v_offset, g, first), values_ahead(a, a.v_offset, g, first);
  for (std::int64_t j = 0; part != nullptr && j < ahead && j < visible; ++j) values_ahead.next();
  for (std::int64_t p0 = 0; p0 < visible; p0 += kBlock) {
    const std::int64_t n = visible - p0 < kBlock ? visible - p0 : kBlock;
    for (std::int64_t j = 0; j < n; ++j) rows[j] = values.next();
    prefetch_rows(values_ahead, visible - p0 - ahead < kBlock ? visible - p0 - ahead : kBlock, D * kKvElementBytes<E>);
    widen(n);
    for (std::int64_t h = 0; h < G; ++h) {
      const float* sc = scores + h * stride + p0;
      float* ah = accs + h * D;
      __m512 acc[V];
      for (int v = 0; v < V; ++v) acc[v] = _mm512_loadu_ps(ah + 16 * v);
      for (std::int64_t j = 0; j < n; ++j) {
        const __m512 s = _mm512_set1_ps(sc[j]);
        for (int v = 0; v < V; ++v) acc[v] = _mm512_fmadd_ps(s, load16<Kv::F32>(rows[j], 16 * v), acc[v]);
      }
      for (int v = 0; v < V; ++v) _mm512_storeu_ps(ah + 16 * v, acc[v]);
    }
  }
  if (part != nullptr) return;
  float* out = a.out + (i * a.num_heads + h0) * D;
  for (std::int64_t h = 0; h < G; ++h) {
    const __m512 sc = _mm512_set1_ps(inv[h]);
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + h * D + 16 * v, _mm512_mul_ps(_mm512_loadu_ps(accs + h * D + 16 * v), sc));
  }
}

template <Kv E, int V>
void kv_group_regs(const AttentionArgs& a, std::int64_t i, std::int64_t g) {
  kv_group_range<E, V>(a, i, g, 0, a.past + i + 1, nullptr);
}

template <Kv E, int V>
void kv_group_slice(const AttentionArgs& a, std::int64_t i, std::int64_t g, std::int64_t first, std::int64_t last,
                    const SlicePartial& part) {
  kv_group_range<E, V>(a, i, g, first, last, &part);
}

using HeadFn = void (*)(const AttentionArgs&, std::int64_t, std::int64_t);

// The grouped kernel of one head width: over all positions (prefill) and over a slice (split decode).
struct GroupFns {
  HeadFn whole = nullptr;
  SliceKernel slice = nullptr;
};

template <Kv E, int V>
GroupFns group_fns_of() {
  return {kv_group_regs<E, V>, kv_group_slice<E, V>};
}

template <Kv E>
GroupFns group_fns(std::int64_t head_dim) {
  switch (head_dim / 16) {
    case 1: return group_fns_of<E, 1>();
    case 2: return group_fns_of<E, 2>();
    case 3: return group_fns_of<E, 3>();
    case 4: return group_fns_of<E, 4>();
    case 5: return group_fns_of<E, 5>();
    case 6: return group_fns_of<E, 6>();
    case 7: return group_fns_of<E, 7>();
    case 8: return group_fns_of<E, 8>();
    default: return {};
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
  const GroupFns grouped = group > 1 && group <= kMaxGroup ? group_fns<E>(a.head_dim) : GroupFns{};
  if (grouped.whole != nullptr) {
    // Four tasks per thread at least (prefill); else, over a long cache, the same tasks over
    // slices of the positions (decode, kernels/attention_split.h).
    if (a.m * a.num_kv_heads >= 4 * kernel_threads()) {
      parallel_for(a.m * a.num_kv_heads, 1, [&a, &grouped](std::int64_t b, std::int64_t e) {
        for (std::int64_t t = b; t < e; ++t) grouped.whole(a, t / a.num_kv_heads, t % a.num_kv_heads);
      });
      return;
    }
    if (const std::int64_t splits = attention_splits(a, kernel_threads()); splits >= 2)
      return split_attention(a, splits, grouped.slice);
  }
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
