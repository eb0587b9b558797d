#pragma once
// The int8 activation grid both VNNI int8 GEMMs quantize to (nvfp4_gemm_vnni.cpp: rows in the
// lanes, for decode and the 8-token tiles; nvfp4_gemm_vnni_groups.cpp: tokens in the lanes, for
// m >= 16), and amx-int8's tiles round to (amx/amx_gemm.cpp), and the scale convention the VNNI
// kernels share. A token's result must not depend on which of them runs it, so they round with
// the same code. Internal linkage only: included by ISA translation units (see
// src/kernels/check_isa_objects.cmake).
#include <immintrin.h>

#include <cstdint>

#include "numerics/int8_grid_step.h"

namespace fp4serve::kernels::vnni {
namespace {

// Scales: E4M3 code << 20 read as fp32 is the scale times 2^-120; the activation scale carries
// 2^63 (0.5 for the doubled E2M1, times 2^64) so that their product is a normal float; the output
// is multiplied back by 2^56 once.
constexpr float kActivationScale = 0x1p63f;  // 0.5 * 2^64
constexpr float kScaleBitsScale = 0x1p-120f;
constexpr float kUndo = 0x1p56f;  // 1 / (2^64 * 2^-120)

// 2 * E2M1 of a 4-bit code: the integer weight both GEMMs multiply (the 0.5 is in the activation
// scale above). vpermb looks it up from 64-byte tables that repeat it every 16 bytes.
constexpr int doubled_e2m1(int code) {
  constexpr int mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return (code & 8) == 0 ? mag[code & 7] : -mag[code & 7];
}

// A 16-element block on its int8 grid: x / step with step = int8_grid_step(block max) (about
// max / 127, rounded up to a bf16 value), before rounding. The int8 GEMMs and amx-int8's tile
// packing share it, so the tiles see exactly the values the int8 kernels quantize, and two bf16
// parts carry each of them exactly.
struct GridBlock {
  __m512 scaled;
  float step;
};

// False when the block holds NaN or Inf (NaN compares false, Inf is above the largest finite:
// either sets a mask bit).
inline bool to_int8_grid(__m512 v, GridBlock& g) {
  const __m512 a = _mm512_and_ps(v, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF)));
  if (_mm512_cmp_ps_mask(a, _mm512_set1_ps(3.4028235e38f), _CMP_NLE_UQ) != 0) return false;
  g.step = numerics::int8_grid_step(_mm512_reduce_max_ps(a));
  g.scaled = _mm512_mul_ps(v, _mm512_set1_ps(numerics::int8_grid_inverse(g.step)));
  return true;
}

// The decode loop's lane order (nvfp4_gemm_vnni.cpp): lane 2q holds block q of a step, lane
// 2q + 1 block 8 + q, as two dword blends of the step's two 64-byte loads leave them.
constexpr int paired_block(int lane) { return lane % 2 == 0 ? lane / 2 : 8 + lane / 2; }

// vpermb indices that put scale byte paired_block(L) into byte 0 of dword L (the mask
// kDwordLowBytes zeroes the other bytes).
struct PairedScaleIndex {
  alignas(64) std::uint8_t idx[64];
  constexpr PairedScaleIndex() : idx{} {
    for (int l = 0; l < 16; ++l) idx[4 * l] = static_cast<std::uint8_t>(paired_block(l));
  }
};
constexpr PairedScaleIndex kPairedScaleIndex;
constexpr __mmask64 kDwordLowBytes = 0x1111111111111111ull;

// Lane L = the scale of block L of the step (kPaired: of block paired_block(L)) times 2^-120,
// from `count` (1..16) codes at p; lanes of missing blocks get +0. One widening either way: a
// vpmovzxbd, or for the paired order a masked vpermb.
template <bool kPaired>
inline __m512 step_scales(const std::uint8_t* p, int count, bool table, const float* e4m3) {
  if (table) {
    alignas(64) float s[16] = {};
    for (int l = 0; l < 16; ++l) {
      const int b = kPaired ? paired_block(l) : l;
      if (b < count) s[l] = e4m3[p[b]] * kScaleBitsScale;
    }
    return _mm512_load_ps(s);
  }
  const __m128i codes = count == 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                                    : _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << count) - 1), p);  // missing: +0
  const __m512i wide = kPaired ? _mm512_maskz_permutexvar_epi8(kDwordLowBytes, _mm512_load_si512(kPairedScaleIndex.idx),
                                                               _mm512_castsi128_si512(codes))
                               : _mm512_cvtepu8_epi32(codes);
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 20));
}

// Round to nearest even, as lrintf.
inline __m512 round_even(__m512 t) { return _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

}  // namespace
}  // namespace fp4serve::kernels::vnni
