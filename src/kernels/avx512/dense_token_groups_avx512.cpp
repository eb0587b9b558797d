// Dense (BF16, F16, F32, FP8) weight x fp32 GEMM for m >= 16 on AVX-512: tokens in the lanes.
//
// Why a second dense loop: the row loops of dense_gemm_avx512.cpp keep a row's elements in the
// lanes, so each converted weight vector serves four tokens, every (row, token) ends in a
// horizontal sum, and at 16 tokens the activations (128 KB at k = 2048) come from L2 once per
// 4-row tile. They ran at ~55 % of two cores' FMA peak (kernels_bench bf16_m16), which made the
// BF16 lm_head compute-bound in a 16-sequence decode step: 2 * 16 * 311 M = 10 GFLOP per step
// for 0.62 GB of weights.
//
// Here 16 rows x 256 elements of the weights are converted to fp32 once into a panel in L1, and
// each weight is broadcast against 16 tokens' activations (one vector of the transposed group):
// lane t of accumulator r sums token t's products with row r. Per element 16 FMAs, each with a
// broadcast operand from the panel, and one activation load; no horizontal sums. The 16
// accumulators sum one panel's 256 elements; panels add up in memory, so no fp32 sum runs
// longer than 256 terms before it is added to the total (the row loops' sums were 16 lanes of
// k / 16 terms). The blocking, prefetch and output are kernels/dense_groups_isa_common.h.
// ISA translation unit: no standard-library templates here (see nvfp4_gemm_avx512.cpp).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/avx512/dense_loaders.h"
#include "kernels/avx512/dense_token_groups.h"
#include "kernels/dense_groups_isa_common.h"
#include "kernels/isa_kernels.h"
#include "kernels/token_groups.h"

namespace fp4serve::kernels::avx512 {

namespace {

// A last partial group with this many tokens runs padded; fewer go to the row loops.
constexpr std::int64_t kPaddedMinTokens = 12;

struct Kernel {
  static constexpr std::int64_t kGroup = 16;      // tokens per group: one per fp32 lane
  static constexpr std::int64_t kPanelRows = 16;  // rows per panel: 16 accumulators
  static constexpr std::int64_t kChunk = kDenseGroupChunk;
  using Vec = __m512;

  template <class L>
  static void convert_panel(const DenseGroupsCtx& c, std::int64_t r0, std::int64_t rows, std::int64_t e0, std::int64_t len,
                            float* panel) {
    const std::int64_t row_bytes = c.k * L::bytes;
    for (std::int64_t r = 0; r < kPanelRows; ++r) {
      float* dst = panel + r * kChunk;
      if (r >= rows) {
        for (std::int64_t j = 0; j < len; j += 16) _mm512_store_ps(dst + j, _mm512_setzero_ps());
        continue;
      }
      const std::uint8_t* src = c.data + (r0 + r) * row_bytes + e0 * L::bytes;
      std::int64_t j = 0;
      for (; j + 16 <= len; j += 16) _mm512_store_ps(dst + j, L::load(src + j * L::bytes));
      if (j < len) {
        alignas(64) std::uint8_t buf[64] = {};
        std::memcpy(buf, src + j * L::bytes, static_cast<std::size_t>((len - j) * L::bytes));
        _mm512_store_ps(dst + j, L::load(buf));
      }
    }
  }

  // Per element: one vector of the group's activations, 16 FMAs with the panel's weights as
  // broadcast operands.
  __attribute__((noinline)) static void panel_times_group(const float* panel, const float* xt, std::int64_t len, Vec* total,
                                                          bool fresh, const NextPanel& next) {
    __m512 acc[kPanelRows];
#pragma GCC unroll 16
    for (int r = 0; r < kPanelRows; ++r) acc[r] = _mm512_setzero_ps();
    PanelPrefetch prefetch(next, len);
    for (std::int64_t j = 0; j < len; ++j) {
      prefetch.step();
      const __m512 v = _mm512_load_ps(xt + j * kGroup);
#pragma GCC unroll 16
      for (int r = 0; r < kPanelRows; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(panel[r * kChunk + j]), v, acc[r]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < kPanelRows; ++r) total[r] = fresh ? acc[r] : _mm512_add_ps(total[r], acc[r]);
  }

  static void store_scaled(const Vec& v, float scale, float* lanes) { _mm512_store_ps(lanes, _mm512_mul_ps(v, _mm512_set1_ps(scale))); }
};

}  // namespace

std::int64_t dense_token_group_tokens(std::int64_t m) { return tokens_in_groups(m, Kernel::kGroup, kPaddedMinTokens); }

void dense_gemm_token_groups(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  if (w.kind == SchemeKind::FP8) return dense_token_groups<Kernel, Fp8>(x, m, w, y, w.weight_scale_2);
  switch (w.dtype) {
    case DType::BF16: return dense_token_groups<Kernel, Bf16>(x, m, w, y, 1.0f);
    case DType::F16: return dense_token_groups<Kernel, F16>(x, m, w, y, 1.0f);
    case DType::F32: return dense_token_groups<Kernel, F32>(x, m, w, y, 1.0f);
    default: isa_unsupported("avx512 dense token groups: weight dtype not supported");
  }
}

}  // namespace fp4serve::kernels::avx512
