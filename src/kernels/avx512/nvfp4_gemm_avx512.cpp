// NVFP4 x fp32 GEMM, AVX-512 (F/BW/VL). The decode hot path: every weight byte is read once,
// turned into fp32 in registers and used for up to four activation rows before the next byte.
//
// Decode of 128 elements (64 bytes, eight 16-element blocks) of one weight row:
//   v          = the 64 bytes as 16 int32 lanes; lane d holds elements 8d .. 8d+7, one nibble each
//   w_j        = permutexvar(v >> 4j, table)  (j = 0..7): lane d = element 8d + j. The permute
//                reads only the low 4 bits of each lane, so no masking is needed: one shift and
//                one permute per 16 weights.
//   t          = sum_j w_j * x_j               (x pre-arranged so x_j lane d = x[8d + j])
//   acc       += t * s                         (s lane d = E4M3 scale of block d / 2)
// Lanes never mix blocks, so the block scale is applied once per 8 products instead of scaling
// the table per block. E4M3 -> fp32 is a shift of the code into the exponent field and one
// multiply by 2^120 (exact, subnormal codes included); a chunk whose scales have the sign bit or
// the NaN code takes the table path instead. The previous loop (two scaled tables per 32
// elements, ≈ 10 port-0/5 uops per 32 weights) ran ≈ 1.6x slower (docs/perf.md).
// E2M1 x E4M3 products are exact in fp32; the per-tensor scale is applied once per output.
//
// ISA translation unit: no standard-library templates here (their instantiations would be
// compiled with AVX-512 and could be picked by the linker for generic code).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/isa_kernels.h"
#include "kernels/lut.h"
#include "kernels/nvfp4_isa_common.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx512 {

namespace {

constexpr std::int64_t kChunk = 128;  // weights per decode step (64 bytes, one cache line)
constexpr std::int64_t kRows = 4;     // weight rows decoded per step
constexpr std::int64_t kMaxMb = 4;    // activation rows each decoded weight is used for
// Software prefetch: to L1 4 KB of rows ahead and to L2 16 KB ahead. The L2 prefetch lets more
// misses be in flight than L1's fill buffers allow; measured best on 2 MiB pages among L1 only at
// 4 / 6 / 8 / 12 / 16 KB and L1 + L2 pairs (docs/perf.md, session 4).
constexpr std::int64_t kPrefetchL1Bytes = 4096;
constexpr std::int64_t kPrefetchL2Bytes = 16384;

// The activation layout the decode wants is a transpose of each 128-element chunk seen as a
// 16 x 8 matrix (row d = x[8d .. 8d+7]): xd[c + 16j + d] = x[c + 8d + j]. Done in registers in
// three rounds of two-source permutes; round s pairs registers that differ in bit s and sends
// the elements with bit s of j clear to the first, set to the second (a butterfly over the
// register index). The index vectors are worked out once by simulating the rounds.
struct TransposeIndices {
  alignas(64) std::int32_t idx[3][8][16];  // [round][destination register][lane] -> source lane 0..31
};

const TransposeIndices& transpose_indices() {
  static const TransposeIndices t = [] {
    TransposeIndices out{};
    int regs[8][16];
    for (int q = 0; q < 8; ++q)
      for (int l = 0; l < 16; ++l) regs[q][l] = 16 * q + l;
    for (int s = 0; s < 3; ++s) {
      int next[8][16];
      for (int a = 0; a < 8; ++a) {
        if (a & (1 << s)) continue;
        const int b = a | (1 << s);
        int fill[2] = {0, 0};
        // Ordered by source position, which keeps d ascending within each destination.
        for (int src = 0; src < 32; ++src) {
          const int e = src < 16 ? regs[a][src] : regs[b][src - 16];
          const int side = (e >> s) & 1;  // bit s of j = e % 8
          const int dst = side ? b : a;
          out.idx[s][dst][fill[side]] = src;
          next[dst][fill[side]++] = e;
        }
      }
      for (int q = 0; q < 8; ++q)
        for (int l = 0; l < 16; ++l) regs[q][l] = next[q][l];
    }
    return out;
  }();
  return t;
}

void prepare_x(const float* x, std::int64_t m, std::int64_t k, float* xd, std::int64_t kp) {
  const TransposeIndices& t = transpose_indices();
  for (std::int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    float* di = xd + i * kp;
    for (std::int64_t c = 0; c < kp; c += kChunk) {
      if (c + kChunk > k) {  // the zero-padded last chunk
        for (int j = 0; j < 8; ++j)
          for (int d = 0; d < 16; ++d) di[c + 16 * j + d] = c + 8 * d + j < k ? xi[c + 8 * d + j] : 0.0f;
        continue;
      }
      __m512 r[8];
      for (int q = 0; q < 8; ++q) r[q] = _mm512_loadu_ps(xi + c + 16 * q);
      for (int s = 0; s < 3; ++s) {
        __m512 n[8];
        for (int a = 0; a < 8; ++a) {
          if (a & (1 << s)) continue;
          const int b = a | (1 << s);
          n[a] = _mm512_permutex2var_ps(r[a], _mm512_load_si512(t.idx[s][a]), r[b]);
          n[b] = _mm512_permutex2var_ps(r[a], _mm512_load_si512(t.idx[s][b]), r[b]);
        }
        for (int q = 0; q < 8; ++q) r[q] = n[q];
      }
      for (int j = 0; j < 8; ++j) _mm512_storeu_ps(di + c + 16 * j, r[j]);
    }
  }
}

struct Ctx {
  const std::uint8_t* data;
  const std::uint8_t* scales;
  std::int64_t k, kp, n;
  float ws2;
  const float* xd;  // prepared activations, row stride kp
  float* y;         // row stride n
  std::int64_t m;
  const float* e4m3;
  const float* e2m1;
};

// Block scales travel as raw bits: code << 20 read as fp32 is the E4M3 value times 2^-120
// (exact, subnormal codes included), and the E2M1 table carries 2^64, so every product and
// partial sum is the true one times 2^-56, all exact powers of two, undone once per output.
// Per chunk that is one broadcast load, one byte shuffle and one shift for 16 lanes; the
// previous conversion (zero-extend, shift, multiply by 2^120) cost five port-0/5 uops.
// Codes with the sign bit or the NaN code 0x7F do not fit the shift: a row group that has one
// reads the table instead (true values times 2^-120).
constexpr float kTableScale = 0x1p64f;
constexpr float kScaleBitsScale = 0x1p-120f;
constexpr float kUndo = 0x1p56f;  // 1 / (kTableScale * kScaleBitsScale)

constexpr ScaleShuffle<16> kScaleShuffle;

// Lane d = bits of scale code d / 2, as above (codes without the sign bit, not NaN).
inline __m512 scale_bits(std::uint64_t codes, __m512i shuffle) {
  const __m512i b = _mm512_shuffle_epi8(_mm512_set1_epi64(static_cast<long long>(codes)), shuffle);
  return _mm512_castsi512_ps(_mm512_slli_epi32(b, 20));
}

inline __m512 scales_by_table(const std::uint8_t* codes, int count, const float* e4m3) {
  alignas(64) float s[16] = {};
  for (int d = 0; d < 2 * count; ++d) s[d] = e4m3[codes[d / 2]] * kScaleBitsScale;
  return _mm512_load_ps(s);
}

template <int R, int MB>
void kernel(const Ctx& c, std::int64_t n0, std::int64_t m0) {
  const __m512 lut = _mm512_mul_ps(_mm512_load_ps(c.e2m1), _mm512_set1_ps(kTableScale));
  const __m512i shuffle = _mm512_load_si512(kScaleShuffle.idx);
  const std::int64_t row_bytes = c.k / 2, row_scales = c.k / 16, full = c.k / kChunk;
  const std::int64_t ahead = (kPrefetchL1Bytes + row_bytes - 1) / row_bytes;  // rows
  const std::int64_t ahead_l2 = (kPrefetchL2Bytes + row_bytes - 1) / row_bytes;
  const float* xd = c.xd + m0 * c.kp;

  __m512 acc[R][MB];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm512_setzero_ps();

  const bool table = has_special_scale(c.scales + n0 * row_scales, R * row_scales);

  // One chunk of one row: `bytes` of codes (64 except in the tail), `nscales` block scales.
  auto step = [&](int r, std::int64_t ch, const __m512i v, int nscales) {
    const std::uint8_t* sp = c.scales + (n0 + r) * row_scales + ch * 8;
    __m512 s;
    if (table) {
      s = scales_by_table(sp, nscales, c.e4m3);
    } else {
      std::uint64_t codes = 0;
      std::memcpy(&codes, sp, static_cast<std::size_t>(nscales));  // 8 except in a tail chunk
      s = scale_bits(codes, shuffle);
    }
    __m512 t[MB];
    const float* xc = xd + ch * kChunk;
    const __m512 w0 = _mm512_permutexvar_ps(v, lut);
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) t[i] = _mm512_mul_ps(w0, _mm512_loadu_ps(xc + i * c.kp));
#pragma GCC unroll 8
    for (int j = 1; j < 8; ++j) {
      const __m512 w = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4 * j), lut);
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) t[i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(xc + i * c.kp + 16 * j), t[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm512_fmadd_ps(t[i], s, acc[r][i]);
  };

  for (std::int64_t ch = 0; ch < full; ++ch) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* wp = c.data + (n0 + r) * row_bytes + ch * 64;
      // Rows are short (a few hundred bytes to a few KB): the hardware prefetcher barely ramps
      // up within one, so fetch the same place some rows ahead ourselves.
      _mm_prefetch(reinterpret_cast<const char*>(wp + ahead * row_bytes), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(wp + ahead_l2 * row_bytes), _MM_HINT_T1);
      if ((ch & 7) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(c.scales + (n0 + r + ahead) * row_scales + ch * 8), _MM_HINT_T0);
      step(r, ch, _mm512_loadu_si512(wp), 8);
    }
  }
  if (const std::int64_t tail = c.k % kChunk; tail != 0) {  // 16..112 elements: masked, zero codes
    const std::int64_t ch = full;
    const __mmask64 mask = (1ull << (tail / 2)) - 1;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      step(r, ch, _mm512_maskz_loadu_epi8(mask, c.data + (n0 + r) * row_bytes + ch * 64), static_cast<int>(tail / 16));
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) c.y[(m0 + i) * c.n + n0 + r] = _mm512_reduce_add_ps(acc[r][i]) * kUndo * c.ws2;
}

template <int R>
void rows(const Ctx& c, std::int64_t n0) {
  std::int64_t m0 = 0;
  for (; m0 + kMaxMb <= c.m; m0 += kMaxMb) kernel<R, kMaxMb>(c, n0, m0);
  switch (c.m - m0) {
    case 1: kernel<R, 1>(c, n0, m0); break;
    case 2: kernel<R, 2>(c, n0, m0); break;
    case 3: kernel<R, 3>(c, n0, m0); break;
    default: break;
  }
}

}  // namespace

void nvfp4_gemm(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  const std::int64_t kp = (w.k + kChunk - 1) / kChunk * kChunk;
  float* xd = static_cast<float*>(thread_scratch(kScratchGemmActivations, static_cast<std::size_t>(m * kp) * sizeof(float)));
  prepare_x(x, m, w.k, xd, kp);
  const DecodeTables& t = decode_tables();
  const Ctx c{w.data, w.block_scales, w.k, kp, w.n, w.weight_scale_2, xd, y, m, t.e4m3, t.e2m1};
  parallel_for(w.n, 16, [&c](std::int64_t b, std::int64_t e) {
    prefetch_rows_start(c.data, c.scales, c.k, b, e, kPrefetchL1Bytes, kPrefetchL2Bytes);
    std::int64_t n0 = b;
    for (; n0 + kRows <= e; n0 += kRows) rows<kRows>(c, n0);
    for (; n0 < e; ++n0) rows<1>(c, n0);
  });
}

}  // namespace fp4serve::kernels::avx512
