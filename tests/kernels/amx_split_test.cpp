// The AMX GEMMs with activations split into several bf16 parts (Precision::Activations16, what
// `auto` runs prefill and batches with): NVFP4 weights against hi + lo pairs, dense BF16 weights
// against three parts. Both far closer to the reference than one bf16, activation outliers
// included; three parts as close as the fp32 kernels.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/backend.h"
#include "kernels/isa_kernels.h"
#include "kernels/kernels.h"
#include "kernels/random_data.h"
#include "util/cpu_features.h"

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

TEST(AmxSplitActivations, ErrorIsFarBelowBf16Activations) {
  if (!has_amx()) GTEST_SKIP() << "no AMX-BF16 here";
  Rng rng(17);
  const std::int64_t n = 96, k = 1024, m = 48;
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
  const std::vector<float> x = activations_with_outliers(rng, m, k);
  std::vector<float> ref(static_cast<std::size_t>(m * n)), split(ref.size()), bf16(ref.size());
  reference_kernels().fp4_gemm->run(x.data(), m, w->w, ref.data(), Fp4Semantics::W4A16);
  amx::nvfp4_gemm_split(x.data(), m, w->w, split.data());
  amx::nvfp4_gemm(x.data(), m, w->w, bf16.data());
  const double split_err = output_error(split.data(), ref.data(), m, n);
  const double bf16_err = output_error(bf16.data(), ref.data(), m, n);
  EXPECT_LE(split_err, 2e-5);
  EXPECT_LE(split_err * 50, bf16_err) << "split " << split_err << ", bf16 " << bf16_err;
}

TEST(AmxSplitActivations, DenseThreePartsMatchFp32Kernels) {
  if (!has_amx()) GTEST_SKIP() << "no AMX-BF16 here";
  Rng rng(23);
  const std::int64_t n = 80, k = 1056, m = 40;  // k not a multiple of 64: a half k step at the end
  auto w = random_weight(rng, SchemeKind::Dense, DType::BF16, n, k);
  const std::vector<float> x = activations_with_outliers(rng, m, k);
  std::vector<float> ref(static_cast<std::size_t>(m * n)), three(ref.size()), bf16(ref.size());
  reference_kernels().dense_gemm->run(x.data(), m, w->w, ref.data(), Fp4Semantics::W4A16);
  amx::bf16_gemm_split3(x.data(), m, w->w, three.data());
  amx::bf16_gemm(x.data(), m, w->w, bf16.data());
  const double three_err = output_error(three.data(), ref.data(), m, n);
  const double bf16_err = output_error(bf16.data(), ref.data(), m, n);
  EXPECT_LE(three_err, 2e-6);  // backends_test's bound for the fp32 kernels
  EXPECT_LE(three_err * 50, bf16_err) << "three parts " << three_err << ", bf16 " << bf16_err;
}

}  // namespace
}  // namespace fp4serve::kernels
