// NVFP4 x fp32 GEMM, AVX-512 (F/BW/VL). The decode hot path: every weight byte is read once,
// turned into fp32 in registers and used for up to four activation rows before the next byte.
//
// Decode of 32 elements (16 bytes, two 16-element blocks) into two zmm:
//   v      = the 16 bytes zero-extended to 16 int32 lanes (lane j = byte j = elements 2j, 2j+1)
//   ta, tb = the E2M1 table times block scale A (lanes 0-7) and B (lanes 8-15)
//   w_lo   = permutex2var(ta, (v & 15) | sel, tb)   -> even elements, already scaled
//   w_hi   = permutex2var(ta, (v >> 4) | sel, tb)   -> odd elements
// so the activations are pre-split into even/odd halves per 32-element chunk (prepare_x).
// E2M1 x E4M3 products are exact in fp32; the per-tensor scale is applied once per output.
//
// ISA translation unit: no standard-library templates here (their instantiations would be
// compiled with AVX-512 and could be picked by the linker for generic code).
#include <immintrin.h>

#include <cstdint>

#include "kernels/isa_kernels.h"
#include "kernels/lut.h"
#include "kernels/scratch.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels::avx512 {

namespace {

constexpr std::int64_t kRows = 4;   // weight rows decoded per step
constexpr std::int64_t kMaxMb = 4;  // activation rows each decoded weight is used for
constexpr std::int64_t kPrefetchBytes = 4096;  // software prefetch distance (measured best: 4 KB)

// xd[i][32c + j] = x[i][32c + 2j] (j < 16), xd[i][32c + 16 + j] = x[i][32c + 2j + 1];
// a trailing half chunk (k % 32 == 16) is zero-padded.
void prepare_x(const float* x, std::int64_t m, std::int64_t k, float* xd, std::int64_t kp) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (std::int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    float* di = xd + i * kp;
    for (std::int64_t c = 0; c < kp; c += 32) {
      const __m512 a = _mm512_loadu_ps(xi + c);
      const __m512 b = c + 32 <= k ? _mm512_loadu_ps(xi + c + 16) : _mm512_setzero_ps();
      _mm512_storeu_ps(di + c, _mm512_permutex2var_ps(a, even, b));
      _mm512_storeu_ps(di + c + 16, _mm512_permutex2var_ps(a, odd, b));
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

template <int R, int MB>
void kernel(const Ctx& c, std::int64_t n0, std::int64_t m0) {
  const __m512 lut = _mm512_load_ps(c.e2m1);
  const __m512i sel = _mm512_set_epi32(16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i low4 = _mm512_set1_epi32(15);
  const std::int64_t row_bytes = c.k / 2, row_scales = c.k / 16, full = c.k / 32;
  const std::int64_t ahead = (kPrefetchBytes + row_bytes - 1) / row_bytes;  // rows
  const float* xd = c.xd + m0 * c.kp;

  __m512 acc[R][MB];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm512_setzero_ps();

  for (std::int64_t ch = 0; ch < full; ++ch) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* wp = c.data + (n0 + r) * row_bytes + ch * 16;
      const std::uint8_t* sp = c.scales + (n0 + r) * row_scales + ch * 2;
      // Rows are short (a few hundred bytes to a few KB): the hardware prefetcher barely ramps
      // up within one, so fetch the same place ~4 KB of rows ahead ourselves.
      if ((ch & 3) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(wp + ahead * row_bytes), _MM_HINT_T0);
        if ((ch & 31) == 0) _mm_prefetch(reinterpret_cast<const char*>(sp + ahead * row_scales), _MM_HINT_T0);
      }
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wp)));
      const __m512 ta = _mm512_mul_ps(lut, _mm512_set1_ps(c.e4m3[sp[0]]));
      const __m512 tb = _mm512_mul_ps(lut, _mm512_set1_ps(c.e4m3[sp[1]]));
      const __m512i ilo = _mm512_ternarylogic_epi32(v, low4, sel, 0xEA);  // (v & 15) | sel
      const __m512i ihi = _mm512_or_si512(_mm512_srli_epi32(v, 4), sel);
      const __m512 wlo = _mm512_permutex2var_ps(ta, ilo, tb);
      const __m512 whi = _mm512_permutex2var_ps(ta, ihi, tb);
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) {
        const float* xp = xd + i * c.kp + ch * 32;
        acc[r][i] = _mm512_fmadd_ps(wlo, _mm512_loadu_ps(xp), acc[r][i]);
        acc[r][i] = _mm512_fmadd_ps(whi, _mm512_loadu_ps(xp + 16), acc[r][i]);
      }
    }
  }
  if (c.k % 32 != 0) {  // one last 16-element block: bytes 8..15 and table B stay zero
    const std::int64_t ch = full;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* wp = c.data + (n0 + r) * row_bytes + ch * 16;
      const std::uint8_t* sp = c.scales + (n0 + r) * row_scales + ch * 2;
      const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(0x00FF, wp));
      const __m512 ta = _mm512_mul_ps(lut, _mm512_set1_ps(c.e4m3[sp[0]]));
      const __m512 tb = _mm512_setzero_ps();
      const __m512i ilo = _mm512_ternarylogic_epi32(v, low4, sel, 0xEA);
      const __m512i ihi = _mm512_or_si512(_mm512_srli_epi32(v, 4), sel);
      const __m512 wlo = _mm512_permutex2var_ps(ta, ilo, tb);
      const __m512 whi = _mm512_permutex2var_ps(ta, ihi, tb);
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) {
        const float* xp = xd + i * c.kp + ch * 32;
        acc[r][i] = _mm512_fmadd_ps(wlo, _mm512_loadu_ps(xp), acc[r][i]);
        acc[r][i] = _mm512_fmadd_ps(whi, _mm512_loadu_ps(xp + 16), acc[r][i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) c.y[(m0 + i) * c.n + n0 + r] = _mm512_reduce_add_ps(acc[r][i]) * c.ws2;
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
  const std::int64_t kp = (w.k + 31) / 32 * 32;
  float* xd = static_cast<float*>(thread_scratch(kScratchGemmActivations, static_cast<std::size_t>(m * kp) * sizeof(float)));
  prepare_x(x, m, w.k, xd, kp);
  const DecodeTables& t = decode_tables();
  const Ctx c{w.data, w.block_scales, w.k, kp, w.n, w.weight_scale_2, xd, y, m, t.e4m3, t.e2m1};
  parallel_for(w.n, 16, [&c](std::int64_t b, std::int64_t e) {
    std::int64_t n0 = b;
    for (; n0 + kRows <= e; n0 += kRows) rows<kRows>(c, n0);
    for (; n0 < e; ++n0) rows<1>(c, n0);
  });
}

}  // namespace fp4serve::kernels::avx512
