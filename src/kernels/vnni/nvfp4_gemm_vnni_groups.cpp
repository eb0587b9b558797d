// NVFP4 x int8-activation GEMM for m >= 16 on AVX-512 VNNI: tokens in the vector lanes.
//
// Why a second int8 GEMM: the 8-token tiles of nvfp4_gemm_vnni.cpp keep a row's 16 blocks in the
// lanes, so every row's decode (two gathers, four lookups) serves only 8 tokens and every
// (row, token) ends in a horizontal sum. They ran at 11-12 cycles per 256 products, against 6 for
// their dot-product, multiply and FMA instructions (docs/perf.md, sessions 15 and 20). Here each
// row is decoded once per block of tokens into int8 in L1, and a 4-byte group of a row's weights
// is broadcast against 16 tokens' activations: lane t of an accumulator sums token t's products
// with that row over one 16-element block, so the block scales apply lane-wise and no horizontal
// sum is left. 4 rows x 2 groups of 16 tokens run per pass (8 rows when there is one group): per
// block 32 vpdpbusd, 8 converts, 8 multiplies and 8 FMAs, all on registers.
//
// Weights: u = 2 * E2M1 + 12 as unsigned bytes (vpdpbusd's unsigned operand, 0..24), in each
// block's nibble order: a row's 8 code bytes of block b hold elements 2j (low nibble) and 2j + 1
// (high), so the decode stores the block's 16 weights as its even elements, then its odd ones
// (two table lookups and two qword permutes per 64 code bytes).
// Activations ("group": 16 tokens; tokens past m are zero): record (group g, block b) is 6 lines
// of 64 bytes. Line c, byte 4t + j: token t's q (signed, in [-127, 127] on the grid of
// int8_grid.h) of the element whose weight is byte 4c + j of the block's decoded weights. Line 4:
// token t's step * 2^63. Line 5: token t's -12 * sum(q) over the block, where each accumulator
// starts, so sum(u q) - 12 sum(q) = sum(2 E2M1 q). The correction belongs to the activations,
// computed once per token and block when they are quantized; until session 27 the weights were
// signed and the activations offset by 128, and the decode summed every row's block for its
// -128 * sum(w): a third of the decode's instructions, and the decode was a third of a
// 16-token call. The sums are exact integers (|lane| < 16 * 24 * 127 + 12 * 16 * 127 < 2^16), so
// the result equals the tiles' up to fp32 rounding of the scaled block sums.
// ISA translation unit: no standard-library templates here (see avx512/nvfp4_gemm_avx512.cpp).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/lut.h"
#include "kernels/nvfp4_isa_common.h"
#include "kernels/scratch.h"
#include "kernels/token_groups.h"
#include "kernels/vnni/int8_grid.h"
#include "kernels/vnni/int8_token_groups.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::vnni {

namespace {

constexpr std::int64_t kGroup = 16;              // tokens per group: one per fp32 lane
constexpr std::int64_t kRecordBytes = 6 * 64;    // per (group, block)
constexpr std::int64_t kScaleLine = 4 * 64, kCorrectionLine = 5 * 64;
constexpr std::int32_t kWeightOffset = 12;
constexpr std::int64_t kRows = 4;                // rows per pass (4 x 2 x 2 accumulators fill 16 registers)
// With one group (12..16 tokens: batched decode's attention projections) 4 rows left only 4
// dot-product chains per block; 8 rows, 8 x 2 registers, ran the m = 16 GEMM 7 % faster from
// memory (docs/perf.md, session 29).
constexpr std::int64_t kOneGroupRows = 8;
constexpr std::int64_t kPairGroups = 2;          // groups per pass
// A last partial group with this many tokens runs padded: from about 12 of 16 lanes the group
// kernel's time for it is below the tiles' for the same tokens.
constexpr std::int64_t kPaddedMinTokens = 12;
// Groups whose records stay in L2 while the decoded rows pass over them (each row is decoded once
// per such block of tokens).
constexpr std::int64_t kTokenBlockBytes = 256 * 1024;
// The row decode requests the rows this many bytes on (whole rows, at least the next pass) to L2,
// one line for each line it reads. The whole next pass requested at once after each decode (72
// prefetches at k = 2048) left the decode as slow as with no prefetch at all: most of such a
// burst is dropped while the core's miss buffers are full. Spread out, the m = 16 row decode went
// from 1360-1660 to 990-1110 TSC ticks per pass (hot in L2: 870-1000), pp512 rose 4-26 % (median
// 12 %) and batch-16 decode steps took 2.7 % less time in the median (docs/perf.md, session 23).
constexpr std::int64_t kPrefetchAheadBytes = 8192;

// 2 * E2M1 + 12 for codes 0..15, four times (vpermb indexes 64 bytes).
struct WeightTable {
  alignas(64) std::uint8_t v[64];
  constexpr WeightTable() : v{} {
    for (int i = 0; i < 64; ++i) v[i] = static_cast<std::uint8_t>(kWeightOffset + doubled_e2m1(i & 15));
  }
};
constexpr WeightTable kWeightTable;

// A block's 16 elements in its decoded weights' order: the even ones, then the odd ones.
struct NibbleOrder {
  alignas(16) std::int8_t v[16];
  constexpr NibbleOrder() : v{} {
    for (int i = 0; i < 8; ++i) {
      v[i] = static_cast<std::int8_t>(2 * i);
      v[8 + i] = static_cast<std::int8_t>(2 * i + 1);
    }
  }
};
constexpr NibbleOrder kNibbleOrder;

inline std::int64_t blocks_of(std::int64_t k) { return k / 16; }
// The decode writes 128 codes and 16 scales at a time: rows padded to 256 elements hold both.
inline std::int64_t padded_k(std::int64_t k) { return (k + 255) / 256 * 256; }

// Quantizes tokens [i0, i1) of the (m + 15) / 16 groups' records (tokens from m on are padding);
// false on NaN/Inf.
bool quantize_tokens(const float* x, std::int64_t m, std::int64_t k, std::uint8_t* base, std::int64_t i0,
                     std::int64_t i1) {
  const std::int64_t nb = blocks_of(k);
  const __m128i order = _mm_load_si128(reinterpret_cast<const __m128i*>(kNibbleOrder.v));
  for (std::int64_t i = i0; i < i1; ++i) {
    const std::int64_t g = i / kGroup, t = i % kGroup;
    std::uint8_t* rec = base + g * nb * kRecordBytes;
    for (std::int64_t b = 0; b < nb; ++b, rec += kRecordBytes) {
      alignas(16) std::uint8_t q[16] = {};  // a padding token: q = 0 adds nothing and is never stored
      float sa = 0.0f;
      std::int32_t corr = 0;
      if (i < m) {
        GridBlock grid;
        if (!to_int8_grid(_mm512_loadu_ps(x + i * k + 16 * b), grid)) return false;
        const __m512i qi = _mm512_cvtps_epi32(round_even(grid.scaled));
        _mm_store_si128(reinterpret_cast<__m128i*>(q), _mm_shuffle_epi8(_mm512_cvtepi32_epi8(qi), order));
        sa = grid.step * kActivationScale;
        corr = -kWeightOffset * _mm512_reduce_add_epi32(qi);
      }
      for (int c = 0; c < 4; ++c) std::memcpy(rec + 64 * c + 4 * t, q + 4 * c, 4);
      std::memcpy(rec + kScaleLine + 4 * t, &sa, 4);
      std::memcpy(rec + kCorrectionLine + 4 * t, &corr, 4);
    }
  }
  return true;
}

// All groups, on the pool: quantizing 512 tokens of k = 2048 on one thread took about as long as
// a tenth of the GEMM it feeds.
bool quantize_groups(const float* x, std::int64_t m, std::int64_t k, std::uint8_t* base) {
  int bad = 0;
  parallel_for((m + kGroup - 1) / kGroup * kGroup, kGroup, [&](std::int64_t i0, std::int64_t i1) {
    if (!quantize_tokens(x, m, k, base, i0, i1)) __atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
  });
  return bad == 0;
}

// Rows decoded for the kernel: a pass of rows (at most kOneGroupRows) of padded_k(k) weights u
// (each block's even elements, then its odd ones), and per (row, block) the scale (times 2^-120,
// as the E4M3 bits shifted).
struct Panel {
  std::uint8_t* codes;
  float* scales;
  std::int64_t row_codes, row_blocks;  // strides
};

// Decodes rows [r0, r0 + rows) into the panel; the rows `ahead` rows on go to L2 meanwhile
// (kPrefetchAheadBytes). Prefetches past the matrix never fault.
void decode_rows(const WeightMatrix& w, std::int64_t r0, std::int64_t rows, std::int64_t ahead, const float* e4m3,
                 const Panel& p) {
  const __m512i table = _mm512_load_si512(kWeightTable.v);
  // Qword i of the low (high) nibbles' lookups is block i's even (odd) elements.
  const __m512i first = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), second = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  const std::int64_t row_bytes = w.k / 2, nb = blocks_of(w.k);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* src = w.data + (r0 + r) * row_bytes;
    const char* next = reinterpret_cast<const char*>(src + ahead * row_bytes);
    std::uint8_t* codes = p.codes + r * p.row_codes;
    for (std::int64_t j = 0; j < row_bytes; j += 64) {
      _mm_prefetch(next + j, _MM_HINT_T1);
      const std::int64_t left = row_bytes - j;
      // A plain load for whole pieces: with a masked load for every piece the m = 64 GEMM ran
      // 5-8 % slower on Zen 4 (pp512: +2.3 % in the median of 8 alternations; docs/perf.md,
      // session 22). Past k: code 0 is +0.
      const __m512i v = left >= 64 ? _mm512_loadu_si512(src + j) : _mm512_maskz_loadu_epi8((1ull << left) - 1, src + j);
      // vpermb reads each index's low 6 bits and the table repeats every 16: no masks.
      const __m512i lo = _mm512_permutexvar_epi8(v, table), hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(v, 4), table);
      _mm512_store_si512(codes + 2 * j, _mm512_permutex2var_epi64(lo, first, hi));
      _mm512_store_si512(codes + 2 * j + 64, _mm512_permutex2var_epi64(lo, second, hi));
    }
    const std::uint8_t* sc = w.block_scales + (r0 + r) * nb;
    float* scales = p.scales + r * p.row_blocks;
    for (std::int64_t b = 0; b < nb; b += 64)
      _mm_prefetch(reinterpret_cast<const char*>(sc + ahead * nb + b), _MM_HINT_T1);
    for (std::int64_t b = 0; b < nb; b += 16) {
      const int count = nb - b < 16 ? static_cast<int>(nb - b) : 16;
      _mm512_store_ps(scales + b, step_scales<false>(sc + b, count, has_special_scale(sc + b, count), e4m3));
    }
  }
}

// y rows [r0, r0 + R) for groups [g, g + G): `recs` at group g, groups `group_bytes` apart.
// `tokens`: how many of the G * 16 lanes are real (the rest is padding, not stored).
template <int R, int G>
__attribute__((noinline)) void group_kernel(const Panel& p, std::int64_t nb, const std::uint8_t* recs,
                                            std::int64_t group_bytes, float out_scale, float* y, std::int64_t n,
                                            std::int64_t tokens) {
  __m512 acc[R][G];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  const std::uint8_t* const codes = p.codes;
  const std::int64_t row_codes = p.row_codes, row_blocks = p.row_blocks;
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* rec = recs + b * kRecordBytes;
    __m512i s[R][G];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      const __m512i start = _mm512_load_si512(rec + g * group_bytes + kCorrectionLine);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[r][g] = start;
    }
#pragma GCC unroll 8
    for (int c = 0; c < 4; ++c) {
      __m512i xq[G];
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) xq[g] = _mm512_load_si512(rec + g * group_bytes + 64 * c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        std::int32_t four;
        std::memcpy(&four, codes + r * row_codes + 16 * b + 4 * c, 4);
        const __m512i wb = _mm512_set1_epi32(four);
#pragma GCC unroll 2
        for (int g = 0; g < G; ++g) s[r][g] = _mm512_dpbusd_epi32(s[r][g], wb, xq[g]);
      }
    }
    __m512 sa[G];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) sa[g] = _mm512_load_ps(rec + g * group_bytes + kScaleLine);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 sw = _mm512_set1_ps(p.scales[r * row_blocks + b]);
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g)
        acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][g]), _mm512_mul_ps(sa[g], sw), acc[r][g]);
    }
  }
  // Lane t of acc[r][g] is y[16g + t][r]: transpose 4 x 4 pieces so each token's R outputs are
  // one store (output rows are n floats apart).
  const __m512 undo = _mm512_set1_ps(out_scale);
#pragma GCC unroll 2
  for (int g = 0; g < G; ++g) {
    alignas(64) float lanes[R][kGroup];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) _mm512_store_ps(lanes[r], _mm512_mul_ps(acc[r][g], undo));
    const std::int64_t here = tokens - kGroup * g < kGroup ? tokens - kGroup * g : kGroup;
    float* yg = y + kGroup * g * n;
    std::int64_t t = 0;
    if constexpr (R % 4 == 0) {
      for (; t + 4 <= here; t += 4)
#pragma GCC unroll 2
        for (int q = 0; q < R; q += 4) {
          __m128 c0 = _mm_load_ps(lanes[q] + t), c1 = _mm_load_ps(lanes[q + 1] + t);
          __m128 c2 = _mm_load_ps(lanes[q + 2] + t), c3 = _mm_load_ps(lanes[q + 3] + t);
          _MM_TRANSPOSE4_PS(c0, c1, c2, c3);
          _mm_storeu_ps(yg + (t + 0) * n + q, c0);
          _mm_storeu_ps(yg + (t + 1) * n + q, c1);
          _mm_storeu_ps(yg + (t + 2) * n + q, c2);
          _mm_storeu_ps(yg + (t + 3) * n + q, c3);
        }
    }
    for (; t < here; ++t)
      for (int r = 0; r < R; ++r) yg[t * n + r] = lanes[r][t];
  }
}

template <int R>
void group_pass(const Panel& p, std::int64_t nb, const std::uint8_t* recs, std::int64_t group_bytes, float out_scale,
                float* y, std::int64_t n, std::int64_t groups, std::int64_t tokens) {
  if (groups >= kPairGroups) return group_kernel<R, 2>(p, nb, recs, group_bytes, out_scale, y, n, tokens);
  group_kernel<R, 1>(p, nb, recs, group_bytes, out_scale, y, n, tokens);
}

struct Job {
  const WeightMatrix* w;
  const std::uint8_t* recs;
  std::int64_t m;
  float* y;
};

// Rows [b, e) for every token: blocks of groups; in each, every pass of rows is decoded once and
// run against the block's groups two at a time.
void run_rows(const Job& job, std::int64_t b, std::int64_t e) {
  const WeightMatrix& w = *job.w;
  const std::int64_t nb = blocks_of(w.k), group_bytes = nb * kRecordBytes;
  const std::int64_t groups = (job.m + kGroup - 1) / kGroup;
  std::int64_t block = kTokenBlockBytes / group_bytes / kPairGroups * kPairGroups;
  if (block < kPairGroups) block = kPairGroups;
  const std::int64_t row_codes = padded_k(w.k), row_blocks = row_codes / 16;
  auto* mem = static_cast<std::uint8_t*>(
      thread_scratch(kScratchGemmWeights, static_cast<std::size_t>(kOneGroupRows * (row_codes + 4 * row_blocks))));
  const Panel p{mem, reinterpret_cast<float*>(mem + kOneGroupRows * row_codes), row_codes, row_blocks};
  const std::int64_t pass_rows = groups == 1 ? kOneGroupRows : kRows;
  const float out_scale = kUndo * w.weight_scale_2;
  const std::int64_t ahead_bytes_rows = (kPrefetchAheadBytes + w.k / 2 - 1) / (w.k / 2);
  const std::int64_t ahead_rows = ahead_bytes_rows > pass_rows ? ahead_bytes_rows : pass_rows;
  const float* e4m3 = decode_tables().e4m3;
  for (std::int64_t g0 = 0; g0 < groups; g0 += block) {
    const std::int64_t g1 = g0 + block < groups ? g0 + block : groups;
    for (std::int64_t r0 = b; r0 < e;) {
      // Whole passes while they fit; then passes of kRows and a last shorter one.
      const std::int64_t rows = e - r0 >= pass_rows ? pass_rows : e - r0 < kRows ? e - r0 : kRows;
      decode_rows(w, r0, rows, ahead_rows, e4m3, p);
      for (std::int64_t g = g0; g < g1; g += kPairGroups) {
        const std::uint8_t* recs = job.recs + g * group_bytes;
        float* y = job.y + g * kGroup * w.n + r0;
        const std::int64_t left = g1 - g, tokens = job.m - g * kGroup;
        switch (rows) {
          case 8: group_kernel<8, 1>(p, nb, recs, group_bytes, out_scale, y, w.n, tokens); break;  // one group
          case 4: group_pass<4>(p, nb, recs, group_bytes, out_scale, y, w.n, left, tokens); break;
          case 3: group_pass<3>(p, nb, recs, group_bytes, out_scale, y, w.n, left, tokens); break;
          case 2: group_pass<2>(p, nb, recs, group_bytes, out_scale, y, w.n, left, tokens); break;
          default: group_pass<1>(p, nb, recs, group_bytes, out_scale, y, w.n, left, tokens); break;
        }
      }
      r0 += rows;
    }
  }
}

thread_local Int8Memo tl_memo{nullptr, 0, 0, 0, false};  // see Int8Memo

}  // namespace

std::int64_t token_group_tokens(std::int64_t m) { return tokens_in_groups(m, kGroup, kPaddedMinTokens); }

bool nvfp4_gemm_int8_token_groups(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return true;
  const std::int64_t groups = (m + kGroup - 1) / kGroup;
  const std::size_t rec_bytes = static_cast<std::size_t>(groups * blocks_of(w.k) * kRecordBytes);
  auto* recs = static_cast<std::uint8_t*>(
      thread_scratch(kScratchVnniInt8Groups, rec_bytes + static_cast<std::size_t>(m * w.k) * sizeof(float)));
  // q, k and v (and an expert's gate and up) take the same activations one call after another.
  if (!refresh_int8_memo(tl_memo, recs, x, m, w.k, 1, recs + rec_bytes, [&] { return quantize_groups(x, m, w.k, recs); }))
    return false;
  const Job job{&w, recs, m, y};
  // Grain kRows * 4: each range decodes whole passes of rows.
  parallel_for(w.n, kRows * 4, [&job](std::int64_t b, std::int64_t e) { run_rows(job, b, e); });
  return true;
}

}  // namespace fp4serve::kernels::vnni
