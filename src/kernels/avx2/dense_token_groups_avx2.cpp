// Dense (BF16, F16, F32, FP8) weight x fp32 GEMM for m >= 16 on AVX2: tokens in the lanes, as
// avx512/dense_token_groups_avx512.cpp (which says why) with 8 lanes. A group is 8 tokens, a
// panel 12 rows x 256 elements (12 accumulators of the 16 registers; AVX2 has no broadcast
// operand, so each weight is one broadcast load and one FMA). The row loops of
// dense_gemm_avx2.cpp convert each 8-weight vector (BF16: a widening and a shift) for at most
// four tokens; here once per panel for every group of the block. The blocking, prefetch and
// output are kernels/dense_groups_isa_common.h.
// ISA translation unit: no standard-library templates here (see nvfp4_gemm_avx512.cpp).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/avx2/dense_loaders.h"
#include "kernels/avx2/dense_token_groups.h"
#include "kernels/dense_groups_isa_common.h"
#include "kernels/isa_kernels.h"
#include "kernels/token_groups.h"

namespace fp4serve::kernels::avx2 {

namespace {

// A last partial group with this many tokens runs padded; fewer go to the row loops.
constexpr std::int64_t kPaddedMinTokens = 6;

struct Kernel {
  static constexpr std::int64_t kGroup = 8;       // tokens per group: one per fp32 lane
  static constexpr std::int64_t kPanelRows = 12;  // rows per panel: 12 accumulators
  static constexpr std::int64_t kChunk = kDenseGroupChunk;
  using Vec = __m256;

  template <class L>
  static void convert_panel(const DenseGroupsCtx& c, std::int64_t r0, std::int64_t rows, std::int64_t e0, std::int64_t len,
                            float* panel) {
    const std::int64_t row_bytes = c.k * L::bytes;
    for (std::int64_t r = 0; r < kPanelRows; ++r) {
      float* dst = panel + r * kChunk;
      if (r >= rows) {
        for (std::int64_t j = 0; j < len; j += 8) _mm256_store_ps(dst + j, _mm256_setzero_ps());
        continue;
      }
      const std::uint8_t* src = c.data + (r0 + r) * row_bytes + e0 * L::bytes;
      std::int64_t j = 0;
      for (; j + 8 <= len; j += 8) _mm256_store_ps(dst + j, L::load(src + j * L::bytes));
      if (j < len) {
        alignas(32) std::uint8_t buf[32] = {};
        std::memcpy(buf, src + j * L::bytes, static_cast<std::size_t>((len - j) * L::bytes));
        _mm256_store_ps(dst + j, L::load(buf));
      }
    }
  }

  // Per element: one vector of the group's activations, 12 broadcast loads and 12 FMAs.
  __attribute__((noinline)) static void panel_times_group(const float* panel, const float* xt, std::int64_t len, Vec* total,
                                                          bool fresh, const NextPanel& next) {
    __m256 acc[kPanelRows];
#pragma GCC unroll 16
    for (int r = 0; r < kPanelRows; ++r) acc[r] = _mm256_setzero_ps();
    PanelPrefetch prefetch(next, len);
    for (std::int64_t j = 0; j < len; ++j) {
      prefetch.step();
      const __m256 v = _mm256_load_ps(xt + j * kGroup);
#pragma GCC unroll 16
      for (int r = 0; r < kPanelRows; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(panel + r * kChunk + j), v, acc[r]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < kPanelRows; ++r) total[r] = fresh ? acc[r] : _mm256_add_ps(total[r], acc[r]);
  }

  static void store_scaled(const Vec& v, float scale, float* lanes) { _mm256_store_ps(lanes, _mm256_mul_ps(v, _mm256_set1_ps(scale))); }
};

}  // namespace

// From 16 tokens, as the AVX-512 groups (measured at 16 and 64 tokens only).
std::int64_t dense_token_group_tokens(std::int64_t m) {
  return m < 2 * Kernel::kGroup ? 0 : tokens_in_groups(m, Kernel::kGroup, kPaddedMinTokens);
}

void dense_gemm_token_groups(const float* x, std::int64_t m, const WeightMatrix& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  if (w.kind == SchemeKind::FP8) return dense_token_groups<Kernel, Fp8>(x, m, w, y, w.weight_scale_2);
  switch (w.dtype) {
    case DType::BF16: return dense_token_groups<Kernel, Bf16>(x, m, w, y, 1.0f);
    case DType::F16: return dense_token_groups<Kernel, F16>(x, m, w, y, 1.0f);
    case DType::F32: return dense_token_groups<Kernel, F32>(x, m, w, y, 1.0f);
    default: isa_unsupported("avx2 dense token groups: weight dtype not supported");
  }
}

}  // namespace fp4serve::kernels::avx2
