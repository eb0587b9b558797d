// NVFP4 x int8-activation GEMM on AVX-512 VNNI + VBMI: the integer decode of the avx2 int8
// kernels (avx2/nvfp4_gemm_avx2.cpp) with one instruction where AVX2 needs four.
//
// A step is 256 elements of a row: 128 code bytes, 16 blocks of 16, one int32 lane per block.
// Byte 8b + j of the step holds elements 2j (low nibble) and 2j + 1 (high nibble) of block b, so
// qword b of the step's two 64-byte loads V0 (blocks 0-7) and V1 (blocks 8-15) is block b.
// Lanes pair up blocks q and 8 + q without a byte permute: dword blends and a qword rotate give
//   G0 = blend(V0, V1)             lane 2q = bytes 0-3 of block q, lane 2q + 1 = bytes 4-7 of block 8 + q
//   G1 = rotate(blend(V1, V0), 32) lane 2q = bytes 4-7 of block q, lane 2q + 1 = bytes 0-3 of block 8 + q
// so lane 2q holds block q and lane 2q + 1 block 8 + q (paired_block, int8_grid.h). A table
// lookup of each nibble then gives W0..W3 (low nibbles of G0, G1, high nibbles of G0, G1):
//   W0 = vpermb(G0, T), W2 = vpermb(G0 >> 4, T)   T[c] = 2 * E2M1(c & 15) + 12, unsigned 0..24
// (vpermb reads the low 6 bits of each index; T repeats every 16, so neither needs a mask).
// Gathering each block's bytes into its lane took two two-source byte permutes, which share
// Zen 4's shuffle and multiply pipes with the lookups and vpdpbusd; blends run on any ALU pipe
// and the rotate on the shift pipes (docs/perf.md, session 21).
// Activations are quantized per block to int8 and stored in that lane order (X0..X3), so
//   s = vpdpbusd(vpdpbusd(vpdpbusd(vpdpbusd(-corr, W0, X0), W1, X1), W2, X2), W3, X3)
// leaves in each lane the exact sum over its block minus the offset's 12 * sum(q), which the
// quantization stores negated per block as the accumulator's starting value. One convert, one
// multiply (weight scale x activation scale) and one FMA finish 16 blocks: per token 7 vector
// instructions per 256 weights (half-block lanes took 10: their converts and scalings ran twice).
// Lane sums are at most 16 * 24 * 127 + 12 * 16 * 127 < 2^17: exact in int32 and in fp32.
//
// Two precisions share the loop (P = activation parts per element), as on AVX2:
// * P = 1 (nvfp4_gemm_int8, opt-in class int8-activations): step = block max / 127.
// * P = 3 (nvfp4_gemm_int8x3, fp32-class): x / step = q1 + q2 / 254 + q3 / 254^2, each element
//   within step / (2 * 254^2) = block max * 6.1e-8. The three lane sums are exact integers; they
//   combine in fp32 as s1 + s2 / 254 + s3 / 254^2 (two FMAs), whose rounding is fp32's own.
// m <= 4 (decode) runs one row x m tokens per loop (the loop takes R rows; why one: see kPrefetchL1Bytes).
// For m > 4 (prefill, batched experts) P = 1 runs the same loop over
// 8-token tiles whose codes stay in L1 while a chunk of rows passes under them; from 16 tokens,
// whole groups of 16 go to the token-group GEMM (nvfp4_gemm_vnni_groups.cpp) and only the rest
// to the tiles. P = 3 takes m <= 2: from m = 3 on the exact avx512 kernel is faster.
//
// Scales: see int8_grid.h. A row group with a negative or NaN (0x7F) scale code reads the E4M3
// table instead. Rows with NaN/Inf activations run the exact avx512 kernel.
// ISA translation unit: no standard-library templates here (see avx512/nvfp4_gemm_avx512.cpp).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/isa_kernels.h"
#include "kernels/lut.h"
#include "kernels/nvfp4_isa_common.h"
#include "kernels/scratch.h"
#include "kernels/vnni/int8_grid.h"
#include "kernels/vnni/int8_token_groups.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::vnni {

namespace {

constexpr std::int64_t kStep = 256;      // elements per step: 128 code bytes, 16 blocks, one int32 lane each
constexpr std::int64_t kMaxDecodeM = 4;  // above this, the tiles
// Three parts cost 19 vector instructions per token and step against the fp32 kernel's 16 FMAs
// plus its decode, which it shares between tokens: per core 1.3x avx512 at m = 1, 1.1-1.3x at
// m = 2, 0.9x at m = 3 and 0.85x at m = 4 (docs/perf.md, sessions 11 and 12). So calls with one
// or two tokens take them (decode; batched decode's experts, most of which see one or two).
constexpr std::int64_t kThreePartsMaxM = 2;
constexpr std::int32_t kPartRatio = 254;
constexpr std::int32_t kWeightOffset = 12;
// Decode reads one row at a time (R = 1). On the Zen 4 one token ran four rows per loop and up
// to three tokens two (each activation load then served several rows' decodes: decode steps
// 0.7-5.4 % shorter, docs/perf.md, sessions 19 and 21). On the AMX Xeon of session 28 those rows
// were four streams interleaved inside one 4 KB page, which its L2 streamer did not follow, so
// the L1 prefetches carried the stream and held the fill buffers: one row at a time with the
// shorter prefetch below streamed 1.2x faster (stream_bench over the page cache 30.3-30.8
// against 25.0-25.6 GB/s) and decode reached 84 % of the roofline against 74-82 %. Not
// re-measured on the Zen 4.
// Short rows defeat the hardware prefetcher: each row requests the lines a few rows on to L2 and
// the next row's to L1, as the BF16 decode stream does (avx512/dense_gemm_avx512.cpp); 4 KB and
// 16 KB ahead, the distances of the four-row loop, read 1.2x slower on that Xeon.
constexpr std::int64_t kPrefetchL1Bytes = 1024;
constexpr std::int64_t kPrefetchL2Bytes = 4096;

// 2 * E2M1 + 12 for codes 0..15, four times (vpermb indexes 64 bytes).
struct WeightTable {
  alignas(64) std::uint8_t v[64];
  constexpr WeightTable() : v{} {
    for (int i = 0; i < 64; ++i) v[i] = static_cast<std::uint8_t>(kWeightOffset + doubled_e2m1(i & 15));
  }
};
constexpr WeightTable kWeightTable;

// The lane of block b of a step in the loop's order (paired_block in int8_grid.h is its inverse).
constexpr std::int64_t lane_of_block(std::int64_t block) { return block < 8 ? 2 * block : 2 * (block - 8) + 1; }

// A block's 16 int8 codes in the order of W0..W3: dword c holds the elements its lane of Wc
// meets. Even lanes see bytes 0-3 of their block in G0 and bytes 4-7 in G1, odd lanes the
// reverse.
struct LaneOrder {
  alignas(16) std::int8_t even[16];
  alignas(16) std::int8_t odd[16];
  constexpr LaneOrder() : even{}, odd{} {
    constexpr int e[16] = {0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15};
    constexpr int o[16] = {8, 10, 12, 14, 0, 2, 4, 6, 9, 11, 13, 15, 1, 3, 5, 7};
    for (int i = 0; i < 16; ++i) {
      even[i] = static_cast<std::int8_t>(e[i]);
      odd[i] = static_cast<std::int8_t>(o[i]);
    }
  }
};
constexpr LaneOrder kLaneOrder;

// Quantized activations, one record of 64-byte lines per (step, token). Tokens go in tiles of
// T = min(m, 8) (the kernels' token tiles); within a tile the records of one step lie side by
// side, and a tile's steps follow each other. So a kernel reaches every token of its tile from
// one pointer per step with constant offsets (separate arrays per token ran out of registers
// and spilled addresses), and a tile's codes are contiguous in L1 (a stride of m records per
// step made them conflict there: the 8-token tiles ran 0.8x).
// Lines 4p + c: part p's codes in the order of Wc; line 4P + p: part p's corrections (lane L =
// -12 * the sum of its block's codes); line 5P: the activation scales (lane L = its block's step
// * 2^63).
template <int P>
struct Record {
  static constexpr std::int64_t kBytes = 64 * (5 * P + 1);
  static constexpr std::int64_t codes(int p, int c) { return 64 * (4 * p + c); }
  static constexpr std::int64_t corr(int p) { return 64 * (4 * P + p); }
  static constexpr std::int64_t scale = 64 * (5 * P);
};

struct QuantizedX {
  const std::uint8_t* base;  // of a tile: step g, token i of the tile at base + g * step_stride + i * Record<P>::kBytes
  std::int64_t step_stride;  // T records
};

constexpr std::int64_t kTileTokens = 8;
inline std::int64_t tile_tokens(std::int64_t m) { return m < kTileTokens ? m : kTileTokens; }

// False when a row holds NaN or Inf (int8 cannot carry them: the caller takes the fp32 path).
template <int P>
bool quantize_x(const float* x, std::int64_t m, std::int64_t k, std::int64_t kg, std::uint8_t* base) {
  using R = Record<P>;
  const __m512 ratio = _mm512_set1_ps(static_cast<float>(kPartRatio));
  const __m128i even_order = _mm_load_si128(reinterpret_cast<const __m128i*>(kLaneOrder.even));
  const __m128i odd_order = _mm_load_si128(reinterpret_cast<const __m128i*>(kLaneOrder.odd));
  const std::int64_t tile = tile_tokens(m), steps = kg / kStep;
  for (std::int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    std::uint8_t* tile_base = base + (i / tile) * steps * tile * R::kBytes + (i % tile) * R::kBytes;
    for (std::int64_t b = 0; b < kg / 16; ++b) {
      std::uint8_t* rec = tile_base + (b / 16) * tile * R::kBytes;
      const std::int64_t lane = lane_of_block(b % 16);
      const __m128i lane_order = lane % 2 == 0 ? even_order : odd_order;
      const std::int64_t left = k - 16 * b;
      const __mmask16 keep = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
      GridBlock g;
      if (!to_int8_grid(_mm512_maskz_loadu_ps(keep, xi + 16 * b), g)) return false;  // zeros past k
      __m512 t = g.scaled;
#pragma GCC unroll 3
      for (int p = 0; p < P; ++p) {
        // The next part takes the residual (exact) times 254.
        const __m512 r = round_even(t);
        const __m512i q = _mm512_cvtps_epi32(r);
        alignas(16) std::int32_t dw[4];
        _mm_store_si128(reinterpret_cast<__m128i*>(dw), _mm_shuffle_epi8(_mm512_cvtepi32_epi8(q), lane_order));
        for (int c = 0; c < 4; ++c) std::memcpy(rec + R::codes(p, c) + 4 * lane, &dw[c], 4);
        const std::int32_t corr = -kWeightOffset * _mm512_reduce_add_epi32(q);
        std::memcpy(rec + R::corr(p) + 4 * lane, &corr, 4);
        t = _mm512_mul_ps(_mm512_sub_ps(t, r), ratio);
      }
      const float sa = g.step * kActivationScale;
      std::memcpy(rec + R::scale + 4 * lane, &sa, 4);
    }
  }
  return true;
}

// The operands, as locals of each kernel instance so that its inner loop keeps them in registers.
struct Args {
  const std::uint8_t* data;
  const std::uint8_t* scales;
  std::int64_t k, kg;
  float ws2;
  float* y;  // row stride n
  std::int64_t n;
  const float* e4m3;
};

// y rows [n0, n0 + R) for activation rows [0, MB). Not inlined: each instance is one tight loop
// (on AVX2, inlining every instance into one lambda spilled the loop to the stack).
template <int P, int R, int MB, bool kTableScales>
__attribute__((noinline)) void int8_kernel(const Args& a, const QuantizedX& q, std::int64_t n0) {
  const __m512i table = _mm512_load_si512(kWeightTable.v);
  const __m512 c1 = _mm512_set1_ps(1.0f / kPartRatio), c2 = _mm512_set1_ps(1.0f / (kPartRatio * kPartRatio));
  const std::uint8_t* const data = a.data;
  const std::uint8_t* const scales = a.scales;
  const std::int64_t k = a.k, row_bytes = k / 2, row_scales = k / 16;
  const std::int64_t steps = a.kg / kStep, whole = k / kStep;
  using Rec = Record<P>;
  // Whole rows ahead, in bytes for the codes and in rows for the scales.
  const std::int64_t ahead_rows = (kPrefetchL1Bytes + row_bytes - 1) / row_bytes, ahead = ahead_rows * row_bytes;
  const std::int64_t ahead_l2_rows = (kPrefetchL2Bytes + row_bytes - 1) / row_bytes, ahead_l2 = ahead_l2_rows * row_bytes;
  __m512 acc[R][MB];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm512_setzero_ps();
  // One step of R rows; `tail`: the zero-padded last one (a constant at each call below).
  auto step = [&](std::int64_t g, bool tail) __attribute__((always_inline)) {
    const std::uint8_t* xg = q.base + g * q.step_stride;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* row = data + (n0 + r) * row_bytes + g * 128;
      const std::uint8_t* sp = scales + (n0 + r) * row_scales + g * 16;
      __m512i v0, v1;
      __m512 sw;
      if (tail) {
        const std::int64_t bytes = row_bytes - g * 128;  // 8..120
        v0 = _mm512_maskz_loadu_epi8(bytes >= 64 ? ~0ull : (1ull << bytes) - 1, row);  // code 0 is +0
        v1 = bytes > 64 ? _mm512_maskz_loadu_epi8((1ull << (bytes - 64)) - 1, row + 64) : _mm512_setzero_si512();
        sw = step_scales<true>(sp, static_cast<int>(bytes / 8), kTableScales, a.e4m3);
      } else {
        _mm_prefetch(reinterpret_cast<const char*>(row + ahead), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(row + ahead + 64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(row + ahead_l2), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(row + ahead_l2 + 64), _MM_HINT_T1);
        // The scales of the rows the codes prefetches reach: four steps share a line. Without
        // the L1 one has_special_scale's first read of each row group stalled (6 % of decode
        // samples); with it alone, 4 KB ahead was too close to hide memory's latency in fast
        // spells (the stall was 4.7 % of samples; decode steps 2-4.5 % shorter with the L2 one,
        // docs/perf.md, session 21).
        if ((g & 3) == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(sp + ahead_rows * row_scales), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(sp + ahead_l2_rows * row_scales), _MM_HINT_T1);
        }
        v0 = _mm512_loadu_si512(row);
        v1 = _mm512_loadu_si512(row + 64);
        sw = step_scales<true>(sp, 16, kTableScales, a.e4m3);
      }
      // Pair blocks q and 8 + q in lanes 2q, 2q + 1, then look up both nibbles of each byte.
      const __m512i g0 = _mm512_mask_blend_epi32(0xAAAA, v0, v1);
      const __m512i g1 = _mm512_rol_epi64(_mm512_mask_blend_epi32(0xAAAA, v1, v0), 32);
      const __m512i w0 = _mm512_permutexvar_epi8(g0, table), w2 = _mm512_permutexvar_epi8(_mm512_srli_epi16(g0, 4), table);
      const __m512i w1 = _mm512_permutexvar_epi8(g1, table), w3 = _mm512_permutexvar_epi8(_mm512_srli_epi16(g1, 4), table);
#pragma GCC unroll 8
      for (int i = 0; i < MB; ++i) {
        const std::uint8_t* rec = xg + i * Rec::kBytes;
        __m512 f = _mm512_setzero_ps();
#pragma GCC unroll 3
        for (int p = 0; p < P; ++p) {
          __m512i s = _mm512_load_si512(rec + Rec::corr(p));
          s = _mm512_dpbusd_epi32(s, w0, _mm512_load_si512(rec + Rec::codes(p, 0)));
          s = _mm512_dpbusd_epi32(s, w1, _mm512_load_si512(rec + Rec::codes(p, 1)));
          s = _mm512_dpbusd_epi32(s, w2, _mm512_load_si512(rec + Rec::codes(p, 2)));
          s = _mm512_dpbusd_epi32(s, w3, _mm512_load_si512(rec + Rec::codes(p, 3)));
          const __m512 sf = _mm512_cvtepi32_ps(s);
          if (p == 0) f = sf;
          else f = _mm512_fmadd_ps(sf, p == 1 ? c1 : c2, f);
        }
        const __m512 sa = _mm512_load_ps(rec + Rec::scale);
        acc[r][i] = _mm512_fmadd_ps(f, _mm512_mul_ps(sw, sa), acc[r][i]);
      }
    }
  };
  for (std::int64_t g = 0; g < whole; ++g) step(g, false);
  if (whole < steps) step(whole, true);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) a.y[i * a.n + n0 + r] = _mm512_reduce_add_ps(acc[r][i]) * kUndo * a.ws2;
}

// Three parts never see more than kThreePartsMaxM tokens (int8_gemm).
template <int P, int R, bool kTableScales>
void int8_rows(const Args& a, const QuantizedX& q, std::int64_t m, std::int64_t n0) {
  with_token_count<(P > 1 ? kThreePartsMaxM : 8)>(
      m, [&](auto mb) { int8_kernel<P, R, decltype(mb)::kValue, kTableScales>(a, q, n0); });
}

template <int P, int R>
void int8_rows(const Args& a, const QuantizedX& q, std::int64_t m, std::int64_t n0) {
  if (has_special_scale(a.scales + n0 * (a.k / 16), R * (a.k / 16))) return int8_rows<P, R, true>(a, q, m, n0);
  int8_rows<P, R, false>(a, q, m, n0);
}

// m > 4: the kernel over 8-token tiles (for_each_int8_tile in nvfp4_isa_common.h).
constexpr std::int64_t kTokenBlockBytes = 256 * 1024;
constexpr std::int64_t kRowChunkBytes = 32 * 1024;

template <int P>
void int8_tiles(const Args& a, const QuantizedX& q, std::int64_t m, std::int64_t b, std::int64_t e) {
  for_each_int8_tile(
      m, b, e, a.kg / kStep * Record<P>::kBytes, a.scales, a.k, kTokenBlockBytes, kRowChunkBytes, kTileTokens,
      [&](std::int64_t i0, std::int64_t tokens, std::int64_t c0, std::int64_t c1, bool table) {
        const QuantizedX qi{q.base + i0 * (a.kg / kStep) * Record<P>::kBytes, q.step_stride};  // i0: a multiple of 8
        Args ai = a;
        ai.y = a.y + i0 * a.n;
        for (std::int64_t n0 = c0; n0 < c1; ++n0) {
          if (table) int8_rows<P, 1, true>(ai, qi, tokens, n0);
          else int8_rows<P, 1, false>(ai, qi, tokens, n0);
        }
      });
}

thread_local Int8Memo tl_memo{nullptr, 0, 0, 0, false};  // see Int8Memo

template <int P>
void int8_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  if (P > 1 && m > kThreePartsMaxM) return avx512::nvfp4_gemm(x, m, w, y);
  if constexpr (P == 1) {
    // From 16 tokens the token-group GEMM takes whole groups (1.3-1.6x the tiles' speed); fewer
    // than kPaddedMinTokens left over go to the tiles below.
    if (const std::int64_t grouped = token_group_tokens(m); grouped > 0) {
      if (!nvfp4_gemm_int8_token_groups(x, grouped, w, y)) return avx512::nvfp4_gemm(x, m, w, y);
      x += grouped * w.k;
      y += grouped * w.n;
      m -= grouped;
      if (m == 0) return;
    }
  }
  const std::int64_t kg = (w.k + kStep - 1) / kStep * kStep;
  const std::int64_t tile = tile_tokens(m), tiles = (m + tile - 1) / tile;
  const std::size_t x_at = static_cast<std::size_t>(tiles * tile * (kg / kStep) * Record<P>::kBytes);
  auto* buf = static_cast<std::uint8_t*>(
      thread_scratch(kScratchVnniInt8Activations, x_at + static_cast<std::size_t>(m * w.k) * sizeof(float)));
  const bool finite =
      refresh_int8_memo(tl_memo, buf, x, m, w.k, P, buf + x_at, [&] { return quantize_x<P>(x, m, w.k, kg, buf); });
  if (!finite) return avx512::nvfp4_gemm(x, m, w, y);  // NaN/Inf: the exact path propagates them
  const QuantizedX q{buf, tile * Record<P>::kBytes};
  const Args a{w.data, w.block_scales, w.k, kg, w.weight_scale_2, y, w.n, decode_tables().e4m3};
  parallel_for(w.n, int8_row_grain(w.n, m, kMaxDecodeM), [&a, &q, m](std::int64_t b, std::int64_t e) {
    prefetch_rows_start(a.data, a.scales, a.k, b, e, kPrefetchL1Bytes, kPrefetchL2Bytes);
    if constexpr (P == 1) {
      if (m > kMaxDecodeM) return int8_tiles<P>(a, q, m, b, e);
    }
    for (std::int64_t n0 = b; n0 < e; ++n0) int8_rows<P, 1>(a, q, m, n0);  // one row at a time (above)
  });
}

}  // namespace

void nvfp4_gemm_int8(const float* x, std::int64_t m, const WeightMatrix& w, float* y) { int8_gemm<1>(x, m, w, y); }
void nvfp4_gemm_int8x3(const float* x, std::int64_t m, const WeightMatrix& w, float* y) { int8_gemm<3>(x, m, w, y); }

}  // namespace fp4serve::kernels::vnni
