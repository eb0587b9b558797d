// The AMX GEMMs with activations split into several bf16 parts (Precision::Activations16, what
// `auto` runs prefill and batches with): NVFP4 weights against hi + lo pairs, dense BF16 weights
// against three parts. Both far closer to the reference than one bf16, activation outliers
// included; three parts as close as the fp32 kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/backend.h"
#include "kernels/isa_kernels.h"
#include "kernels/kernels.h"
#include "kernels/random_data.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace fp4serve::kernels {
namespace {

// The needs the `amx` backend declares, so the test runs exactly where the registry would.
bool has_amx() {
  const Backend* b = find_backend("amx");
  return b != nullptr && cpu_features().missing(b->needs).empty();
}

// Activations with a few huge outliers, as residual streams have.
std::vector<float> activations_with_outliers(Rng& rng, std::int64_t m, std::int64_t k) {
  std::vector<float> x = random_activations(rng, m, k);
  for (std::int64_t i = 0; i < m; ++i) {
    x[static_cast<std::size_t>(i * k + 5)] = 300.0f;
    x[static_cast<std::size_t>(i * k + k / 2 + 3)] = -1200.0f;
  }
  return x;
}

using GemmFn = void (*)(const float*, std::int64_t, const WeightMatrix&, float*);

// Output error of `gemm` against the reference kernel of w's family.
double error_against_reference(GemmFn gemm, const WeightMatrix& w, const std::vector<float>& x, std::int64_t m) {
  std::vector<float> ref(static_cast<std::size_t>(m * w.n)), got(ref.size());
  const GemmKernel* reference = w.kind == SchemeKind::NVFP4 ? reference_kernels().fp4_gemm : reference_kernels().dense_gemm;
  reference->run(x.data(), m, w, ref.data(), Fp4Semantics::W4A16);
  gemm(x.data(), m, w, got.data());
  return output_error(got.data(), ref.data(), m, w.n);
}

TEST(AmxSplitActivations, ErrorIsFarBelowBf16Activations) {
  if (!has_amx()) GTEST_SKIP() << "no AMX-BF16 here";
  Rng rng(17);
  const std::int64_t n = 96, k = 1024, m = 48;
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
  const std::vector<float> x = activations_with_outliers(rng, m, k);
  const double split_err = error_against_reference(amx::nvfp4_gemm_split, w->w, x, m);
  const double bf16_err = error_against_reference(amx::nvfp4_gemm, w->w, x, m);
  EXPECT_LE(split_err, 2e-5);
  EXPECT_LE(split_err * 50, bf16_err) << "split " << split_err << ", bf16 " << bf16_err;
}

TEST(AmxSplitActivations, DenseThreePartsMatchFp32Kernels) {
  if (!has_amx()) GTEST_SKIP() << "no AMX-BF16 here";
  Rng rng(23);
  const std::int64_t n = 80, k = 1056, m = 40;  // k not a multiple of 64: a half k step at the end
  auto w = random_weight(rng, SchemeKind::Dense, DType::BF16, n, k);
  const std::vector<float> x = activations_with_outliers(rng, m, k);
  const double three_err = error_against_reference(amx::bf16_gemm_split3, w->w, x, m);
  const double bf16_err = error_against_reference(amx::bf16_gemm, w->w, x, m);
  EXPECT_LE(three_err, 2e-6);  // backends_test's bound for the fp32 kernels
  EXPECT_LE(three_err * 50, bf16_err) << "three parts " << three_err << ", bf16 " << bf16_err;
}

// Dense BF16 rows load as tiles straight from the weights when k is a multiple of 32 (k = 512),
// through the padded scratch copy otherwise (k = 528); a last partial 32-row block (n = 70) is
// copied either way. 16 tokens and fewer fill one B tile of the pair, whose other half is
// skipped (batched decode's lm_head); 17, 40 and 48 tokens end in a half-filled or empty one. Up
// to 32 tokens a block has one pass, which prefetches its rows ahead (compute_block).
TEST(AmxSplitActivations, DenseTilesMatchWithAndWithoutTheScratchCopy) {
  if (!has_amx()) GTEST_SKIP() << "no AMX-BF16 here";
  Rng rng(31);
  for (std::int64_t k : {512, 528}) {
    auto w = random_weight(rng, SchemeKind::Dense, DType::BF16, 70, k);
    for (std::int64_t m : {1, 16, 17, 40, 48}) {
      const std::vector<float> x = activations_with_outliers(rng, m, k);
      EXPECT_LE(error_against_reference(amx::bf16_gemm_split3, w->w, x, m), 2e-6) << "k=" << k << " m=" << m;
      EXPECT_LE(error_against_reference(amx::bf16_gemm, w->w, x, m), 1e-2) << "k=" << k << " m=" << m;
    }
  }
}

// Large m runs in token chunks whose packed activations fit L2 (about 1 MB: at k = 4096, 64
// tokens with two parts, 32 with three): 70 tokens span two and three chunks, the last partial,
// and every chunk's outputs must land in its own rows.
TEST(AmxSplitActivations, TilesMatchAcrossTokenChunks) {
  if (!has_amx()) GTEST_SKIP() << "no AMX-BF16 here";
  Rng rng(37);
  const std::int64_t n = 40, k = 4096, m = 70;
  auto fp4 = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
  auto dense = random_weight(rng, SchemeKind::Dense, DType::BF16, n, k);
  const std::vector<float> x = activations_with_outliers(rng, m, k);
  EXPECT_LE(error_against_reference(amx::nvfp4_gemm_split, fp4->w, x, m), 2e-5);
  EXPECT_LE(error_against_reference(amx::bf16_gemm_split3, dense->w, x, m), 2e-6);
}

// From 9 tokens NVFP4 runs on the 16-token tiles, the first B tile partly filled below 16. A
// token's column there sums in the same order whatever else shares the call, so 9..16 tokens get
// the same bits as the same tokens' rows of a 17-token call (two B tiles); the fp32 GEMV, which
// had 9..15 before, sums in another order. Rows past a 32-row block and a k tail included.
TEST(AmxSplitActivations, NineToSixteenTokensRunOnTheTiles) {
  if (!has_amx()) GTEST_SKIP() << "no AMX-BF16 here";
  Rng rng(53);
  const std::int64_t n = 70, k = 720, all = 17;
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
  const std::vector<float> x = activations_with_outliers(rng, all, k);
  std::vector<float> wide(static_cast<std::size_t>(all * n));
  amx::nvfp4_gemm_split(x.data(), all, w->w, wide.data());
  for (std::int64_t m = 9; m <= 16; ++m) {
    std::vector<float> got(static_cast<std::size_t>(m * n));
    amx::nvfp4_gemm_split(x.data(), m, w->w, got.data());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), wide.begin())) << "m=" << m;
    const std::vector<float> xm(x.begin(), x.begin() + m * k);
    EXPECT_LE(error_against_reference(amx::nvfp4_gemm_split, w->w, xm, m), 2e-5) << "m=" << m;
  }
}

// The narrow tiles (hi and lo as two columns per token) at every m they can take, directly: the
// backend sends only 5..8 here, so Backends.* alone would not notice if 1..4 broke or if the
// dispatch stopped reaching them. Rows past a 32-row block and a k tail (k % 128 = 80) included.
TEST(AmxSplitActivations, NarrowTilesMatchTheReferenceAtEveryM) {
  if (!has_amx()) GTEST_SKIP() << "no AMX-BF16 here";
  Rng rng(29);
  const std::int64_t n = 70, k = 720;
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
  for (std::int64_t m = 1; m <= 8; ++m) {
    const std::vector<float> x = activations_with_outliers(rng, m, k);
    EXPECT_LE(error_against_reference(amx::nvfp4_gemm_narrow, w->w, x, m), 2e-5) << "m=" << m;
  }
  const std::vector<float> x = activations_with_outliers(rng, 9, k);
  EXPECT_THROW(error_against_reference(amx::nvfp4_gemm_narrow, w->w, x, 9), Error);
}

}  // namespace
}  // namespace fp4serve::kernels
