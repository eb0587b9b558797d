// avx2-int8: activations quantized to int8 per 16-element block, integer dot products. Its
// only rounding is that quantization, so against the reference fed the *quantized* activations
// it must agree to fp32 accuracy; against the unquantized ones it lands within its class's
// tolerance. Rows with NaN/Inf take the exact path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "kernels/random_data.h"
#include "kernels/validation.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {
namespace {

const Backend* int8_backend() {
  for (const Backend& b : compiled_backends())
    if (b.name == "avx2-int8" && cpu_features().missing(b.needs).empty()) return &b;
  return nullptr;
}

// x as the kernel sees it: per 16-element block, q = round(x * 127 / max|x|), back to q * max / 127.
std::vector<float> int8_model(const std::vector<float>& x, std::int64_t m, std::int64_t k) {
  std::vector<float> out(x.size());
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t b = 0; b < k; b += 16) {
      float mx = 0.0f;
      for (std::int64_t e = b; e < b + 16 && e < k; ++e) mx = std::max(mx, std::fabs(x[i * k + e]));
      const float inv = mx > 0.0f ? 127.0f / mx : 0.0f;
      for (std::int64_t e = b; e < b + 16 && e < k; ++e)
        out[i * k + e] = static_cast<float>(std::lrintf(x[i * k + e] * inv)) * (mx / 127.0f);
    }
  return out;
}

TEST(Int8Activations, EqualsTheReferenceOnQuantizedActivations) {
  const Backend* b = int8_backend();
  if (b == nullptr) GTEST_SKIP() << "no AVX2 here";
  EXPECT_EQ(b->fp4.precision, Precision::Int8Activations);
  const GemmKernel* ref = reference_kernels().fp4_gemm;
  for (std::int64_t k : {16, 48, 64, 192, 272, 2048})
    for (std::int64_t m : {1, 2, 3, 4}) {
      Rng rng(k * 31 + m);
      auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 37, k);  // special (negative, NaN) scales included
      auto x = random_activations(rng, m, k);
      x[0] = 40.0f;    // an outlier: its block's other values get coarse steps
      x[k - 1] = 0.0f;
      const std::vector<float> xq = int8_model(x, m, k);
      std::vector<float> want(static_cast<std::size_t>(m * 37)), got(want.size(), NAN), exact(want.size());
      ref->run(xq.data(), m, w->w, want.data(), Fp4Semantics::W4A16);
      b->fp4.gemm->run(x.data(), m, w->w, got.data(), Fp4Semantics::W4A16);
      EXPECT_LE(output_error(got.data(), want.data(), m, 37), 2e-6) << "k=" << k << " m=" << m;
      // Against the unquantized activations: within the class's tolerance, and not exact.
      ref->run(x.data(), m, w->w, exact.data(), Fp4Semantics::W4A16);
      const double err = output_error(got.data(), exact.data(), m, 37);
      EXPECT_LE(err, validation_tolerance(Precision::Int8Activations)) << "k=" << k << " m=" << m;
    }
}

TEST(Int8Activations, NonFiniteActivationsTakeTheExactPath) {
  const Backend* b = int8_backend();
  if (b == nullptr) GTEST_SKIP() << "no AVX2 here";
  Rng rng(3);
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 9, 64);
  for (float bad : {NAN, INFINITY}) {
    auto x = random_activations(rng, 2, 64);
    x[64 + 5] = bad;  // second row only
    std::vector<float> y(18, 0.0f);
    b->fp4.gemm->run(x.data(), 2, w->w, y.data(), Fp4Semantics::W4A16);
    for (int n = 0; n < 9; ++n) EXPECT_TRUE(std::isnan(y[9 + n]) || std::isinf(y[9 + n])) << "output " << n;
  }
}

TEST(Int8Activations, PrefillRunsTheExactKernel) {
  const Backend* b = int8_backend();
  if (b == nullptr) GTEST_SKIP() << "no AVX2 here";
  Rng rng(4);
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 21, 128);
  const auto x = random_activations(rng, 9, 128);  // m > 4: the fp32 panels
  std::vector<float> want(9 * 21), got(want.size(), NAN);
  reference_kernels().fp4_gemm->run(x.data(), 9, w->w, want.data(), Fp4Semantics::W4A16);
  b->fp4.gemm->run(x.data(), 9, w->w, got.data(), Fp4Semantics::W4A16);
  EXPECT_LE(output_error(got.data(), want.data(), 9, 21), 2e-6);
}

// Each thread keeps its last quantization and reuses it for the same activation bits (decode
// passes the same vector once per expert slice). The same buffer rewritten in place, a NaN put in
// and taken out, and another k over the same memory must each be quantized afresh.
TEST(Int8Activations, ReusedActivationBufferFollowsItsContents) {
  const Backend* b = int8_backend();
  if (b == nullptr) GTEST_SKIP() << "no AVX2 here";
  Rng rng(5);
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 19, 256);
  auto w_short = random_weight(rng, SchemeKind::NVFP4, DType::U8, 19, 128);
  std::vector<float> x = random_activations(rng, 2, 256);
  auto check = [&](const WeightMatrix& wm, std::int64_t m, const char* what) {
    const std::vector<float> xs(x.begin(), x.begin() + m * wm.k);
    const std::vector<float> xq = int8_model(xs, m, wm.k);
    std::vector<float> want(static_cast<std::size_t>(m * 19)), got(want.size(), NAN);
    reference_kernels().fp4_gemm->run(xq.data(), m, wm, want.data(), Fp4Semantics::W4A16);
    b->fp4.gemm->run(x.data(), m, wm, got.data(), Fp4Semantics::W4A16);
    EXPECT_LE(output_error(got.data(), want.data(), m, 19), 2e-6) << what;
  };
  check(w->w, 2, "first call");
  check(w->w, 2, "same bits again");
  x[300] *= -3.0f;  // second row, in place
  check(w->w, 2, "one element changed");
  check(w->w, 1, "same memory, m = 1");
  check(w_short->w, 2, "same memory read as k = 128");
  x[7] = NAN;
  std::vector<float> y(19, 0.0f);
  b->fp4.gemm->run(x.data(), 1, w->w, y.data(), Fp4Semantics::W4A16);
  for (float v : y) EXPECT_TRUE(std::isnan(v)) << "NaN in the activations";
  x[7] = 0.25f;
  check(w->w, 1, "NaN replaced");
}

}  // namespace
}  // namespace fp4serve::kernels
