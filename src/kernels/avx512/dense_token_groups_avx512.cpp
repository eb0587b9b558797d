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
// k / 16 terms). The loops are kernels/dense_groups_isa_common.h; here the vector operations.
// ISA translation unit: no standard-library templates here (see nvfp4_gemm_avx512.cpp).
#include <immintrin.h>

#include <cstdint>

#include "kernels/avx512/dense_loaders.h"
#include "kernels/avx512/dense_token_groups.h"
#include "kernels/dense_groups_isa_common.h"

namespace fp4serve::kernels::avx512 {

namespace {

struct Kernel {
  static constexpr std::int64_t kGroup = 16;      // tokens per group: one per fp32 lane
  static constexpr std::int64_t kPanelRows = 16;  // 16 accumulators of 32 registers
  static constexpr std::int64_t kPaddedMinTokens = 12;
  using Vec = __m512;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_load_ps(p); }
  static void store(float* p, Vec v) { _mm512_store_ps(p, v); }
  static Vec broadcast(const float* p) { return _mm512_set1_ps(*p); }  // folds into the FMA's {1to16} operand
  static Vec set1(float f) { return _mm512_set1_ps(f); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
};

}  // namespace

bool dense_gemm_leading_groups(const float*& x, std::int64_t& m, const WeightMatrix& w, float*& y) {
  return dense_leading_groups<Kernel, Bf16, F16, F32, Fp8>(x, m, w, y);
}

}  // namespace fp4serve::kernels::avx512
