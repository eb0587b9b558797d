// BF16 AMX GEMM with NVFP4 or BF16 weights: prefill-sized M (>= 16; NVFP4 from 9), and narrow
// tiles for 5..8 tokens (the "Small M" section below).
//
// Computed transposed, C[n][m] = sum_k W[n][k] x[m][k], because then the weight rows are the A
// operand in their natural row-major layout (no transpose of the big operand) and only the
// activations are repacked, once per call, into the B "VNNI" layout: for each 16-token tile and
// each k pair p, one 64-byte row holding (x[m][2p], x[m][2p+1]) for 16 tokens m.
// NVFP4 rows decode straight into A tiles: E2M1 x E4M3 has at most 6 significant bits, so the
// product is exact in bf16; per 32 codes one word permute (vpermw) looks all 32 up in the two
// blocks' precomputed bf16 tables (decode_line). The per-tensor scale is applied to
// the fp32 result, after a register transpose of each C tile (C is n-major, y is m-major). Activations are rounded to bf16 (round to nearest even; inputs
// below 2^-126 flush to zero, as vcvtne2ps2bf16 does): that is
// this backend's only rounding beyond fp32 accumulation, hence its Bf16Activations tolerance.
// nvfp4_gemm_split also packs what that rounding left, bf16(x - hi), and runs every weight tile
// against both: hi + lo carries each activation to ~2^-17 (Activations16), for twice the tile
// products but the same weight decode, which is about half of prefill (docs/perf.md).
// bf16_gemm_split3 packs a third part, bf16(x - hi - lo): ~2^-25, fp32's own resolution. Dense
// weights get three parts because two moved the qwen3_next oracle logits 1.9e-4 (NVFP4 weights:
// 1.8e-5); a dense tile needs no decode, so the third product costs little.
// nvfp4_gemm_int8_grid (amx-int8) moves each activation block to the int8 kernels' grid as it
// packs it; hi + lo then carry it exactly. Many tokens run in chunks whose packed activations
// stay in L2 (chunk_tokens).
//
// Per task: 32 weight rows (2 A tiles) x 32 tokens (2 B tiles) -> 4 C tiles, all 8 tile
// registers; a second B tile with no tokens in it (m <= 16: batched decode) is skipped, and a
// partly filled one costs a full one's products. Padding rows, tokens and k are zero, and only
// valid outputs are written. Dense BF16 rows, when k is a multiple of 32, load as A tiles
// straight from the weights: copied into scratch first, the 16-token lm_head of Qwen3-30B-A3B
// read 14 GB/s, from the weights 25 (docs/perf.md, session 29).
// ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/amx/amx_tiles.h"
#include "kernels/isa_kernels.h"
#include "kernels/lut.h"
#include "kernels/scratch.h"
#include "kernels/vnni/int8_grid.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::amx {

namespace {

constexpr int kMaxParts = 3;  // bf16 pieces per activation: hi, then up to two remainders

// All 8 tiles 16 rows deep. A tiles (4, 5: 16 weight rows x 32 k) are 64 bytes wide; C and B
// tiles (0-3, 6, 7) `cb_bytes` wide: 64 for 16 tokens, 8m for the narrow tiles' 2m columns.
void configure_tiles(std::int64_t cb_bytes) { configure_tiles(64, cb_bytes); }

// Lanes of the two 16-float halves of k step [kk, kk + 32) that lie inside k (the rest load 0).
struct StepMasks {
  __mmask16 lo, hi;
};
inline StepMasks step_masks(std::int64_t k, std::int64_t kk) {
  const std::int64_t valid = k - kk < 32 ? k - kk : 32;
  return {static_cast<__mmask16>(valid >= 16 ? 0xFFFF : (1u << valid) - 1u),
          static_cast<__mmask16>(valid >= 32 ? 0xFFFF : valid <= 16 ? 0 : (1u << (valid - 16)) - 1u)};
}

// Each 16-element block (lanes past k are zero) moved to the int8 activation grid, q * step in
// fp32 (vnni/int8_grid.h: the values the int8 kernels quantize it to); a block holding NaN or
// Inf is left as it is, so the row's outputs still come out non-finite.
inline __m512 on_int8_grid(__m512 v) {
  vnni::GridBlock g;
  if (!vnni::to_int8_grid(v, g)) return v;
  return _mm512_mul_ps(vnni::round_even(g.scaled), _mm512_set1_ps(g.step));
}

// xt[(mt * kpairs + p) * 32 + 2j + t] = bf16(x[16 mt + j][2p + t]), zero outside [m) x [k).
// Per 16 tokens x 32 k: each token's 32 values are rounded to bf16 (round to nearest even,
// vcvtne2ps2bf16) into 16 pair-words, then the 16 x 16 word block is transposed through a small
// buffer so each 64-byte B-tile row holds one k pair for 16 tokens. With parts > 1, panel q (at
// xt + q * panel) holds the same layout for what the first q roundings left over: part 2 is
// bf16(x - hi), part 3 bf16(x - hi - part 2). Each part carries about 8 more significant bits:
// hi + lo reaches ~2^-17 of x, three parts ~2^-25, as close as fp32 itself; from an int8-grid
// value q * step (at most 15 significant bits) hi + lo is exact.
// Packs token tiles [mt0, mt1) of the mp / 16; `grid`: each block moved to the int8 grid first.
void pack_activations(const float* x, std::int64_t m, std::int64_t k, std::uint16_t* xt, int parts, std::size_t panel,
                      std::int64_t mt0, std::int64_t mt1, std::int64_t kp, bool grid) {
  const std::int64_t kpairs = kp / 2;
  alignas(64) std::uint32_t rows[kMaxParts][16][16];
  for (std::int64_t mt = mt0; mt < mt1; ++mt)
    for (std::int64_t kk = 0; kk < kp; kk += 32) {
      const StepMasks mask = step_masks(k, kk);
      for (std::int64_t j = 0; j < 16; ++j) {
        const std::int64_t mi = mt * 16 + j;
        if (mi >= m) {
          for (int q = 0; q < parts; ++q) _mm512_store_si512(rows[q][j], _mm512_setzero_si512());
          continue;
        }
        const float* src = x + mi * k + kk;
        __m512 a = _mm512_maskz_loadu_ps(mask.lo, src);
        __m512 b = _mm512_maskz_loadu_ps(mask.hi, src + 16);
        if (grid) {
          a = on_int8_grid(a);
          b = on_int8_grid(b);
        }
        for (int q = 0; q < parts; ++q) _mm512_store_si512(rows[q][j], next_part(a, b));
      }
      const std::int64_t at = (mt * kpairs + kk / 2) * 16;
      for (int q = 0; q < parts; ++q) {
        std::uint32_t* dst = reinterpret_cast<std::uint32_t*>(xt + q * panel) + at;
        for (std::int64_t p = 0; p < 16; ++p)
          for (std::int64_t j = 0; j < 16; ++j) dst[p * 16 + j] = rows[q][j][p];
      }
    }
}

struct Ctx {
  const WeightMatrix* w;
  bool nvfp4;
  std::int64_t m, mp, kp;
  const std::uint16_t* xt;  // `parts` activation panels, `panel` words apart
  int parts;
  bool int8_grid;  // activations moved to the int8 grid while packed
  std::size_t panel;
  float* y;
  float out_scale;
};

// Byte-permute indices for decode_line: pair p (32 codes, bytes 16p .. 16p + 15 of a line) puts
// byte 16p + i of the low-nibble vector in word 2i and of the high-nibble vector in word 2i + 1.
struct PairIndices {
  alignas(64) std::uint8_t idx[4][64];
  constexpr PairIndices() : idx{} {
    for (int p = 0; p < 4; ++p)
      for (int i = 0; i < 16; ++i) {
        idx[p][4 * i] = static_cast<std::uint8_t>(16 * p + i);
        idx[p][4 * i + 2] = static_cast<std::uint8_t>(64 + 16 * p + i);  // bit 6: the second source
      }
  }
};
constexpr PairIndices kPairIndices;

// One 64-byte line of an NVFP4 row (128 codes, 8 blocks) as 128 bf16 words, 32 per pair of
// blocks: each pair is one word permute (vpermw, which reads an index's low 5 bits) into a
// 32-word table holding both blocks' scaled values (e2m1_scaled_bf16 of the two scale codes).
// The index of code c is its nibble, plus 16 in the pair's second block: per line one shift and
// two ternary-logic ops make both nibble vectors with that bit, then one two-source byte permute
// per pair interleaves them. ≈ 15 vector uops per line against ≈ 36 for a multiply-and-round
// per pair (session 6, docs/perf.md).
inline void decode_line(__m512i v, const std::uint8_t* codes, int pairs, const DecodeTables& t, std::uint16_t* dst) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // Byte j of the line is in its pair's second block when j % 16 >= 8 (odd qwords): bit 4 of the index.
  const __m512i sel = _mm512_unpacklo_epi64(_mm512_setzero_si512(), _mm512_set1_epi64(0x1010101010101010LL));
  const __m512i lo = _mm512_ternarylogic_epi32(v, nibble, sel, 0xEA);                         // (v & 0x0F) | sel
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), nibble, sel, 0xEA);  // (v >> 4 & 0x0F) | sel
  for (int p = 0; p < pairs; ++p) {
    const __m512i idx = _mm512_permutex2var_epi8(lo, _mm512_load_si512(kPairIndices.idx[p]), hi);
    // Low half: a plain load; high half: a masked broadcast-load (a blend, not a lane insert,
    // which would take the shuffle port that the two permutes already keep busy).
    const __m512i table = _mm512_mask_broadcast_i64x4(
        _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.e2m1_scaled_bf16[codes[2 * p]]))), 0xF0,
        _mm256_load_si256(reinterpret_cast<const __m256i*>(t.e2m1_scaled_bf16[codes[2 * p + 1]])));
    _mm512_storeu_si512(dst + 32 * p, _mm512_permutexvar_epi16(idx, table));
  }
}

// Line ch (codes 128 ch ..) of NVFP4 row n as bf16 words: 128, or up to k rounded up to 32.
// Codes past k load as zero; a half pair's missing block reads scale code 0, whose table is all
// zeros, so padding decodes to 0.
// Each whole line also asks L2 for the codes kDecodePrefetchBytes on (and every 8th line for the
// scales as far on in rows), past the matrix harmlessly: in a prefill the experts' weights come
// from memory once per call, and the hardware prefetcher alone left the decode waiting. pp512
// alternated three times without / 4 KB / 8 KB ahead: 98.71 / 104.42 / 104.99, 100.45 / 109.84 /
// 109.41, 98.41 / 111.26 / 106.82 t/s (docs/perf.md, session 31).
constexpr std::int64_t kDecodePrefetchBytes = 8192;

inline void decode_row_line(const WeightMatrix& w, std::int64_t n, std::int64_t ch, const DecodeTables& t, std::uint16_t* dst) {
  const std::uint8_t* wp = w.data + n * (w.k / 2) + ch * 64;
  const std::uint8_t* sp = w.block_scales + n * (w.k / 16) + ch * 8;
  const std::int64_t left = w.k - ch * 128;
  if (left >= 128) {
    _mm_prefetch(reinterpret_cast<const char*>(wp) + kDecodePrefetchBytes, _MM_HINT_T1);
    if ((ch & 7) == 0) _mm_prefetch(reinterpret_cast<const char*>(sp) + kDecodePrefetchBytes / 8, _MM_HINT_T1);
    decode_line(_mm512_loadu_si512(wp), sp, 4, t, dst);
    return;
  }
  std::uint8_t codes[8] = {};
  std::memcpy(codes, sp, static_cast<std::size_t>(left / 16));
  decode_line(_mm512_maskz_loadu_epi8((1ull << (left / 2)) - 1, wp), codes, static_cast<int>((left + 31) / 32), t, dst);
}

// Rows [n0, n0 + 32) of W as bf16, row stride kp; rows past n and columns past k are zero.
void decode_rows(const Ctx& c, std::int64_t n0, std::uint16_t* wa) {
  const WeightMatrix& w = *c.w;
  const DecodeTables& t = decode_tables();
  const std::int64_t lines = (w.k + 127) / 128;
  for (std::int64_t r = 0; r < 32; ++r) {
    std::uint16_t* dst = wa + r * c.kp;
    const std::int64_t n = n0 + r;
    if (n >= w.n) {
      std::memset(dst, 0, static_cast<std::size_t>(c.kp) * 2);
      continue;
    }
    if (!c.nvfp4) {
      std::memcpy(dst, w.data + n * w.k * 2, static_cast<std::size_t>(w.k) * 2);
      std::memset(dst + w.k, 0, static_cast<std::size_t>(c.kp - w.k) * 2);
      continue;
    }
    for (std::int64_t ch = 0; ch < lines; ++ch) decode_row_line(w, n, ch, t, dst + ch * 128);
  }
}

// dst[i * ld + j] = tile[j][i] * scale for i < rows, j in mask: the C tile is n-major, y is m-major.
// 16 x 16 transpose in registers (unpack within 64-bit pairs, then 128-bit, then 128-bit lanes
// twice); one multiply per 16 outputs, the same fp32 product per output as a scalar loop. The
// scale comes as a float: a function that takes a vector argument returns without vzeroupper,
// and its caller then assumes the state clean (util/vector_state.h).
void store_transposed(const float (*tile)[16], __mmask16 mask, std::int64_t rows, float out_scale, float* dst, std::int64_t ld) {
  const __m512 scale = _mm512_set1_ps(out_scale);
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(tile[i]);
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) {
      t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + i + 4], 0x88);
      t[8 * h + i + 4] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + i + 4], 0xDD);
    }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  }
  for (int i = 0; i < rows; ++i) _mm512_mask_storeu_ps(dst + i * ld, mask, _mm512_mul_ps(r[i], scale));
}

// How many k steps ahead a one-pass block asks L1 for its 32 weight rows (compute_block).
constexpr std::int64_t kDirectPrefetchSteps = 3;

// `from_memory`: wa is the checkpoint's BF16 rows and this is the block's only pass over them
// (at most 32 tokens), so each k step's two A tiles would wait on memory. Asking for the 32 rows'
// lines a few steps ahead made a 16-token GEMM over 2 GiB of weights 8-16 % quicker (k = 1024
// to 8192; docs/perf.md, session 41). Over more tokens the block is read again from L2 by the
// later passes, and the first pass's misses are a small share.
void compute_block(const Ctx& c, std::int64_t n0, const std::uint16_t* wa, std::int64_t a_words, bool from_memory) {
  const std::int64_t kpairs = c.kp / 2;
  const char* ahead = reinterpret_cast<const char*>(wa + kDirectPrefetchSteps * 32);
  const std::int64_t a_stride = a_words * 2;  // bytes
  alignas(64) float out[4][16][16];
  for (std::int64_t mt = 0; mt < c.mp / 16; mt += 2) {
    const bool two = c.m > (mt + 1) * 16;  // the second B tile holds tokens
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const std::uint16_t* b0 = c.xt + mt * kpairs * 32;
    const std::uint16_t* b1 = c.xt + (mt + 1) * kpairs * 32;
    for (std::int64_t kk = 0; kk < c.kp; kk += 32) {
      if (from_memory && kk + kDirectPrefetchSteps * 32 < c.kp)
        for (std::int64_t r = 0; r < 32; ++r) _mm_prefetch(ahead + kk * 2 + r * a_stride, _MM_HINT_T0);
      FP4SERVE_TILE_LOAD(4, wa + kk, a_stride);
      FP4SERVE_TILE_LOAD(5, wa + 16 * a_words + kk, a_stride);
      FP4SERVE_TILE_LOAD(6, b0 + kk / 2 * 32, 64);
      if (two) FP4SERVE_TILE_LOAD(7, b1 + kk / 2 * 32, 64);
      _tile_dpbf16ps(0, 4, 6);
      if (two) _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      if (two) _tile_dpbf16ps(3, 5, 7);
      for (int q = 1; q < c.parts; ++q) {  // the same weight tiles against the activations' remainders
        const std::uint16_t* rest = c.xt + q * c.panel + (mt * kpairs + kk / 2) * 32;
        FP4SERVE_TILE_LOAD(6, rest, 64);
        if (two) FP4SERVE_TILE_LOAD(7, rest + kpairs * 32, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (two) _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        if (two) _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, out[0], 64);
    _tile_stored(1, out[1], 64);
    _tile_stored(2, out[2], 64);
    _tile_stored(3, out[3], 64);
    // out[2 * nhalf + mhalf][n_local][m_local]
    for (int t = 0; t < 4; ++t) {
      const std::int64_t nb = n0 + (t / 2) * 16, mb = (mt + t % 2) * 16;
      if (mb >= c.m || nb >= c.w->n) continue;
      const std::int64_t nv = c.w->n - nb < 16 ? c.w->n - nb : 16;
      const std::int64_t mv = c.m - mb < 16 ? c.m - mb : 16;
      store_transposed(out[t], nv == 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << nv) - 1u), mv, c.out_scale,
                       c.y + mb * c.w->n + nb, c.w->n);
    }
  }
}

// Tokens per chunk: a chunk's packed activations (every part) stay in L2 while each 32-row block
// reads them. Unchunked, every row block streamed all of them from L3 (4 MB at 512 tokens of
// k = 2048 with two parts): nvfp4_m512 amx ran 4.2 ms on one thread, in chunks of 128 tokens (1 MB)
// 2.4 ms; 64 and 256 tokens were slower (docs/perf.md, session 31).
constexpr std::size_t kChunkActivationBytes = 1u << 20;

std::int64_t chunk_tokens(std::int64_t kp, int parts) {
  const std::int64_t fit = static_cast<std::int64_t>(kChunkActivationBytes) / (kp * 2 * parts) / 32 * 32;
  return fit > 32 ? fit : 32;
}

void run(const Ctx& base, const float* x) {
  const WeightMatrix& w = *base.w;
  const std::int64_t kp = (w.k + 31) / 32 * 32;
  const std::int64_t chunk = chunk_tokens(kp, base.parts);
  const std::int64_t mp_max = ((base.m < chunk ? base.m : chunk) + 31) / 32 * 32;
  std::uint16_t* xt = static_cast<std::uint16_t*>(thread_scratch(
      kScratchGemmActivations, static_cast<std::size_t>(base.parts * mp_max * kp) * sizeof(std::uint16_t)));
  const std::int64_t blocks = (w.n + 31) / 32;
  for (std::int64_t t0 = 0; t0 < base.m; t0 += chunk) {
    Ctx c = base;
    c.m = base.m - t0 < chunk ? base.m - t0 : chunk;
    c.mp = (c.m + 31) / 32 * 32;
    c.kp = kp;
    c.panel = static_cast<std::size_t>(c.mp * kp);
    c.xt = xt;
    c.y = base.y + t0 * w.n;
    // On the pool: packing 512 tokens on the calling thread alone held the other one idle.
    const float* xc = x + t0 * w.k;
    parallel_for(c.mp / 16, 1, [&c, xc, xt](std::int64_t b, std::int64_t e) {
      pack_activations(xc, c.m, c.w->k, xt, c.parts, c.panel, b, e, c.kp, c.int8_grid);
    });
    parallel_for(blocks, 1, [&c](std::int64_t b, std::int64_t e) {
      configure_tiles(64);
      std::uint16_t* wa = static_cast<std::uint16_t*>(thread_scratch(kScratchGemmWeights, static_cast<std::size_t>(32 * c.kp) * sizeof(std::uint16_t)));
      const bool direct = !c.nvfp4 && c.w->k % 32 == 0;
      for (std::int64_t blk = b; blk < e; ++blk) {
        if (direct && (blk + 1) * 32 <= c.w->n) {  // whole BF16 rows: tiles straight from the weights
          compute_block(c, blk * 32, reinterpret_cast<const std::uint16_t*>(c.w->data) + blk * 32 * c.w->k, c.w->k, c.mp <= 32);
          continue;
        }
        decode_rows(c, blk * 32, wa);
        compute_block(c, blk * 32, wa, c.kp, false);
      }
      _tile_release();
    });
  }
}

// ---- Small M (5..8 tokens: experts that receive a few tokens in a batch, short prompts) ----
// The M >= 16 layout would waste most of every B tile and decode all of a block's rows into L2
// before using them. Here a token's hi and lo parts are two columns of one narrow B tile (2m
// columns, token t in 2t and 2t + 1), so each weight tile meets every part and token in one
// tile product; and the block's 32 rows are decoded one 64-byte line (128 k) at a time into an
// L1-resident buffer whose four k steps then run. The cost is the weight decode and loading it
// back as tiles, nearly independent of m, where the fp32 GEMV's FMAs grow with m: the tiles
// win from m ≈ 5 (docs/perf.md, session 6).
// Past kSmallMaxM, nvfp4_gemm_split takes the M >= 16 layout: a partly filled B tile costs a full
// one's products, yet 12 tokens ran 2.4x faster than on the fp32 GEMV (nvfp4_m12 amx 95-99
// against 230-248 us), and this layout widened to two B tiles of 8 tokens was slower than the
// 16-token one at 12 and level at 16 (docs/perf.md, session 33).
constexpr std::int64_t kSmallFromM = 5, kSmallMaxM = 8;

// B tiles, one per k step s (32 k): xs[s * 32m + p * 2m + 2t + q] (dwords) = part q of
// (x[t][32 s + 2p], x[t][32 s + 2p + 1]) as two bf16 words; zero past k.
void pack_small(const float* x, std::int64_t m, std::int64_t k, std::int64_t kp, std::uint32_t* xs) {
  alignas(64) std::uint64_t pairs[kSmallMaxM][16];  // [token][k pair]: hi pair | lo pair << 32
  const __m512i first = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i second = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (std::int64_t s = 0; s < kp / 32; ++s) {
    const std::int64_t kk = s * 32;
    const StepMasks mask = step_masks(k, kk);
    for (std::int64_t t = 0; t < m; ++t) {
      __m512 a = _mm512_maskz_loadu_ps(mask.lo, x + t * k + kk);
      __m512 b = _mm512_maskz_loadu_ps(mask.hi, x + t * k + kk + 16);
      const __m512i h = next_part(a, b);  // dword p = (hi of 2p, hi of 2p + 1)
      const __m512i l = next_part(a, b);
      _mm512_store_si512(pairs[t], _mm512_permutex2var_epi32(h, first, l));
      _mm512_store_si512(pairs[t] + 8, _mm512_permutex2var_epi32(h, second, l));
    }
    std::uint64_t* dst = reinterpret_cast<std::uint64_t*>(xs + s * 32 * m);
    for (std::int64_t p = 0; p < 16; ++p)
      for (std::int64_t t = 0; t < m; ++t) dst[p * m + t] = pairs[t][p];
  }
}

// Decoded line ch of rows [n0, n0 + rows) into wl (row stride 128 words).
inline void decode_block_line(const WeightMatrix& w, std::int64_t n0, std::int64_t rows, std::int64_t ch, const DecodeTables& t,
                              std::uint16_t* wl) {
  for (std::int64_t r = 0; r < rows; ++r) decode_row_line(w, n0 + r, ch, t, wl + r * 128);
}

// Rows [n0, n0 + 32) of W against the packed tokens; wl: 2 x 32 x 128 words of scratch. Line
// ch + 1 is decoded into one half of wl while the tiles read line ch from the other, so no tile
// load follows right behind the stores that wrote its data.
void compute_small(const WeightMatrix& w, std::int64_t m, const std::uint32_t* xs, std::int64_t n0, std::uint16_t* wl,
                   float scale, float* y) {
  const DecodeTables& t = decode_tables();
  const std::int64_t rows = w.n - n0 < 32 ? w.n - n0 : 32;
  if (rows < 32)
    for (int h = 0; h < 2; ++h) std::memset(wl + h * 4096 + rows * 128, 0, static_cast<std::size_t>((32 - rows) * 128) * 2);
  _tile_zero(0);
  _tile_zero(1);
  const std::int64_t lines = (w.k + 127) / 128;
  decode_block_line(w, n0, rows, 0, t, wl);
  for (std::int64_t ch = 0; ch < lines; ++ch) {
    const std::uint16_t* cur = wl + (ch & 1) * 4096;
    if (ch + 1 < lines) decode_block_line(w, n0, rows, ch + 1, t, wl + ((ch + 1) & 1) * 4096);
    const std::int64_t left = w.k - ch * 128;
    const std::int64_t steps = left >= 128 ? 4 : (left + 31) / 32;
    for (std::int64_t j = 0; j < steps; ++j) {
      FP4SERVE_TILE_LOAD(4, cur + 32 * j, 256);
      FP4SERVE_TILE_LOAD(5, cur + 16 * 128 + 32 * j, 256);
      FP4SERVE_TILE_LOAD(6, xs + (4 * ch + j) * 32 * m, 8 * m);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 5, 6);
    }
  }
  alignas(64) float out[2][16][2 * kSmallMaxM];
  _tile_stored(0, out[0], 8 * m);
  _tile_stored(1, out[1], 8 * m);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* c = reinterpret_cast<const float*>(out[r / 16]) + (r % 16) * 2 * m + 2 * i;
      y[i * w.n + n0 + r] = (c[0] + c[1]) * scale;  // hi part + lo part
    }
}

}  // namespace

void nvfp4_gemm_narrow(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m > kSmallMaxM) isa_unsupported("amx narrow NVFP4 tiles: more than 8 tokens");
  if (m <= 0 || w.n <= 0) return;
  const std::int64_t kp = (w.k + 31) / 32 * 32;
  auto* xs = static_cast<std::uint32_t*>(thread_scratch(kScratchGemmActivations, static_cast<std::size_t>(kp * m) * sizeof(std::uint32_t)));
  pack_small(x, m, w.k, kp, xs);
  const float scale = w.weight_scale_2;
  parallel_for((w.n + 31) / 32, 1, [&](std::int64_t b, std::int64_t e) {
    configure_tiles(8 * m);  // C and B: 2m columns
    auto* wl = static_cast<std::uint16_t*>(thread_scratch(kScratchGemmWeights, 2 * 32 * 128 * sizeof(std::uint16_t)));
    for (std::int64_t blk = b; blk < e; ++blk) compute_small(w, m, xs, blk * 32, wl, scale, y);
    _tile_release();
  });
}

namespace {

void gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y, bool nvfp4, int parts, bool int8_grid = false) {
  if (m <= 0 || w.n <= 0) return;
  Ctx c{};
  c.w = &w;
  c.nvfp4 = nvfp4;
  c.m = m;
  c.y = y;
  c.out_scale = nvfp4 ? w.weight_scale_2 : 1.0f;
  c.parts = parts;
  c.int8_grid = int8_grid;
  run(c, x);
}

}  // namespace

void nvfp4_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y) { gemm(x, m, w, y, true, 1); }
void bf16_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y) { gemm(x, m, w, y, false, 1); }
void nvfp4_gemm_split(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  if (m < kSmallFromM) {
    // 1..4 tokens: the fp32 GEMV uses each decoded weight in registers; the tiles would decode it
    // to bf16 (≈ 13 cycles per 64 bytes, as long as the whole fp32 GEMV) and load it back.
    avx512::nvfp4_gemm(x, m, w, y);
  } else if (m <= kSmallMaxM) {
    nvfp4_gemm_narrow(x, m, w, y);
  } else {
    gemm(x, m, w, y, true, 2);
  }
}
void bf16_gemm_split3(const float* x, std::int64_t m, const WeightMatrix& w, float* y) { gemm(x, m, w, y, false, kMaxParts); }
void nvfp4_gemm_int8_grid(const float* x, std::int64_t m, const WeightMatrix& w, float* y) { gemm(x, m, w, y, true, 2, true); }

}  // namespace fp4serve::kernels::amx
