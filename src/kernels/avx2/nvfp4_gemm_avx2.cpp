// NVFP4 x fp32 GEMM, AVX2 + FMA. Two paths, one activation layout.
//
// Decode of 64 elements (32 bytes, four 16-element blocks) of one weight row:
//   v      = the 32 bytes as 8 int32 lanes; lane d holds elements 8d .. 8d+7, one nibble each
//   |w_j|  = permutevar8x32(table, v >> 4j)  (j = 0..7): lane d = |element 8d + j|. The permute
//            reads only the low 3 bits of each lane, which are exactly the magnitude bits.
//   sign_j = bit 31 of v << (28 - 4j)         (the code's bit 3)
// so each lane stays inside one block (lane d is block d / 2) and the block scale is one vector
// per 32 bytes. Activations are re-ordered once per call to match: within each 64-element chunk
// xd[c + 8j + d] = x[c + 8d + j] (an 8 x 8 transpose), zero-padded to a whole chunk.
//
// * m <= 4 (decode): each decoded vector is used at once for every activation row. The sign
//   goes onto the weight (and + xor), the products of a chunk are summed per lane first and the
//   block scale is applied once per chunk (acc += t * s), as in the AVX-512 kernel. On an AVX2-only
//   EPYC this runs as fast as the previous loop (one 16-element block per step with its own scaled
//   table), ≈ 3.5 GB/s per core from L2: both are ALU-bound there, as were four other decodes
//   tried (docs/perf.md, session 8). It stays for the layout it shares with the panel path.
// * m > 4 (prefill, batched experts): up to 16 rows are decoded once into an fp32 panel in L2
//   (scale applied, exact), then every group of 3 activation rows runs a 4-row x 3-token FMA
//   tile over it: 12 FMAs per 7 loads, no decode in the inner loop. The previous kernel decoded
//   every weight again for each group of 4 tokens: 2.2x slower at m = 64.
//
// Block scales travel as raw bits: code << 20 read as fp32 is the E4M3 value times 2^-120
// (exact, subnormal codes included). The decode path's table carries 2^64, so its partial sums
// are the true ones times 2^-56 (powers of two: exact) and the output is multiplied back once;
// the panel's table carries 2^120, so the panel holds true values. A row group with a negative
// or NaN (0x7F) scale code reads the E4M3 table instead (true values times 2^-120).
// E2M1 x E4M3 products are exact in fp32; the per-tensor scale is applied once per output.
// ISA translation unit: no standard-library templates here (see avx512/nvfp4_gemm_avx512.cpp).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/isa_kernels.h"
#include "kernels/lut.h"
#include "kernels/nvfp4_isa_common.h"
#include "kernels/scratch.h"
#include "numerics/int8_grid_step.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx2 {

namespace {

constexpr std::int64_t kChunk = 64;    // weights per decode step (32 bytes, 4 blocks)
constexpr std::int64_t kMaxDecodeM = 4;  // above this, the panel path
constexpr std::int64_t kThreePartsMaxM = kMaxDecodeM;  // the int8x3 kernel: decode only
constexpr float kDecodeTableScale = 0x1p64f;
constexpr float kPanelTableScale = 0x1p120f;
constexpr float kScaleBitsScale = 0x1p-120f;
constexpr float kDecodeUndo = 0x1p56f;  // 1 / (kDecodeTableScale * kScaleBitsScale)
// Short rows defeat the hardware prefetcher; fetch this far ahead ourselves (as avx512).
constexpr std::int64_t kPrefetchL1Bytes = 4096;
constexpr std::int64_t kPrefetchL2Bytes = 16384;
// The panel: at most this many fp32 bytes (L2 holds it next to the activations it meets).
constexpr std::int64_t kPanelBytes = 128 * 1024;

// xd[i][c + 8j + d] = x[i][c + 8d + j] per 64-element chunk c; zeros past k.
void prepare_x(const float* x, std::int64_t m, std::int64_t k, float* xd, std::int64_t kp) {
  for (std::int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    float* di = xd + i * kp;
    for (std::int64_t c = 0; c < kp; c += kChunk) {
      if (c + kChunk > k) {
        for (int j = 0; j < 8; ++j)
          for (int d = 0; d < 8; ++d) di[c + 8 * j + d] = c + 8 * d + j < k ? xi[c + 8 * d + j] : 0.0f;
        continue;
      }
      // 8 x 8 transpose in registers: unpack pairs, then quads, then 128-bit halves.
      __m256 r[8];
      for (int q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(xi + c + 8 * q);
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      __m256 o[8];
      o[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
      o[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
      o[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
      o[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
      o[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
      o[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
      o[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
      o[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(di + c + 8 * j, o[j]);
    }
  }
}

struct Ctx {
  const std::uint8_t* data;
  const std::uint8_t* scales;
  std::int64_t k, kp, n, m;
  float ws2;
  const float* xd;  // prepared activations, row stride kp
  float* y;         // row stride n
  const float* e4m3;
  const float* mag;  // |E2M1| of codes 0..7
};

float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

constexpr ScaleShuffle<8> kScaleShuffle;

// Lane d = scale of block d / 2 of a chunk, times 2^-120, from `count` (1..4) codes at p.
inline __m256 chunk_scales(const std::uint8_t* p, int count, bool table, const float* e4m3, __m256i shuffle) {
  std::uint32_t codes = 0;
  if (count == 4) std::memcpy(&codes, p, 4);  // a fixed size: one load, not a call
  else for (int i = 0; i < count; ++i) codes |= static_cast<std::uint32_t>(p[i]) << (8 * i);  // missing codes: 0 = +0
  const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(codes)), shuffle);
  if (table) return _mm256_mul_ps(_mm256_i32gather_ps(e4m3, b, 4), _mm256_set1_ps(kScaleBitsScale));
  return _mm256_castsi256_ps(_mm256_slli_epi32(b, 20));
}

// The 32 code bytes of chunk ch of a row (zero-padded in the tail chunk: code 0 is +0).
inline __m256i chunk_codes(const std::uint8_t* row, std::int64_t ch, std::int64_t k) {
  const std::int64_t left = k / 2 - ch * 32;
  if (left >= 32) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + ch * 32));
  alignas(32) std::uint8_t buf[32] = {};
  std::memcpy(buf, row + ch * 32, static_cast<std::size_t>(left));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
}

// Element 8d + j of lane d, signed, unscaled (times the table's power of two).
template <int J>
inline __m256 decode_j(__m256i v, __m256 table) {
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i idx = J == 0 ? v : _mm256_srli_epi32(v, 4 * J);
  const __m256i s = J == 7 ? v : _mm256_slli_epi32(v, 28 - 4 * J);
  return _mm256_xor_ps(_mm256_permutevar8x32_ps(table, idx), _mm256_castsi256_ps(_mm256_and_si256(s, sign)));
}

// ---- decode path: R rows x MB activation rows, every weight decoded once and used at once ----

// t[r][i] += w_j(row r) * x_j(activation row i); x_j: the chunk's j-th 8 prepared activations.
// Rows are interleaved per j so that R independent chains keep the FMA pipes busy.
template <int J, int R, int MB>
inline void accumulate_j(const __m256i (&v)[R], __m256 table, const float* xc, std::int64_t kp, __m256 (&t)[R][MB]) {
  __m256 x[MB];
#pragma GCC unroll 4
  for (int i = 0; i < MB; ++i) x[i] = _mm256_loadu_ps(xc + i * kp + 8 * J);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m256 w = decode_j<J>(v[r], table);
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) {
      if constexpr (J == 0) t[r][i] = _mm256_mul_ps(w, x[i]);
      else t[r][i] = _mm256_fmadd_ps(w, x[i], t[r][i]);
    }
  }
}

template <int R, int MB, bool kTableScales>
void decode_kernel(const Ctx& c, std::int64_t n0, std::int64_t m0) {
  const __m256 table = _mm256_mul_ps(_mm256_loadu_ps(c.mag), _mm256_set1_ps(kDecodeTableScale));
  const __m256i shuffle = _mm256_load_si256(reinterpret_cast<const __m256i*>(kScaleShuffle.idx));
  const std::int64_t row_bytes = c.k / 2, row_scales = c.k / 16, full = c.k / kChunk;
  const std::int64_t ahead = (kPrefetchL1Bytes + row_bytes - 1) / row_bytes;  // rows
  const std::int64_t ahead_l2 = (kPrefetchL2Bytes + row_bytes - 1) / row_bytes;
  const float* xd = c.xd + m0 * c.kp;

  __m256 acc[R][MB];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_setzero_ps();

  // One 64-element chunk of R rows; `tail`: the zero-padded last one.
  auto step = [&](std::int64_t ch, bool tail) __attribute__((always_inline)) {
    const float* xc = xd + ch * kChunk;
    __m256i v[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* row = c.data + (n0 + r) * row_bytes;
      if (tail) {
        v[r] = chunk_codes(row, ch, c.k);
        continue;
      }
      // Rows are short (a few hundred bytes to a few KB): the hardware prefetcher barely ramps
      // up within one, so fetch the same place some rows ahead ourselves.
      if ((ch & 1) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(row + ahead * row_bytes + ch * 32), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(row + ahead_l2 * row_bytes + ch * 32), _MM_HINT_T1);
      }
      if ((ch & 15) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(c.scales + (n0 + r + ahead) * row_scales + ch * 4), _MM_HINT_T0);
      v[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + ch * 32));
    }
    __m256 t[R][MB];
    accumulate_j<0>(v, table, xc, c.kp, t);
    accumulate_j<1>(v, table, xc, c.kp, t);
    accumulate_j<2>(v, table, xc, c.kp, t);
    accumulate_j<3>(v, table, xc, c.kp, t);
    accumulate_j<4>(v, table, xc, c.kp, t);
    accumulate_j<5>(v, table, xc, c.kp, t);
    accumulate_j<6>(v, table, xc, c.kp, t);
    accumulate_j<7>(v, table, xc, c.kp, t);
    const std::int64_t left = row_scales - ch * 4;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 s = chunk_scales(c.scales + (n0 + r) * row_scales + ch * 4, left < 4 ? static_cast<int>(left) : 4,
                                    kTableScales, c.e4m3, shuffle);
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_fmadd_ps(t[r][i], s, acc[r][i]);
    }
  };
  for (std::int64_t ch = 0; ch < full; ++ch) step(ch, false);
  if (c.kp != full * kChunk) step(full, true);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) c.y[(m0 + i) * c.n + n0 + r] = hsum(acc[r][i]) * kDecodeUndo * c.ws2;
}

template <int R, int MB>
void decode_kernel(const Ctx& c, std::int64_t n0, std::int64_t m0) {
  const std::int64_t row_scales = c.k / 16;
  if (has_special_scale(c.scales + n0 * row_scales, R * row_scales)) return decode_kernel<R, MB, true>(c, n0, m0);
  decode_kernel<R, MB, false>(c, n0, m0);
}

template <int R>
void decode_rows(const Ctx& c, std::int64_t n0) {
  switch (c.m) {
    case 1: return decode_kernel<R, 1>(c, n0, 0);
    case 2: return decode_kernel<R, 2>(c, n0, 0);
    case 3: return decode_kernel<R, 3>(c, n0, 0);
    default: return decode_kernel<R, 4>(c, n0, 0);
  }
}

void decode_range(const Ctx& c, std::int64_t b, std::int64_t e) {
  prefetch_rows_start(c.data, c.scales, c.k, b, e, kPrefetchL1Bytes, kPrefetchL2Bytes);
  std::int64_t n0 = b;
  if (c.m <= 2) {
    for (; n0 + 2 <= e; n0 += 2) decode_rows<2>(c, n0);
  }
  for (; n0 < e; ++n0) decode_rows<1>(c, n0);
}

// ---- panel path: rows decoded once to fp32, then a 4-row x 3-token FMA tile ----

// Rows [n0, n0 + rows) as true fp32 values into panel (row stride kp, the xd element order).
void decode_panel(const Ctx& c, std::int64_t n0, std::int64_t rows, float* panel) {
  const __m256 table = _mm256_mul_ps(_mm256_loadu_ps(c.mag), _mm256_set1_ps(kPanelTableScale));
  const __m256i shuffle = _mm256_load_si256(reinterpret_cast<const __m256i*>(kScaleShuffle.idx));
  const std::int64_t row_bytes = c.k / 2, row_scales = c.k / 16, chunks = c.kp / kChunk;
  const bool table_scales = has_special_scale(c.scales + n0 * row_scales, rows * row_scales);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* row = c.data + (n0 + r) * row_bytes;
    float* out = panel + r * c.kp;
    for (std::int64_t ch = 0; ch < chunks; ++ch) {
      _mm_prefetch(reinterpret_cast<const char*>(row + ch * 32 + 4 * row_bytes), _MM_HINT_T0);
      const __m256i v = chunk_codes(row, ch, c.k);
      const std::int64_t left = row_scales - ch * 4;
      const __m256 s = chunk_scales(c.scales + (n0 + r) * row_scales + ch * 4, left < 4 ? static_cast<int>(left) : 4,
                                    table_scales, c.e4m3, shuffle);
      float* o = out + ch * kChunk;
      _mm256_storeu_ps(o + 0, _mm256_mul_ps(decode_j<0>(v, table), s));
      _mm256_storeu_ps(o + 8, _mm256_mul_ps(decode_j<1>(v, table), s));
      _mm256_storeu_ps(o + 16, _mm256_mul_ps(decode_j<2>(v, table), s));
      _mm256_storeu_ps(o + 24, _mm256_mul_ps(decode_j<3>(v, table), s));
      _mm256_storeu_ps(o + 32, _mm256_mul_ps(decode_j<4>(v, table), s));
      _mm256_storeu_ps(o + 40, _mm256_mul_ps(decode_j<5>(v, table), s));
      _mm256_storeu_ps(o + 48, _mm256_mul_ps(decode_j<6>(v, table), s));
      _mm256_storeu_ps(o + 56, _mm256_mul_ps(decode_j<7>(v, table), s));
    }
  }
}

// y[m0 + i][n0 + r] for R panel rows and MB activation rows: 8-lane partial dot products over
// the whole row, summed across lanes once at the end.
template <int R, int MB>
void panel_tile(const Ctx& c, const float* panel, std::int64_t n0, std::int64_t m0) {
  __m256 acc[R][MB];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_setzero_ps();
  const float* xd = c.xd + m0 * c.kp;
  for (std::int64_t kk = 0; kk < c.kp; kk += 8) {
    __m256 x[MB];
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) x[i] = _mm256_loadu_ps(xd + i * c.kp + kk);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 w = _mm256_loadu_ps(panel + r * c.kp + kk);
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_fmadd_ps(w, x[i], acc[r][i]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) c.y[(m0 + i) * c.n + n0 + r] = hsum(acc[r][i]) * c.ws2;
}

template <int R>
void panel_rows(const Ctx& c, const float* panel, std::int64_t n0) {
  std::int64_t m0 = 0;
  for (; m0 + 3 <= c.m; m0 += 3) panel_tile<R, 3>(c, panel, n0, m0);
  if (c.m - m0 == 2) panel_tile<R, 2>(c, panel, n0, m0);
  if (c.m - m0 == 1) panel_tile<R, 1>(c, panel, n0, m0);
}

void panel_range(const Ctx& c, std::int64_t b, std::int64_t e) {
  std::int64_t height = kPanelBytes / (c.kp * 4) / 4 * 4;
  if (height < 4) height = 4;
  if (height > 16) height = 16;
  float* panel = static_cast<float*>(thread_scratch(kScratchGemmWeights, static_cast<std::size_t>(height * c.kp) * sizeof(float)));
  for (std::int64_t n0 = b; n0 < e; n0 += height) {
    const std::int64_t rows = e - n0 < height ? e - n0 : height;
    decode_panel(c, n0, rows, panel);
    std::int64_t r = 0;
    for (; r + 4 <= rows; r += 4) panel_rows<4>(c, panel + r * c.kp, n0 + r);
    for (; r < rows; ++r) panel_rows<1>(c, panel + r * c.kp, n0 + r);
  }
}

}  // namespace

void nvfp4_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  const std::int64_t kp = (w.k + kChunk - 1) / kChunk * kChunk;
  float* xd = static_cast<float*>(thread_scratch(kScratchGemmActivations, static_cast<std::size_t>(m * kp) * sizeof(float)));
  prepare_x(x, m, w.k, xd, kp);
  const DecodeTables& t = decode_tables();
  const Ctx c{w.data, w.block_scales, w.k, kp, w.n, m, w.weight_scale_2, xd, y, t.e4m3, t.e2m1_mag};
  if (m <= kMaxDecodeM) {
    parallel_for(w.n, 16, [&c](std::int64_t b, std::int64_t e) { decode_range(c, b, e); });
  } else {
    parallel_for(w.n, 16, [&c](std::int64_t b, std::int64_t e) { panel_range(c, b, e); });
  }
}

// ---- int8 activations: decode that is not ALU-bound on AVX2 ----
//
// Activations are quantized per 16-element block to int8 (step = int8_grid_step(block max), about
// max / 127; numerics/int8_grid_step.h), once per new activation vector (Int8Memo in
// kernels/nvfp4_isa_common.h).
// Weights become 2 * E2M1 + 12, an unsigned byte in 0..24, by one vpshufb per 32 codes, so
// vpmaddubsw takes them as its unsigned operand and x as the signed one with no sign juggling;
// the offset comes back out as 12 * (sum of the block's int8 activations), computed once per call.
// Two 32-byte chunks (128 elements, 8 blocks) go together as four quarters whose 4-byte lanes
// each hold one block (group_quarters: two vshufps per row, shared by the tile's tokens; the
// activations are stored in the same order). Per token the four products add in int16 and one
// vpmaddwd leaves one int32 lane per block (exact), so one convert, one multiply by (weight scale
// x activation scale) and one FMA serve 8 blocks, and one 8-byte load brings their 8 scale codes:
// ≈ 12 single-uop instructions per token and 128 weights. (Until session 16 the quarters were the
// chunks' low and high nibbles as loaded, and a vphaddw per token, 4 uops on Zen 3, paired them.)
//
// A vpmaddubsw lane is at most 2 * 24 * 127 = 6096 in size; four of them add in int16
// (4 * 6096 < 2^15) before vpmaddwd widens to int32.
//
// Two precisions share the loop (P = activation parts):
// * P = 1 (nvfp4_gemm_int8, opt-in class int8-activations): one int8 per element, llama.cpp's
//   Q8_0 class one block finer. For m > 4 (prefill) it runs the same loop over 8-token tiles
//   (int8_tiles): ≈ 1.8x the fp32 panels' GEMM rate on the EPYC (docs/perf.md, session 10).
// * P = 3 (nvfp4_gemm_int8x3, fp32-class): x / step = q1 + q2 / 254 + q3 / 254^2, each q an int8
//   (the residual of each part, times 254, rounds into -127..127), so an element is off by at most
//   step / (2 * 254^2) = block max * 6.1e-8, fp32's own rounding of the block's largest element.
//   Per block the three exact int32 sums combine as (s1 * 254 + s2) * 254 + s3 with wrap-around
//   arithmetic: the true value, |sum| <= 16 * 12 * 127.5 * 254^2 < 2^31, comes out exact although
//   the offset-carrying intermediates may wrap. The weights are decoded once for all three parts.
//
// The activation scale carries 2^63 (0.5 for the doubled E2M1 times 2^64) so that it times the
// scale bits (2^-120) stays a normal float: subnormal products ran 3x slower on the EPYC this was
// written on.
namespace {

// 2 * E2M1 + 12 for codes 0..15, in both 128-bit halves (vpshufb is per half).
struct Int8Table {
  alignas(32) std::uint8_t v[32];
  constexpr Int8Table() : v{} {
    constexpr int mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 16; ++c) v[16 * h + c] = static_cast<std::uint8_t>(kInt8WeightOffset + (c < 8 ? mag[c] : -mag[c - 8]));
  }
  static constexpr int kInt8WeightOffset = 12;
};
constexpr Int8Table kInt8Table;
constexpr std::int64_t kGroup = 2 * kChunk;  // 128 elements: 8 blocks, one int32 lane each
constexpr std::int32_t kPartRatio = 254;     // each further part resolves the previous one's step / 254
// Rows per pass of the decode loop and how far ahead it prefetches, by activation parts. Three
// parts are compute-bound: every activation load and scale shuffle serves R rows, one token
// takes four and two tokens two (decode steps -2.4 to -8.0 % on the Zen 4 with AVX-512 disabled;
// docs/perf.md, session 22). One part streams: one row per pass, prefetched 1 KB ahead to L1
// and 4 KB to L2. Four interleaved rows share a 4 KB page, which the L2 streamer does not
// follow, and an L1 prefetch 4 KB ahead holds a fill buffer for memory's whole latency: on the
// AMX Xeon one row at 1 / 4 KB streamed 31-32 GB/s from the page cache against 23 (four rows at
// 4 / 16 KB), as the VNNI kernel did (sessions 28 and 29); the Zen 4 had measured four rows
// 1.1 % faster there, within its noise.
constexpr std::int64_t kThreePartsFourRowsMaxM = 1;
constexpr std::int64_t kThreePartsTwoRowsMaxM = 2;
constexpr std::int64_t int8_prefetch_l1_bytes(int parts) { return parts > 1 ? 4096 : 1024; }
constexpr std::int64_t int8_prefetch_l2_bytes(int parts) { return parts > 1 ? 16384 : 4096; }

// Lane d of a group's quarters holds block kLaneBlock[d] (group_quarters' vshufps order); every
// per-block vector (scales, corrections) uses that lane order. vpshufb indices that put scale
// code kLaneBlock[d] of the 8 (broadcast to both halves) into lane d's low byte.
constexpr int kLaneBlock[8] = {0, 1, 4, 5, 2, 3, 6, 7};
static_assert(kLaneBlock[kLaneBlock[2]] == 2 && kLaneBlock[kLaneBlock[3]] == 3, "lane order must be its own inverse");
struct GroupScaleShuffle {
  alignas(32) std::int8_t idx[32];
  constexpr GroupScaleShuffle() : idx{} {
    for (int d = 0; d < 8; ++d) {
      idx[4 * d] = static_cast<std::int8_t>(kLaneBlock[d]);
      idx[4 * d + 1] = idx[4 * d + 2] = idx[4 * d + 3] = -128;
    }
  }
};
constexpr GroupScaleShuffle kGroupScaleShuffle;

constexpr float kInt8ActivationScale = 0x1p63f;  // 0.5 * 2^64
constexpr float kInt8Undo = 0x1p56f;             // 1 / (2^64 * 2^-120)

// Activation row i, part p lives at index i * P + p of the code arrays.
struct QuantizedX {
  const std::int8_t* codes;  // [m * P][kg]: per group four 32-byte quarters (group_quarters, store_block)
  const float* scale;        // [m][kg / 16]: per group, lane d = block kLaneBlock[d]'s step * 2^63 / 254^(P-1)
  const std::int32_t* corr;  // [m][kg / 16]: the same lanes, 12 * the block's combined int sum
};

// Horizontal sum of the 16 int32 lanes of a and b.
inline std::int32_t hsum_epi32(__m256i a, __m256i b) {
  const __m256i s = _mm256_add_epi32(a, b);
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xB1)));
}

// Stores the 16 int32 values q0|q1 (all in -127..127) of block b % 8 into its group's 128 code
// bytes, in the order the weights meet them (group_quarters): quarter 0 / 1 hold the block's
// elements 0..7 at even / odd positions, quarters 2 / 3 elements 8..15, each in the 4 bytes of
// the block's lane kLaneBlock[b % 8].
inline void store_block(__m256i q0, __m256i q1, std::int64_t block_in_group, std::int8_t* group) {
  alignas(32) std::int32_t q[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(q), q0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(q + 8), q1);
  std::int8_t* lane = group + 4 * kLaneBlock[block_in_group];
  for (int j = 0; j < 4; ++j) {
    lane[j] = static_cast<std::int8_t>(q[2 * j]);
    lane[32 + j] = static_cast<std::int8_t>(q[2 * j + 1]);
    lane[64 + j] = static_cast<std::int8_t>(q[8 + 2 * j]);
    lane[96 + j] = static_cast<std::int8_t>(q[8 + 2 * j + 1]);
  }
}

// False when a row holds NaN or Inf (int8 cannot carry them: the caller takes the fp32 path).
// Runs once per new activation vector; vectorized, since decode calls the GEMM per 128-row
// expert slice (a scalar loop doubled a slice's time in the MoE benchmark before the reuse).
// kg is k rounded up to whole groups; blocks past k are zeros (scale 0, correction 0).
template <int P>
bool quantize_x(const float* x, std::int64_t m, std::int64_t k, std::int64_t kg, std::int8_t* codes,
                float* scale, std::int32_t* corr) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 finite_max = _mm256_set1_ps(3.4028235e38f);
  const __m256 ratio = _mm256_set1_ps(static_cast<float>(kPartRatio));
  float part_scale = kInt8ActivationScale;
  for (int p = 1; p < P; ++p) part_scale /= static_cast<float>(kPartRatio);
  alignas(32) float block[16];
  for (std::int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    for (std::int64_t b = 0; b < kg / 16; ++b) {
      const float* src = xi + 16 * b;
      if (16 * b + 16 > k) {  // the zero-padded tail
        for (int e = 0; e < 16; ++e) block[e] = 16 * b + e < k ? src[e] : 0.0f;
        src = block;
      }
      const __m256 v0 = _mm256_loadu_ps(src), v1 = _mm256_loadu_ps(src + 8);
      const __m256 a0 = _mm256_and_ps(v0, abs_mask), a1 = _mm256_and_ps(v1, abs_mask);
      // NaN compares false, Inf is above the largest finite: either makes the mask non-zero.
      const __m256 bad = _mm256_or_ps(_mm256_cmp_ps(a0, finite_max, _CMP_NLE_UQ), _mm256_cmp_ps(a1, finite_max, _CMP_NLE_UQ));
      if (_mm256_movemask_ps(bad) != 0) return false;
      __m256 mx = _mm256_max_ps(a0, a1);
      mx = _mm256_max_ps(mx, _mm256_permute2f128_ps(mx, mx, 1));
      mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, 0x4E));
      mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, 0xB1));
      const float top = _mm_cvtss_f32(_mm256_castps256_ps128(mx));
      // The grid of numerics/int8_grid_step.h, as the VNNI kernels quantize.
      const float step = numerics::int8_grid_step(top);
      const __m256 inv = _mm256_set1_ps(numerics::int8_grid_inverse(step));
      // t = x / step in -127..127; each part rounds (to nearest even, as lrintf) what is left of
      // t, and the next part takes the residual (exact in fp32) times 254.
      __m256 t0 = _mm256_mul_ps(v0, inv), t1 = _mm256_mul_ps(v1, inv);
      std::int32_t combined = 0;
#pragma GCC unroll 3
      for (int p = 0; p < P; ++p) {
        const __m256 r0 = _mm256_round_ps(t0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256 r1 = _mm256_round_ps(t1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256i q0 = _mm256_cvtps_epi32(r0), q1 = _mm256_cvtps_epi32(r1);
        store_block(q0, q1, b % 8, codes + (i * P + p) * kg + b / 8 * kGroup);
        combined = combined * kPartRatio + hsum_epi32(q0, q1);
        t0 = _mm256_mul_ps(_mm256_sub_ps(t0, r0), ratio);
        t1 = _mm256_mul_ps(_mm256_sub_ps(t1, r1), ratio);
      }
      // Block b % 8 of group b / 8 sits in lane kLaneBlock[b % 8]: the order swaps blocks 2, 3
      // with 4, 5, so it is its own inverse.
      const std::int64_t at = i * (kg / 16) + b / 8 * 8 + kLaneBlock[b % 8];
      scale[at] = step * part_scale;
      corr[at] = Int8Table::kInt8WeightOffset * combined;
    }
  }
  return true;
}

// Lane d = block kLaneBlock[d]'s scale times 2^-120, from `count` (1..8) codes at p.
inline __m256 group_scales(const std::uint8_t* p, int count, bool table, const float* e4m3, __m256i shuffle) {
  std::uint64_t codes = 0;
  if (count == 8) std::memcpy(&codes, p, 8);  // a fixed size: one load, not a call
  else for (int i = 0; i < count; ++i) codes |= static_cast<std::uint64_t>(p[i]) << (8 * i);  // missing: 0 = +0
  const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<long long>(codes)), shuffle);
  if (table) return _mm256_mul_ps(_mm256_i32gather_ps(e4m3, b, 4), _mm256_set1_ps(kScaleBitsScale));
  return _mm256_castsi256_ps(_mm256_slli_epi32(b, 20));
}

// The operands, as locals of each kernel instance so that its inner loop keeps them in registers.
struct Int8Args {
  const std::uint8_t* data;
  const std::uint8_t* scales;
  std::int64_t k, kg;
  float ws2;
  float* y;
  std::int64_t n;
  const float* e4m3;
};

// Per block lane: the exact int32 sum of (2 * E2M1 + 12) * q over the group, for one part.
// Every 4-byte lane of the four quarters belongs to one block, so the products add in int16 and
// one vpmaddwd widens them: no vphaddw (4 uops on Zen 3) per token.
__attribute__((always_inline)) inline __m256i part_sums(const __m256i (&w)[4], const std::int8_t* xg) {
  const __m256i ones = _mm256_set1_epi16(1);
  auto product = [&](int quarter) __attribute__((always_inline)) {
    return _mm256_maddubs_epi16(w[quarter], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + 32 * quarter)));
  };
  const __m256i p = _mm256_add_epi16(_mm256_add_epi16(product(0), product(1)), _mm256_add_epi16(product(2), product(3)));
  return _mm256_madd_epi16(p, ones);
}

// The group's 64 code bytes (v0, v1) as four quarters of unsigned 2 * E2M1 + 12 weights whose
// 4-byte lanes each hold one block, in lane order kLaneBlock: dwords 0, 2, 8, 10 | 4, 6, 12, 14
// (each block's first 8 elements) and 1, 3, 9, 11 | 5, 7, 13, 15 (its last 8), low nibbles then
// high nibbles. Once per row and group, shared by every token of the tile.
__attribute__((always_inline)) inline void group_quarters(__m256i v0, __m256i v1, __m256i table, __m256i (&w)[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i first = _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(v0), _mm256_castsi256_ps(v1), 0x88));
  const __m256i last = _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(v0), _mm256_castsi256_ps(v1), 0xDD));
  w[0] = _mm256_shuffle_epi8(table, _mm256_and_si256(first, low4));
  w[1] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(first, 4), low4));
  w[2] = _mm256_shuffle_epi8(table, _mm256_and_si256(last, low4));
  w[3] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(last, 4), low4));
}

// Accumulates rows [n0, n0 + R) x activation rows [0, MB) over groups [g0, g1).
template <int P, int R, int MB, bool kTableScales, bool kTail>
__attribute__((always_inline)) inline void int8_groups(const Int8Args& a, const QuantizedX& q, std::int64_t n0,
                                                        std::int64_t g0, std::int64_t g1, __m256 (&acc)[R][MB]) {
  const __m256i table = _mm256_load_si256(reinterpret_cast<const __m256i*>(kInt8Table.v));
  const __m256i shuffle = _mm256_load_si256(reinterpret_cast<const __m256i*>(kGroupScaleShuffle.idx));
  const __m256i ratio = _mm256_set1_epi32(kPartRatio);
  const std::uint8_t* const data = a.data;
  const std::uint8_t* const scales = a.scales;
  const std::int64_t k = a.k, kg = a.kg, row_bytes = k / 2, row_scales = k / 16, per_group = a.kg / 16;
  constexpr std::int64_t l1 = int8_prefetch_l1_bytes(P), l2 = int8_prefetch_l2_bytes(P);
  const std::int64_t ahead = (l1 + row_bytes - 1) / row_bytes * row_bytes;
  const std::int64_t ahead_l2 = (l2 + row_bytes - 1) / row_bytes * row_bytes;
  for (std::int64_t g = g0; g < g1; ++g) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* row = data + (n0 + r) * row_bytes;
      __m256i v0, v1;
      __m256 sw;
      if constexpr (kTail) {
        v0 = 2 * g * 32 < row_bytes ? chunk_codes(row, 2 * g, k) : _mm256_setzero_si256();
        v1 = (2 * g + 1) * 32 < row_bytes ? chunk_codes(row, 2 * g + 1, k) : _mm256_setzero_si256();
        const std::int64_t left = row_scales - g * 8;
        sw = group_scales(scales + (n0 + r) * row_scales + g * 8, left < 8 ? static_cast<int>(left) : 8, kTableScales, a.e4m3,
                          shuffle);
      } else {
        _mm_prefetch(reinterpret_cast<const char*>(row + ahead + g * 64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(row + ahead_l2 + g * 64), _MM_HINT_T1);
        v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + g * 64));
        v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + g * 64 + 32));
        sw = group_scales(scales + (n0 + r) * row_scales + g * 8, 8, kTableScales, a.e4m3, shuffle);
      }
      __m256i w[4];
      group_quarters(v0, v1, table, w);
#pragma GCC unroll 8
      for (int i = 0; i < MB; ++i) {
        __m256i sum = part_sums(w, q.codes + (i * P) * kg + g * kGroup);
#pragma GCC unroll 2
        for (int p = 1; p < P; ++p)  // wraps mod 2^32; the corrected total fits (see above)
          sum = _mm256_add_epi32(_mm256_mullo_epi32(sum, ratio), part_sums(w, q.codes + (i * P + p) * kg + g * kGroup));
        sum = _mm256_sub_epi32(sum, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.corr + i * per_group + g * 8)));
        const __m256 sa = _mm256_loadu_ps(q.scale + i * per_group + g * 8);
        acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(sw, sa), acc[r][i]);
      }
    }
  }
}

// y rows [n0, n0 + R) for activation rows [0, MB). Not inlined: each instance is one tight loop
// (inlined into one lambda, the loop spilled to the stack and ran at half the speed).
template <int P, int R, int MB, bool kTableScales>
__attribute__((noinline)) void int8_kernel(const Int8Args& a, const QuantizedX& q, std::int64_t n0) {
  __m256 acc[R][MB];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_setzero_ps();
  const std::int64_t whole = a.k / kGroup, groups = a.kg / kGroup;  // groups read with plain loads, all groups
  int8_groups<P, R, MB, kTableScales, false>(a, q, n0, 0, whole, acc);
  if (whole < groups) int8_groups<P, R, MB, kTableScales, true>(a, q, n0, whole, groups, acc);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) a.y[i * a.n + n0 + r] = hsum(acc[r][i]) * kInt8Undo * a.ws2;
}

// Three parts never see more than kThreePartsMaxM tokens (int8_gemm).
template <int P, int R, bool kTableScales>
void int8_rows(const Int8Args& a, const QuantizedX& q, std::int64_t m, std::int64_t n0) {
  with_token_count<(P > 1 ? kThreePartsMaxM : 8)>(
      m, [&](auto mb) { int8_kernel<P, R, decltype(mb)::kValue, kTableScales>(a, q, n0); });
}

template <int P, int R>
void int8_rows(const Int8Args& a, const QuantizedX& q, std::int64_t m, std::int64_t n0) {
  if (has_special_scale(a.scales + n0 * (a.k / 16), R * (a.k / 16))) return int8_rows<P, R, true>(a, q, m, n0);
  int8_rows<P, R, false>(a, q, m, n0);
}

// m > 4 (prefill, batched experts): the decode kernel over tiles of 8 activation rows
// (for_each_int8_tile in nvfp4_isa_common.h). 8 tokens per tile (8 accumulators + 4 decoded
// vectors) measured 1.16x 4 and 1.03x 10 or 12, which spill (docs/perf.md, session 10).
constexpr std::int64_t kTokenBlockBytes = 128 * 1024;
constexpr std::int64_t kRowChunkBytes = 32 * 1024;
constexpr std::int64_t kTileTokens = 8;

template <int P>
void int8_tiles(const Int8Args& a, const QuantizedX& q, std::int64_t m, std::int64_t b, std::int64_t e) {
  const std::int64_t per_group = a.kg / 16;
  for_each_int8_tile(
      m, b, e, a.kg * P, a.scales, a.k, kTokenBlockBytes, kRowChunkBytes, kTileTokens,
      [&](std::int64_t i0, std::int64_t tokens, std::int64_t c0, std::int64_t c1, bool table) {
        const QuantizedX qi{q.codes + i0 * P * a.kg, q.scale + i0 * per_group, q.corr + i0 * per_group};
        Int8Args ai = a;
        ai.y = a.y + i0 * a.n;
        for (std::int64_t n0 = c0; n0 < c1; ++n0) {
          if (table) int8_rows<P, 1, true>(ai, qi, tokens, n0);
          else int8_rows<P, 1, false>(ai, qi, tokens, n0);
        }
      });
}

thread_local Int8Memo tl_int8_memo{nullptr, 0, 0, 0, false};  // see Int8Memo

template <int P>
void int8_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  if (P > 1 && m > kThreePartsMaxM) return nvfp4_gemm(x, m, w, y);  // three parts: no faster than fp32 panels
  const std::int64_t kg = (w.k + kGroup - 1) / kGroup * kGroup;
  const std::size_t code_bytes = static_cast<std::size_t>(m * P * kg), lanes = static_cast<std::size_t>(m * kg / 16);
  const std::size_t lanes_at = (code_bytes + 63) / 64 * 64, x_at = lanes_at + lanes * (sizeof(float) + sizeof(std::int32_t));
  auto* buf = static_cast<std::uint8_t*>(
      thread_scratch(kScratchInt8Activations, x_at + static_cast<std::size_t>(m * w.k) * sizeof(float)));
  auto* codes = reinterpret_cast<std::int8_t*>(buf);
  auto* scale = reinterpret_cast<float*>(buf + lanes_at);
  auto* corr = reinterpret_cast<std::int32_t*>(scale + lanes);
  const bool finite = refresh_int8_memo(tl_int8_memo, buf, x, m, w.k, P, buf + x_at,
                                        [&] { return quantize_x<P>(x, m, w.k, kg, codes, scale, corr); });
  if (!finite) return nvfp4_gemm(x, m, w, y);  // NaN/Inf: the exact path propagates them
  const QuantizedX q{codes, scale, corr};
  const Int8Args a{w.data, w.block_scales, w.k, kg, w.weight_scale_2, y, w.n, decode_tables().e4m3};
  parallel_for(w.n, int8_row_grain(w.n, m, kMaxDecodeM), [&a, &q, m](std::int64_t b, std::int64_t e) {
    prefetch_rows_start(a.data, a.scales, a.k, b, e, int8_prefetch_l1_bytes(P), int8_prefetch_l2_bytes(P));
    if constexpr (P == 1) {
      if (m > kMaxDecodeM) return int8_tiles<P>(a, q, m, b, e);
      for (std::int64_t n0 = b; n0 < e; ++n0) int8_rows<P, 1>(a, q, m, n0);  // one row at a time (above)
    } else {
      for_each_row_pass(m, b, e, kThreePartsFourRowsMaxM, kThreePartsTwoRowsMaxM,
                        [&](auto rows, std::int64_t n0) { int8_rows<P, decltype(rows)::kValue>(a, q, m, n0); });
    }
  });
}

}  // namespace

void nvfp4_gemm_int8(const float* x, std::int64_t m, const WeightMatrix& w, float* y) { int8_gemm<1>(x, m, w, y); }
void nvfp4_gemm_int8x3(const float* x, std::int64_t m, const WeightMatrix& w, float* y) { int8_gemm<3>(x, m, w, y); }

}  // namespace fp4serve::kernels::avx2
