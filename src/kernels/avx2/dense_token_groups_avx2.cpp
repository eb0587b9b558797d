// Dense (BF16, F16, F32, FP8) weight x fp32 GEMM for m >= 16 on AVX2: tokens in the lanes, as
// avx512/dense_token_groups_avx512.cpp (which says why) with 8 lanes. A group is 8 tokens, a
// panel 12 rows x 256 elements (12 accumulators of the 16 registers; AVX2 has no broadcast
// operand, so each weight is one broadcast load and one FMA). The row loops of
// dense_gemm_avx2.cpp convert each 8-weight vector (BF16: a widening and a shift) for at most
// four tokens; here once per panel for every group of the block. The loops are
// kernels/dense_groups_isa_common.h; here the vector operations.
// ISA translation unit: no standard-library templates here (see nvfp4_gemm_avx512.cpp).
#include <immintrin.h>

#include <cstdint>

#include "kernels/avx2/dense_loaders.h"
#include "kernels/avx2/dense_token_groups.h"
#include "kernels/dense_groups_isa_common.h"

namespace fp4serve::kernels::avx2 {

namespace {

struct Kernel {
  static constexpr std::int64_t kGroup = 8;       // tokens per group: one per fp32 lane
  static constexpr std::int64_t kPanelRows = 12;  // 12 accumulators of 16 registers
  static constexpr std::int64_t kPaddedMinTokens = 6;
  using Vec = __m256;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load(const float* p) { return _mm256_load_ps(p); }
  static void store(float* p, Vec v) { _mm256_store_ps(p, v); }
  static Vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }  // a load, no ALU
  static Vec set1(float f) { return _mm256_set1_ps(f); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
};

}  // namespace

bool dense_gemm_leading_groups(const float*& x, std::int64_t& m, const WeightMatrix& w, float*& y) {
  return dense_leading_groups<Kernel, Bf16, F16, F32, Fp8>(x, m, w, y);
}

}  // namespace fp4serve::kernels::avx2
