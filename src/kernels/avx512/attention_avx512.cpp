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
// ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstdint>

#include "kernels/attention_split.h"
#include "kernels/isa_kernels.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx512 {

namespace {

// Heads up to 256 wide keep their accumulators in registers; wider ones take several passes.
constexpr std::int64_t kMaxVecs = 16;

// Row p of one cache side (key or value) of one KV head, walking positions in order.
class RowWalker {
 public:
  RowWalker(const AttentionArgs& a, std::int64_t side_offset, std::int64_t kvh, std::int64_t first = 0)
      : blocks_(a.kv_blocks), block_tokens_(a.block_tokens), stride_(a.num_kv_heads * a.head_dim),
        offset_(side_offset + kvh * a.head_dim) {
    if (first > 0) {
      block_ = first / block_tokens_;
      in_block_ = first % block_tokens_;
      base_ = blocks_[block_++] + offset_;
    }
  }
  // The next position's row (the first call gives position `first`).
  const float* next() {
    if (in_block_ == block_tokens_ || base_ == nullptr) {
      base_ = blocks_[block_] + offset_;
      ++block_;
      in_block_ = 0;
    }
    return base_ + (in_block_++) * stride_;
  }

 private:
  const float* const* blocks_;
  std::int64_t block_tokens_, stride_, offset_;
  const float* base_ = nullptr;
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

template <int V>
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
      const float* k = keys.next();
      __m512 s = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
      for (int v = 1; v < V; ++v) s = _mm512_fmadd_ps(qv[v], _mm512_loadu_ps(k + 16 * v), s);
      acc[j] = s;
    }
    _mm512_storeu_ps(scores + p, _mm512_mul_ps(hsum16(acc), scale));
  }
  for (; p < visible; ++p) {
    const float* k = keys.next();
    __m512 s = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
    for (int v = 1; v < V; ++v) s = _mm512_fmadd_ps(qv[v], _mm512_loadu_ps(k + 16 * v), s);
    scores[p] = _mm512_reduce_add_ps(s) * a.scale;
  }
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / avx512::softmax_numerators(scores, visible)));
  __m512 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_ps();
  RowWalker values(a, a.v_offset, kvh);
  for (p = 0; p < visible; ++p) {
    const __m512 s = _mm512_set1_ps(scores[p]);
    const float* row = values.next();
    for (int v = 0; v < V; ++v) acc[v] = _mm512_fmadd_ps(s, _mm512_loadu_ps(row + 16 * v), acc[v]);
  }
  float* out = a.out + (i * a.num_heads + h) * D;
  for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + 16 * v, _mm512_mul_ps(acc[v], inv));
}

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
  const float inv = static_cast<float>(1.0 / avx512::softmax_numerators(scores, visible));
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

constexpr std::int64_t kMaxGroup = 64;  // query heads per KV head on the grouped path

// Rows this far ahead of the one being read are requested to L2: a KV head's row is 512 of
// every 2 KB at a position (Qwen3: 4 KV heads) and a cache block of 16 positions is 3 MB from
// the next (all layers together), runs too short for the hardware prefetcher. One decode step's
// attention over 48 layers at 2048 positions: 26-31 ms against 33-34 (kernels_bench
// attention_decode_30b, docs/perf.md, session 13); to L1 instead it was slower.
constexpr std::int64_t kAheadRows = 32;

// The next `count` rows of `w` (none if count <= 0), D floats each, to L2.
inline void prefetch_rows(RowWalker& w, std::int64_t count, std::int64_t D) {
  for (std::int64_t j = 0; j < count; ++j) {
    const char* r = reinterpret_cast<const char*>(w.next());
    for (std::int64_t off = 0; off < D * 4; off += 64) _mm_prefetch(r + off, _MM_HINT_T1);
  }
}

// All query heads of KV head g for query token i over positions [first, last), blocks of 16
// through L1. part == nullptr: the whole range [0, visible), normalized into a.out.
template <int V>
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
  const float* rows[kBlock];

  // Only split decode prefetches (measured there); prefill's rows are reused from L2 by the next
  // tokens' tasks. `ahead` = `visible` turns the prefetch off.
  const std::int64_t ahead = part != nullptr ? kAheadRows : visible;
  RowWalker keys(a, a.k_offset, g, first), keys_ahead(a, a.k_offset, g, first);
  for (std::int64_t j = 0; part != nullptr && j < ahead && j < visible; ++j) keys_ahead.next();
  for (std::int64_t p0 = 0; p0 < visible; p0 += kBlock) {
    const std::int64_t n = visible - p0 < kBlock ? visible - p0 : kBlock;
    for (std::int64_t j = 0; j < n; ++j) rows[j] = keys.next();
    prefetch_rows(keys_ahead, visible - p0 - ahead < kBlock ? visible - p0 - ahead : kBlock, D);
    for (std::int64_t h = 0; h < G; ++h) {
      __m512 qv[V];
      for (int v = 0; v < V; ++v) qv[v] = _mm512_loadu_ps(q + h * D + 16 * v);
      __m512 acc[kBlock];
      for (std::int64_t j = 0; j < kBlock; ++j) {
        if (j >= n) {
          acc[j] = _mm512_setzero_ps();
          continue;
        }
        __m512 s = _mm512_mul_ps(qv[0], _mm512_loadu_ps(rows[j]));
        for (int v = 1; v < V; ++v) s = _mm512_fmadd_ps(qv[v], _mm512_loadu_ps(rows[j] + 16 * v), s);
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
    prefetch_rows(values_ahead, visible - p0 - ahead < kBlock ? visible - p0 - ahead : kBlock, D);
    for (std::int64_t h = 0; h < G; ++h) {
      const float* sc = scores + h * stride + p0;
      float* ah = accs + h * D;
      __m512 acc[V];
      for (int v = 0; v < V; ++v) acc[v] = _mm512_loadu_ps(ah + 16 * v);
      for (std::int64_t j = 0; j < n; ++j) {
        const __m512 s = _mm512_set1_ps(sc[j]);
        for (int v = 0; v < V; ++v) acc[v] = _mm512_fmadd_ps(s, _mm512_loadu_ps(rows[j] + 16 * v), acc[v]);
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

template <int V>
void kv_group_regs(const AttentionArgs& a, std::int64_t i, std::int64_t g) {
  kv_group_range<V>(a, i, g, 0, a.past + i + 1, nullptr);
}

template <int V>
void kv_group_slice(const AttentionArgs& a, std::int64_t i, std::int64_t g, std::int64_t first, std::int64_t last,
                    const SlicePartial& part) {
  kv_group_range<V>(a, i, g, first, last, &part);
}

using HeadFn = void (*)(const AttentionArgs&, std::int64_t, std::int64_t);

// The grouped kernel of one head width: over all positions (prefill) and over a slice (split decode).
struct GroupFns {
  HeadFn whole = nullptr;
  SliceKernel slice = nullptr;
};

template <int V>
GroupFns group_fns_of() {
  return {kv_group_regs<V>, kv_group_slice<V>};
}

GroupFns group_fns(std::int64_t head_dim) {
  switch (head_dim / 16) {
    case 1: return group_fns_of<1>();
    case 2: return group_fns_of<2>();
    case 3: return group_fns_of<3>();
    case 4: return group_fns_of<4>();
    case 5: return group_fns_of<5>();
    case 6: return group_fns_of<6>();
    case 7: return group_fns_of<7>();
    case 8: return group_fns_of<8>();
    default: return {};
  }
}

HeadFn head_fn(std::int64_t head_dim) {
  switch (head_dim / 16) {
    case 1: return one_head_regs<1>;
    case 2: return one_head_regs<2>;
    case 3: return one_head_regs<3>;
    case 4: return one_head_regs<4>;
    case 5: return one_head_regs<5>;
    case 6: return one_head_regs<6>;
    case 7: return one_head_regs<7>;
    case 8: return one_head_regs<8>;
    default: return one_head;
  }
}

}  // namespace

void attention(const AttentionArgs& a) {
  const std::int64_t group = a.num_heads / a.num_kv_heads;
  const GroupFns grouped = group > 1 && group <= kMaxGroup ? group_fns(a.head_dim) : GroupFns{};
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
  const HeadFn fn = head_fn(a.head_dim);
  parallel_for(a.m * a.num_heads, 1, [&a, fn](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) fn(a, t / a.num_heads, t % a.num_heads);
  });
}

}  // namespace fp4serve::kernels::avx512
