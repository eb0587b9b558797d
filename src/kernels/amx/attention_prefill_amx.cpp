// Causal GQA attention for a prefill on AMX BF16 tiles: the flash-attention tiles of
// avx512/attention_prefill_avx512.cpp (a task takes consecutive query tokens x the query heads of
// one KV head, here up to 256 rows, and walks the visible positions in softmax chunks of 256) with
// both matrix products on tiles instead of fp32 FMAs:
//  1. scores S = Q K^T: A = 16 query rows x 32 dimensions, B = 32 dimensions (16 pairs) x 16
//     positions; every KV head's keys are packed into that pair layout once per call (pack_kv);
//  2. the softmax step, shared with the AVX-512 tiles (prefill_chunk_softmax and its vector
//     loops), then each row's scores past its causal limit set to 0;
//  3. value sums O += P V: A = 16 query rows x 32 positions, B = 32 positions (16 pairs) x 16
//     dimensions; the sums stay in memory between chunks (the softmax step rescales them there)
//     and go through C tiles per 16 rows x 32 dimensions.
// Why: at depth the attention is a large share of a prefill (pp512 at depth 2048: score and
// value loops ≈ 38 % of the samples on the AVX-512 tiles, which the FMA ports bound), and the
// tiles multiply-add 16x as much per cycle as two FMA ports (docs/perf.md, session 32).
//
// Precision: every fp32 operand (queries, fp32 or fp16 keys and values, probabilities) is split
// into bf16 hi + lo, about 2^-17 of its value (amx_tiles.h, next_part); each product runs as
// hi x hi + hi x lo + lo x hi (lo x lo lies below the parts' own residue), with fp32 accumulation:
// the class of amx's GEMMs (Precision::Activations16, validated at fp32's 1e-4). A bf16 cache's
// keys and values are one part already, so their products are two. Each output row depends on its
// own query and probabilities only, and the positions run in the same 32-position steps from the
// chunk's start whatever the tile holds: a token's output is the same in a tile of any size.
// Positions past a row's limit (up to its tile's last row's) enter as probability 0 times their
// value, so a value row holding NaN or Inf is summed apart, only into the rows that see it
// (pack_values).
// ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/amx/amx_tiles.h"
#include "kernels/avx512/attention_rows.h"
#include "kernels/isa_kernels.h"
#include "kernels/kv_isa.h"
#include "kernels/online_softmax.h"
#include "kernels/prefill_tiles.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::amx {

namespace {

using avx512::load16;
using avx512::RowWalker;

constexpr std::int64_t kChunk = kPrefillChunk;  // positions per softmax step
constexpr std::int64_t kRows = 16;              // query rows per tile
constexpr std::int64_t kStep = 32;              // K of one tile product: 16 bf16 pairs
// Query rows per task, twice the AVX-512 tiles'. While each task packed the keys and values it
// read, fewer and larger tasks packed them fewer times (kernels_bench attention_prefill_30b at
// past 7680: 161 ms with 128 rows, 146 with 256, 135 with 512, 142 with 1024; 397b 267 / 227 /
// 219 / 224); with the packing done once per call (pack_kv) 256 still measured best or level
// (30b 131 / 127 / 130 ms, again 140 / 133 / 129; docs/perf.md, session 32).
constexpr std::int64_t kTileRows = 256;
// Tile registers: C 0, 1 (two 16-column halves), A 2 (hi), 3 (lo), B 4, 5 (hi of both halves),
// 6, 7 (lo of both halves).

inline std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

// A task's working memory (kScratchAttentionTiles): Qp = Q rounded up to 16 rows.
struct Buffers {
  std::uint16_t *qh, *ql;  // [Qp][D] queries
  std::uint16_t *ph, *pl;  // [Qp][kChunk] probabilities
  float* s;                // [Qp][kChunk] scores, then softmax numerators
  float* o;                // [Qp][D] value sums
  RunningSoftmax* state;   // [Qp]
};

Buffers task_buffers(std::int64_t qp, std::int64_t D) {
  const std::int64_t words[2] = {qp * D, qp * kChunk};  // per part
  std::size_t bytes = 0;
  for (std::int64_t w : words) bytes += static_cast<std::size_t>(2 * w) * 2;
  bytes += static_cast<std::size_t>(qp * kChunk + qp * D) * sizeof(float) + static_cast<std::size_t>(qp) * sizeof(RunningSoftmax) + 3 * 64;
  auto* p = static_cast<std::uint8_t*>(thread_scratch(kScratchAttentionTiles, bytes));  // 64-byte aligned
  auto take = [&p](std::int64_t count, std::int64_t size) {
    std::uint8_t* at = p;
    p += static_cast<std::size_t>(count * size + 63) / 64 * 64;
    return at;
  };
  Buffers b;
  b.qh = reinterpret_cast<std::uint16_t*>(take(words[0], 2));
  b.ql = reinterpret_cast<std::uint16_t*>(take(words[0], 2));
  b.ph = reinterpret_cast<std::uint16_t*>(take(words[1], 2));
  b.pl = reinterpret_cast<std::uint16_t*>(take(words[1], 2));
  b.s = reinterpret_cast<float*>(take(qp * kChunk, 4));
  b.o = reinterpret_cast<float*>(take(qp * D, 4));
  b.state = reinterpret_cast<RunningSoftmax*>(take(qp, static_cast<std::int64_t>(sizeof(RunningSoftmax))));
  return b;
}

// Rows [0, rows) of src (fp32, `ld` apart) as bf16 hi and lo, n (a multiple of 32) per row, `ldp`
// words apart.
void split_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t n, std::uint16_t* hi,
                std::uint16_t* lo, std::int64_t ldp) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < n; j += 32) {
      __m512 a = _mm512_loadu_ps(src + r * ld + j), b = _mm512_loadu_ps(src + r * ld + j + 16);
      _mm512_store_si512(hi + r * ldp + j, next_part(a, b));
      _mm512_store_si512(lo + r * ldp + j, next_part(a, b));
    }
}

inline __mmask16 non_finite(__m512 v) {
  const __m512 a = _mm512_and_ps(v, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF)));
  return _mm512_cmp_ps_mask(a, _mm512_set1_ps(3.4028235e38f), _CMP_NLE_UQ);
}

// Positions [0, n) of the chunk (`rows`, n rounded up to 32 with zero rows) as B tiles of keys:
// for 16 positions and 16 dimension pairs, tile row p holds (k[2p], k[2p + 1]) of each position.
// A key with NaN or Inf makes NaN scores in every row of the tile, but the softmax step reads
// only a row's visible ones, and those past it become 0.
template <Kv E>
void pack_keys(const std::byte* const* rows, std::int64_t n, std::int64_t D, std::uint16_t* kh, std::uint16_t* kl) {
  const std::int64_t np = round_up(n, kStep);
  for (std::int64_t j0 = 0; j0 < np; j0 += 16)
    for (std::int64_t d0 = 0; d0 < D; d0 += 32) {
      __m512 h[16], l[16];
      for (std::int64_t j = 0; j < 16; ++j) {
        __m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps();
        if (j0 + j < n) {
          x0 = load16<E>(rows[j0 + j], d0);
          x1 = load16<E>(rows[j0 + j], d0 + 16);
        }
        h[j] = _mm512_castsi512_ps(next_part(x0, x1));  // dword p: dimensions 2p, 2p + 1
        l[j] = _mm512_castsi512_ps(next_part(x0, x1));
      }
      avx512::transpose16(h);  // h[p]: dimension pair p of the 16 positions
      std::uint16_t* dh = kh + (j0 / 16 * (D / 2) + d0 / 2) * 32;
      for (int p = 0; p < 16; ++p) _mm512_store_ps(reinterpret_cast<float*>(dh + 32 * p), h[p]);
      if constexpr (E != Kv::BF16) {
        avx512::transpose16(l);
        std::uint16_t* dl = kl + (j0 / 16 * (D / 2) + d0 / 2) * 32;
        for (int p = 0; p < 16; ++p) _mm512_store_ps(reinterpret_cast<float*>(dl + 32 * p), l[p]);
      }
    }
}

// Word indices that interleave two rows' 32 words: the first 16 of each, then the last 16.
struct PairIndex {
  alignas(64) std::uint16_t first[32], second[32];
  constexpr PairIndex() : first{}, second{} {
    for (int i = 0; i < 16; ++i) {
      first[2 * i] = static_cast<std::uint16_t>(i);
      first[2 * i + 1] = static_cast<std::uint16_t>(32 + i);
      second[2 * i] = static_cast<std::uint16_t>(16 + i);
      second[2 * i + 1] = static_cast<std::uint16_t>(48 + i);
    }
  }
};
constexpr PairIndex kPairIndex;

// Positions [0, n) of the chunk as B tiles of values: row p of the pair layout holds (v[2p][d],
// v[2p + 1][d]) for every dimension d; zero rows up to n rounded to 32. A row holding NaN or Inf
// is packed as zeros and its position listed in `bad` (their count returned): a row of the tile
// past its causal limit would meet it as 0 x NaN, so value_rows_apart adds it only where it is
// seen.
template <Kv E>
std::int32_t pack_values(const std::byte* const* rows, std::int64_t n, std::int64_t D, std::uint16_t* vh, std::uint16_t* vl,
                         std::int32_t* bad) {
  std::int32_t bad_rows = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    __mmask16 m = 0;
    for (std::int64_t d = 0; d < D; d += 16) m = static_cast<__mmask16>(m | non_finite(load16<E>(rows[j], d)));
    if (m != 0) bad[bad_rows++] = static_cast<std::int32_t>(j);
  }
  const __m512i first = _mm512_load_si512(kPairIndex.first), second = _mm512_load_si512(kPairIndex.second);
  const std::int64_t np = round_up(n, kStep);
  for (std::int64_t p = 0, next_bad = 0; p < np / 2; ++p) {
    bool use[2];
    for (int e = 0; e < 2; ++e) {
      const std::int64_t j = 2 * p + e;
      use[e] = j < n;
      if (next_bad < bad_rows && bad[next_bad] == j) {
        use[e] = false;
        ++next_bad;
      }
    }
    for (std::int64_t d = 0; d < D; d += 32) {
      __m512i h[2], l[2];
      for (int e = 0; e < 2; ++e) {
        __m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps();
        if (use[e]) {
          x0 = load16<E>(rows[2 * p + e], d);
          x1 = load16<E>(rows[2 * p + e], d + 16);
        }
        h[e] = next_part(x0, x1);
        l[e] = next_part(x0, x1);
      }
      std::uint16_t* dh = vh + (p * D + d) * 2;
      _mm512_store_si512(dh, _mm512_permutex2var_epi16(h[0], first, h[1]));
      _mm512_store_si512(dh + 32, _mm512_permutex2var_epi16(h[0], second, h[1]));
      if constexpr (E != Kv::BF16) {
        std::uint16_t* dl = vl + (p * D + d) * 2;
        _mm512_store_si512(dl, _mm512_permutex2var_epi16(l[0], first, l[1]));
        _mm512_store_si512(dl + 32, _mm512_permutex2var_epi16(l[0], second, l[1]));
      }
    }
  }
  return bad_rows;
}

// o[r] += p[r][j] * v[j] in fp32 for the rows r < Q that see position j: the value rows
// pack_values left out. Their sums come out NaN or infinite wherever they are seen, as on the
// AVX-512 tiles; rows that do not see them never touch them.
template <Kv E, class Visible>
void value_rows_apart(const std::byte* const* rows, const std::int32_t* bad, std::int64_t bad_rows, std::int64_t Q,
                      std::int64_t D, const Buffers& b, Visible&& visible) {
  for (std::int64_t i = 0; i < bad_rows; ++i) {
    const std::int64_t j = bad[i];
    for (std::int64_t r = 0; r < Q; ++r) {
      if (visible(r) <= j) continue;
      const __m512 p = _mm512_set1_ps(b.s[r * kChunk + j]);
      for (std::int64_t d = 0; d < D; d += 16)
        _mm512_storeu_ps(b.o + r * D + d, _mm512_fmadd_ps(p, load16<E>(rows[j], d), _mm512_loadu_ps(b.o + r * D + d)));
    }
  }
}

// Every KV head's keys and values as B tiles, chunk by chunk, packed once per call before the
// tasks run (kScratchAttentionKv of the calling thread, 4 bytes per element and part, read by
// every task). When each task packed the positions it sees, every chunk was packed once per task
// of its KV head (16 times for 512 tokens): kernels_bench attention_prefill_397b at depth 1536
// 55 -> 44 ms, at 7680 201 -> 177; 30b level to -6 % (docs/perf.md, session 32).
struct KvPacks {
  std::uint16_t* words;  // per (KV head, chunk): keys hi, lo, values hi, lo, kChunk * D words each
  std::int32_t* bad;     // per (KV head, chunk): the count, then the chunk's value rows with NaN or Inf
  std::int64_t chunks, D;
  std::uint16_t* part(std::int64_t g, std::int64_t c, int which) const {
    return words + ((g * chunks + c) * 4 + which) * kChunk * D;
  }
  std::int32_t* bad_rows(std::int64_t g, std::int64_t c) const { return bad + (g * chunks + c) * (kChunk + 1); }
};

template <Kv E>
KvPacks pack_kv(const AttentionArgs& a) {
  const std::int64_t D = a.head_dim, positions = a.past + a.m, chunks = (positions + kChunk - 1) / kChunk;
  const std::size_t words = static_cast<std::size_t>(a.num_kv_heads * chunks * 4 * kChunk * D);
  const std::size_t lists = static_cast<std::size_t>(a.num_kv_heads * chunks * (kChunk + 1));
  auto* mem = static_cast<std::uint8_t*>(thread_scratch(kScratchAttentionKv, words * 2 + lists * 4));
  const KvPacks packs{reinterpret_cast<std::uint16_t*>(mem), reinterpret_cast<std::int32_t*>(mem + words * 2), chunks, D};
  parallel_for(a.num_kv_heads * chunks, 1, [&a, &packs, positions, D](std::int64_t b, std::int64_t e) {
    const std::byte* rows[kChunk];
    for (std::int64_t t = b; t < e; ++t) {
      const std::int64_t g = t / packs.chunks, c = t % packs.chunks, c0 = c * kChunk;
      const std::int64_t cn = positions - c0 < kChunk ? positions - c0 : kChunk;
      RowWalker keys(a, a.k_offset, g, c0), values(a, a.v_offset, g, c0);
      for (std::int64_t j = 0; j < cn; ++j) rows[j] = keys.next();
      pack_keys<E>(rows, cn, D, packs.part(g, c, 0), packs.part(g, c, 1));
      for (std::int64_t j = 0; j < cn; ++j) rows[j] = values.next();
      std::int32_t* bad = packs.bad_rows(g, c);
      bad[0] = pack_values<E>(rows, cn, D, packs.part(g, c, 2), packs.part(g, c, 3), bad + 1);
    }
  });
  return packs;
}

// C tiles 0 and 1 += A (2: hi, 3: lo) x B (4, 5: hi; 6, 7: lo), the three products of two split
// operands; `b_lo`: B has a lo part (not a bf16 cache).
inline void split_products(bool b_lo) {
  _tile_dpbf16ps(0, 2, 4);
  _tile_dpbf16ps(1, 2, 5);
  if (b_lo) {
    _tile_dpbf16ps(0, 2, 6);
    _tile_dpbf16ps(1, 2, 7);
  }
  _tile_dpbf16ps(0, 3, 4);
  _tile_dpbf16ps(1, 3, 5);
}

// Query tokens [i0, i0 + T), every query head of KV head g.
template <Kv E>
void tile_task(const AttentionArgs& a, const KvPacks& packs, std::int64_t i0, std::int64_t T, std::int64_t g) {
  constexpr bool kLo = E != Kv::BF16;
  const std::int64_t D = a.head_dim, G = a.num_heads / a.num_kv_heads, Q = T * G, Qp = round_up(Q, kRows);
  const std::int64_t visible_max = a.past + i0 + T;
  const Buffers b = task_buffers(Qp, D);
  PrefillTileScratch t{};  // what the shared softmax step and finish read
  t.s = b.s;
  t.o = b.o;
  t.state = b.state;
  for (std::int64_t r = 0; r < Q; ++r) b.state[r] = RunningSoftmax{};
  std::memset(b.o, 0, static_cast<std::size_t>(Qp * D) * sizeof(float));
  for (std::int64_t i = 0; i < T; ++i)  // the G heads of group g are adjacent in a token's row
    split_rows(a.q + ((i0 + i) * a.num_heads + g * G) * D, D, G, D, b.qh + i * G * D, b.ql + i * G * D, D);
  std::memset(b.qh + Q * D, 0, static_cast<std::size_t>((Qp - Q) * D) * 2);
  std::memset(b.ql + Q * D, 0, static_cast<std::size_t>((Qp - Q) * D) * 2);
  std::memset(b.ph + Q * kChunk, 0, static_cast<std::size_t>((Qp - Q) * kChunk) * 2);
  std::memset(b.pl + Q * kChunk, 0, static_cast<std::size_t>((Qp - Q) * kChunk) * 2);
  // Positions of the chunk from c0 that query row r sees (at most cn; <= 0: none).
  auto visible = [&](std::int64_t r, std::int64_t c0, std::int64_t cn) {
    const std::int64_t n = a.past + i0 + r / G + 1 - c0;
    return n < cn ? n : cn;
  };
  const __m512 scale = _mm512_set1_ps(a.scale);
  configure_tiles(64, 64);
  for (std::int64_t c0 = 0; c0 < visible_max; c0 += kChunk) {
    const std::int64_t cn = visible_max - c0 < kChunk ? visible_max - c0 : kChunk;
    const std::uint16_t *kh = packs.part(g, c0 / kChunk, 0), *kl = packs.part(g, c0 / kChunk, 1);
    const std::uint16_t *vh = packs.part(g, c0 / kChunk, 2), *vl = packs.part(g, c0 / kChunk, 3);
    // 1. Scores of each 16-row tile against the positions its last row sees.
    for (std::int64_t r0 = 0; r0 < Qp; r0 += kRows) {
      const std::int64_t jn = visible(r0 + kRows - 1 < Q ? r0 + kRows - 1 : Q - 1, c0, cn);
      for (std::int64_t j0 = 0; j0 < jn; j0 += kStep) {
        _tile_zero(0);
        _tile_zero(1);
        for (std::int64_t d0 = 0; d0 < D; d0 += kStep) {
          FP4SERVE_TILE_LOAD(2, b.qh + r0 * D + d0, D * 2);
          FP4SERVE_TILE_LOAD(3, b.ql + r0 * D + d0, D * 2);
          const std::int64_t at = (j0 / 16 * (D / 2) + d0 / 2) * 32;
          FP4SERVE_TILE_LOAD(4, kh + at, 64);
          FP4SERVE_TILE_LOAD(5, kh + at + D / 2 * 32, 64);
          if (kLo) {
            FP4SERVE_TILE_LOAD(6, kl + at, 64);
            FP4SERVE_TILE_LOAD(7, kl + at + D / 2 * 32, 64);
          }
          split_products(kLo);
        }
        _tile_stored(0, b.s + r0 * kChunk + j0, kChunk * 4);
        _tile_stored(1, b.s + r0 * kChunk + j0 + 16, kChunk * 4);
        for (std::int64_t r = r0; r < r0 + kRows; ++r)
          for (std::int64_t j = j0; j < j0 + kStep; j += 16)
            _mm512_store_ps(b.s + r * kChunk + j, _mm512_mul_ps(_mm512_load_ps(b.s + r * kChunk + j), scale));
      }
    }
    // 2. Softmax numerators over each row's visible scores, earlier sums rescaled; then the
    // probabilities as bf16 parts, 0 past each row's limit up to its tile's.
    prefill_chunk_softmax(a, i0, T, c0, cn, t, avx512::prefill_vector_ops());
    for (std::int64_t r = 0; r < Q; ++r) {
      const std::int64_t last = (r | (kRows - 1)) < Q ? (r | (kRows - 1)) : Q - 1;  // of r's tile
      const std::int64_t n = visible(r, c0, cn), tile_n = round_up(visible(last, c0, cn), kStep);
      float* sr = b.s + r * kChunk;
      for (std::int64_t j = n > 0 ? n : 0; j < tile_n; ++j) sr[j] = 0.0f;
      split_rows(sr, kChunk, 1, tile_n > 0 ? tile_n : 0, b.ph + r * kChunk, b.pl + r * kChunk, kChunk);
    }
    // 3. Value sums of each 16-row tile over the positions its last row sees.
    for (std::int64_t r0 = 0; r0 < Qp; r0 += kRows) {
      const std::int64_t jn = visible(r0 + kRows - 1 < Q ? r0 + kRows - 1 : Q - 1, c0, cn);
      if (jn <= 0) continue;
      for (std::int64_t d0 = 0; d0 < D; d0 += kStep) {
        FP4SERVE_TILE_LOAD(0, b.o + r0 * D + d0, D * 4);
        FP4SERVE_TILE_LOAD(1, b.o + r0 * D + d0 + 16, D * 4);
        for (std::int64_t j0 = 0; j0 < jn; j0 += kStep) {
          FP4SERVE_TILE_LOAD(2, b.ph + r0 * kChunk + j0, kChunk * 2);
          FP4SERVE_TILE_LOAD(3, b.pl + r0 * kChunk + j0, kChunk * 2);
          const std::int64_t at = (j0 / 2 * D + d0) * 2;
          FP4SERVE_TILE_LOAD(4, vh + at, D * 4);
          FP4SERVE_TILE_LOAD(5, vh + at + 32, D * 4);
          if (kLo) {
            FP4SERVE_TILE_LOAD(6, vl + at, D * 4);
            FP4SERVE_TILE_LOAD(7, vl + at + 32, D * 4);
          }
          split_products(kLo);
        }
        _tile_stored(0, b.o + r0 * D + d0, D * 4);
        _tile_stored(1, b.o + r0 * D + d0 + 16, D * 4);
      }
    }
    if (const std::int32_t* bad = packs.bad_rows(g, c0 / kChunk); bad[0] > 0) {
      const std::byte* rows[kChunk] = {};
      RowWalker values(a, a.v_offset, g, c0);
      for (std::int64_t j = 0; j < cn; ++j) rows[j] = values.next();
      value_rows_apart<E>(rows, bad + 1, bad[0], Q, D, b, [&](std::int64_t r) { return visible(r, c0, cn); });
    }
  }
  _tile_release();
  finish_prefill_tile(a, i0, T, g, t);
}

}  // namespace

void attention_prefill_tiles(const AttentionArgs& a, std::int64_t threads) {
  with_kv_type(a.kv_dtype, [&](auto type) {
    constexpr Kv E = decltype(type)::kValue;
    const KvPacks packs = pack_kv<E>(a);
    for_each_prefill_tile(a, prefill_tile_tokens(a, threads, kTileRows), [&a, &packs](std::int64_t i0, std::int64_t T, std::int64_t g) {
      tile_task<E>(a, packs, i0, T, g);
    });
  });
}

void attention(const AttentionArgs& a) {
  const std::int64_t D = a.head_dim, G = a.num_heads / a.num_kv_heads, threads = kernel_threads();
  // 32-dimension tile steps, a KV head's query heads within one task, and tasks enough, as
  // avx512::attention asks of its tiles.
  if (D % kStep == 0 && G <= kTileRows && enough_prefill_tasks(a, threads))
    return attention_prefill_tiles(a, threads);
  avx512::attention(a);
}

}  // namespace fp4serve::kernels::amx
