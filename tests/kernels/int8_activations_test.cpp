// avx2-int8: activations quantized to int8 per 16-element block, integer dot products. Its
// only rounding is that quantization, so against the reference fed the *quantized* activations
// it must agree to fp32 accuracy; against the unquantized ones it lands within its class's
// tolerance. Rows with NaN/Inf take the exact path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "kernels/grouped_moe.h"
#include "kernels/random_data.h"
#include "kernels/validation.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {
namespace {

const Backend* runnable_backend(const char* name) {
  for (const Backend& b : compiled_backends())
    if (b.name == name && cpu_features().missing(b.needs).empty()) return &b;
  return nullptr;
}
const Backend* int8_backend() { return runnable_backend("avx2-int8"); }

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

// The cases both int8 classes are checked on: k with every kind of tail (part of a chunk, half a
// group, whole groups), m = 1..4 (decode) and 5, 7, 11 (avx2-int8's 8-token tiles: partial, full + partial),
// 37 rows (pairs and a single), special (negative, NaN) scales, an outlier of 40 (its block's
// other values get coarse steps) and a zero at the end.
template <class Check>
void for_each_gemm_case(std::int64_t seed, Check&& check) {
  for (std::int64_t k : {16, 48, 64, 192, 272, 2048})
    for (std::int64_t m : {1, 2, 3, 4, 5, 7, 11}) {
      Rng rng(static_cast<std::uint64_t>(k * seed + m));
      auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 37, k);
      auto x = random_activations(rng, m, k);
      x[0] = 40.0f;
      x[k - 1] = 0.0f;
      check(k, m, w->w, x);
    }
}

TEST(Int8Activations, EqualsTheReferenceOnQuantizedActivations) {
  const Backend* b = int8_backend();
  if (b == nullptr) GTEST_SKIP() << "no AVX2 here";
  EXPECT_EQ(b->fp4.precision, Precision::Int8Activations);
  const GemmKernel* ref = reference_kernels().fp4_gemm;
  for_each_gemm_case(31, [&](std::int64_t k, std::int64_t m, const WeightMatrix& w, const std::vector<float>& x) {
    const std::vector<float> xq = int8_model(x, m, k);
    std::vector<float> want(static_cast<std::size_t>(m * 37)), got(want.size(), NAN), exact(want.size());
    ref->run(xq.data(), m, w, want.data(), Fp4Semantics::W4A16);
    b->fp4.gemm->run(x.data(), m, w, got.data(), Fp4Semantics::W4A16);
    EXPECT_LE(output_error(got.data(), want.data(), m, 37), 2e-6) << "k=" << k << " m=" << m;
    // Against the unquantized activations: not exact, and within the class's tolerance where k
    // is a model's (≥ 64; at k = 16 the 40x outlier coarsens a row's only block past it).
    ref->run(x.data(), m, w, exact.data(), Fp4Semantics::W4A16);
    const double err = output_error(got.data(), exact.data(), m, 37);
    EXPECT_GT(err, 1e-5) << "k=" << k << " m=" << m;
    if (k >= 64) {
      EXPECT_LE(err, validation_tolerance(Precision::Int8Activations)) << "k=" << k << " m=" << m;
    }
  });
}

TEST(Int8Activations, NonFiniteActivationsTakeTheExactPath) {
  const Backend* b = int8_backend();
  if (b == nullptr) GTEST_SKIP() << "no AVX2 here";
  Rng rng(3);
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 9, 64);
  for (std::int64_t m : {2, 6})  // decode and the prefill tiles
    for (float bad : {NAN, INFINITY}) {
      auto x = random_activations(rng, m, 64);
      x[64 * (m - 1) + 5] = bad;  // last row only
      std::vector<float> y(static_cast<std::size_t>(9 * m), 0.0f);
      b->fp4.gemm->run(x.data(), m, w->w, y.data(), Fp4Semantics::W4A16);
      for (int n = 0; n < 9; ++n)
        EXPECT_TRUE(std::isnan(y[9 * (m - 1) + n]) || std::isinf(y[9 * (m - 1) + n])) << "m=" << m << " output " << n;
    }
}

// Prefill: 70 tokens of k = 2048 span two token blocks (64 + 6) and end in a 6-token tile, and
// 61 rows span several row chunks; the codes must meet the right weights in every tile.
TEST(Int8Activations, PrefillTilesEqualTheReferenceOnQuantizedActivations) {
  const Backend* b = int8_backend();
  if (b == nullptr) GTEST_SKIP() << "no AVX2 here";
  Rng rng(4);
  constexpr std::int64_t m = 70, n = 61, k = 2048;
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
  const auto x = random_activations(rng, m, k);
  const std::vector<float> xq = int8_model(x, m, k);
  std::vector<float> want(m * n), got(want.size(), NAN);
  reference_kernels().fp4_gemm->run(xq.data(), m, w->w, want.data(), Fp4Semantics::W4A16);
  b->fp4.gemm->run(x.data(), m, w->w, got.data(), Fp4Semantics::W4A16);
  EXPECT_LE(output_error(got.data(), want.data(), m, n), 2e-6);
}

// The largest sums the int16 steps see: every weight +6 or -6 (2 * E2M1 + 12 = 24 or 0) under
// activations of +-max (code +-127) in every element. A group's sums reach 4 * 24 * 127 * 2 =
// 24384 before widening; one more term would pass 2^15 and wrap.
TEST(Int8Activations, LargestProductsStayExact) {
  for (const char* name : {"avx2-int8", "avx2-int8x3"}) {
    const Backend* b = runnable_backend(name);
    if (b == nullptr) GTEST_SKIP() << "no AVX2 here";
    Rng rng(8);
    constexpr std::int64_t k = 256, n = 4;
    for (std::int64_t m : {1, 6}) {
      auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
      std::fill(w->data.begin(), w->data.begin() + k / 2, 0x77);  // row 0: +6 everywhere
      std::fill(w->data.begin() + k / 2, w->data.begin() + k, 0xFF);  // row 1: -6 everywhere
      std::vector<float> x(static_cast<std::size_t>(m * k), 3.0f);
      for (std::int64_t i = k; i < m * k; ++i) x[i] = i < 2 * k || i % 2 == 0 ? -3.0f : 3.0f;  // -max, then mixed
      std::vector<float> want(static_cast<std::size_t>(m * n)), got(want.size(), NAN);
      reference_kernels().fp4_gemm->run(x.data(), m, w->w, want.data(), Fp4Semantics::W4A16);
      b->fp4.gemm->run(x.data(), m, w->w, got.data(), Fp4Semantics::W4A16);
      EXPECT_LE(output_error(got.data(), want.data(), m, n), 2e-6) << name << " m=" << m;
    }
  }
}

// avx2-int8x3 has no tiles: for m > 4 three parts would cost what the fp32 panels cost, so it
// runs avx2's exact kernel.
TEST(Int8x3Activations, PrefillRunsTheExactKernel) {
  const Backend* b = runnable_backend("avx2-int8x3");
  const Backend* exact = runnable_backend("avx2");
  if (b == nullptr || exact == nullptr) GTEST_SKIP() << "no AVX2 here";
  Rng rng(4);
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 21, 128);
  const auto x = random_activations(rng, 9, 128);
  std::vector<float> want(9 * 21), got(want.size(), NAN);
  exact->fp4.gemm->run(x.data(), 9, w->w, want.data(), Fp4Semantics::W4A16);
  b->fp4.gemm->run(x.data(), 9, w->w, got.data(), Fp4Semantics::W4A16);
  EXPECT_EQ(got, want);  // bit for bit: the same kernel
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

// avx2-int8x3: three int8 parts per block put every activation within 6.1e-8 of its block's max,
// so against the reference on the exact activations it must hold the fp32 kernels' own bound,
// outliers and special scales included, and sit far below the one-part class.
TEST(Int8x3Activations, MatchesTheReferenceAtFp32Accuracy) {
  const Backend* b = runnable_backend("avx2-int8x3");
  const Backend* one = int8_backend();
  if (b == nullptr || one == nullptr) GTEST_SKIP() << "no AVX2 here";
  EXPECT_EQ(b->fp4.precision, Precision::Int8x3Activations);
  EXPECT_EQ(validation_tolerance(Precision::Int8x3Activations), validation_tolerance(Precision::Fp32));
  const GemmKernel* ref = reference_kernels().fp4_gemm;
  for_each_gemm_case(37, [&](std::int64_t k, std::int64_t m, const WeightMatrix& w, std::vector<float> x) {
    if (k > 20) x[17] = 1e-6f;  // a tiny element next to ordinary ones
    std::vector<float> want(static_cast<std::size_t>(m * 37)), got(want.size(), NAN), coarse(want.size(), NAN);
    ref->run(x.data(), m, w, want.data(), Fp4Semantics::W4A16);
    b->fp4.gemm->run(x.data(), m, w, got.data(), Fp4Semantics::W4A16);
    one->fp4.gemm->run(x.data(), m, w, coarse.data(), Fp4Semantics::W4A16);
    const double err = output_error(got.data(), want.data(), m, 37);
    EXPECT_LE(err, 2e-6) << "k=" << k << " m=" << m;
    EXPECT_LT(err * 1000, output_error(coarse.data(), want.data(), m, 37)) << "k=" << k << " m=" << m;
  });
}

// One thread alternating the one-part and three-part kernels on the same activations must not
// reuse the other's quantization.
TEST(Int8x3Activations, KernelsOfBothClassesKeepTheirOwnQuantization) {
  const Backend* b = runnable_backend("avx2-int8x3");
  const Backend* one = int8_backend();
  if (b == nullptr || one == nullptr) GTEST_SKIP() << "no AVX2 here";
  Rng rng(6);
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 23, 512);
  const auto x = random_activations(rng, 1, 512);
  std::vector<float> exact(23), fine(23), coarse(23), fine_again(23);
  reference_kernels().fp4_gemm->run(x.data(), 1, w->w, exact.data(), Fp4Semantics::W4A16);
  b->fp4.gemm->run(x.data(), 1, w->w, fine.data(), Fp4Semantics::W4A16);
  one->fp4.gemm->run(x.data(), 1, w->w, coarse.data(), Fp4Semantics::W4A16);
  b->fp4.gemm->run(x.data(), 1, w->w, fine_again.data(), Fp4Semantics::W4A16);
  EXPECT_LE(output_error(fine.data(), exact.data(), 1, 23), 2e-6);
  EXPECT_LE(output_error(fine_again.data(), exact.data(), 1, 23), 2e-6);
  EXPECT_GT(output_error(coarse.data(), exact.data(), 1, 23), 1e-4);
}

// Both integer backends route with the exact fp32 kernel: a token's experts are chosen from
// unquantized activations, so the int8 classes change expert outputs, never which experts run.
TEST(Int8Activations, MoeRouterRunsTheExactKernel) {
  const Backend* exact = runnable_backend("avx2");
  if (exact == nullptr) GTEST_SKIP() << "no AVX2 here";
  Rng rng(7);
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 128, 256);  // a router: 128 experts
  const auto x = random_activations(rng, 1, 256);
  std::vector<float> want(128);
  exact->fp4.gemm->run(x.data(), 1, w->w, want.data(), Fp4Semantics::W4A16);
  for (const char* name : {"avx2-int8", "avx2-int8x3"}) {
    const auto* moe = dynamic_cast<const GroupedMoeKernel*>(runnable_backend(name)->moe.moe);
    ASSERT_NE(moe, nullptr) << name;
    std::vector<float> got(128, NAN);
    moe->gemms().router_fp4->run(x.data(), 1, w->w, got.data(), Fp4Semantics::W4A16);
    EXPECT_EQ(got, want) << name;  // bit for bit: the same kernel
  }
}

}  // namespace
}  // namespace fp4serve::kernels
