// The integer backends (avx2-int8/-int8x3 on AVX2, avx512-int8/-int8x3 on AVX-512 VNNI):
// activations quantized to int8 per 16-element block, integer dot products. The one-part
// kernels' only rounding is that quantization, so against the reference fed the *quantized*
// activations they must agree to fp32 accuracy; against the unquantized ones they land within
// their class's tolerance. Rows with NaN/Inf take the exact path. Every test runs on each
// instruction set this CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/grouped_moe.h"
#include "kernels/isa_kernels.h"
#include "kernels/random_data.h"
#include "kernels/validation.h"
#include "numerics/int8_grid_step.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {
namespace {

const Backend* runnable_backend(const char* name) {
  for (const Backend& b : compiled_backends())
    if (b.name == name && cpu_features().missing(b.needs).empty()) return &b;
  return nullptr;
}

// One instruction set's integer backends and the exact kernel they fall back to.
struct IntegerFamily {
  const Backend* one;    // int8-activations
  const Backend* three;  // int8x3-activations
  const Backend* exact;  // fp32
  std::int64_t three_max_m;  // the three-part kernel's largest m; above it, it runs `exact`
};

std::vector<IntegerFamily> runnable_families() {
  std::vector<IntegerFamily> out;
  for (const char* isa : {"avx2", "avx512"}) {
    const std::string name(isa);
    const IntegerFamily f{runnable_backend((name + "-int8").c_str()), runnable_backend((name + "-int8x3").c_str()),
                          runnable_backend(isa), name == "avx2" ? 4 : 2};
    if (f.one != nullptr && f.three != nullptr && f.exact != nullptr) out.push_back(f);
  }
  return out;
}

// The families this CPU runs; a test that needs one skips when there is none.
#define REQUIRE_FAMILIES(families)                  \
  const std::vector<IntegerFamily> families = runnable_families(); \
  if ((families).empty()) GTEST_SKIP() << "no integer backend runs on this CPU"

// x as the kernel sees it: per 16-element block, q = round(x * (1 / step)), back to q * step,
// with step = int8_grid_step(max|x|) (max / 127 rounded up to a bf16 value).
std::vector<float> int8_model(const std::vector<float>& x, std::int64_t m, std::int64_t k) {
  std::vector<float> out(x.size());
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t b = 0; b < k; b += 16) {
      float mx = 0.0f;
      for (std::int64_t e = b; e < b + 16 && e < k; ++e) mx = std::max(mx, std::fabs(x[i * k + e]));
      const float step = numerics::int8_grid_step(mx), inv = numerics::int8_grid_inverse(step);
      for (std::int64_t e = b; e < b + 16 && e < k; ++e)
        out[i * k + e] = static_cast<float>(std::lrintf(x[i * k + e] * inv)) * step;
    }
  return out;
}

// The cases both int8 classes are checked on: k with every kind of tail (part of a chunk, half a
// group, whole groups), m = 1..4 (decode) and 5, 7, 11 (avx2-int8's 8-token tiles: partial, full + partial),
// 16, 29, 45 and 50 (avx512-int8's token groups: one group, a padded second, a pair and a padded
// third, three groups and two tokens left to the decode loop), 37 rows (pairs and a single; in
// the groups, passes of 4 rows and shorter ones), special (negative, NaN) scales, an outlier of 40 (its block's
// other values get coarse steps) and a zero at the end.
template <class Check>
void for_each_gemm_case(std::int64_t seed, Check&& check) {
  for (std::int64_t k : {16, 48, 64, 192, 272, 2048})
    for (std::int64_t m : {1, 2, 3, 4, 5, 7, 11, 16, 29, 45, 50}) {
      Rng rng(static_cast<std::uint64_t>(k * seed + m));
      auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 37, k);
      auto x = random_activations(rng, m, k);
      x[0] = 40.0f;
      x[k - 1] = 0.0f;
      check(k, m, w->w, x);
    }
}

TEST(Int8Activations, EqualsTheReferenceOnQuantizedActivations) {
  REQUIRE_FAMILIES(families);
  const GemmKernel* ref = reference_kernels().fp4_gemm;
  for (const IntegerFamily& f : families) {
    const Backend* b = f.one;
    EXPECT_EQ(b->fp4.precision, Precision::Int8Activations);
    for_each_gemm_case(31, [&](std::int64_t k, std::int64_t m, const WeightMatrix& w, const std::vector<float>& x) {
      const std::vector<float> xq = int8_model(x, m, k);
      std::vector<float> want(static_cast<std::size_t>(m * 37)), got(want.size(), NAN), exact(want.size());
      ref->run(xq.data(), m, w, want.data(), Fp4Semantics::W4A16);
      b->fp4.gemm->run(x.data(), m, w, got.data(), Fp4Semantics::W4A16);
      EXPECT_LE(output_error(got.data(), want.data(), m, 37), 2e-6) << b->name << " k=" << k << " m=" << m;
      // Against the unquantized activations: not exact, and within the class's tolerance where k
      // is a model's (≥ 64; at k = 16 the 40x outlier coarsens a row's only block past it).
      ref->run(x.data(), m, w, exact.data(), Fp4Semantics::W4A16);
      const double err = output_error(got.data(), exact.data(), m, 37);
      EXPECT_GT(err, 1e-5) << b->name << " k=" << k << " m=" << m;
      if (k >= 64) {
        EXPECT_LE(err, validation_tolerance(Precision::Int8Activations)) << b->name << " k=" << k << " m=" << m;
      }
    });
  }
}

TEST(Int8Activations, NonFiniteActivationsTakeTheExactPath) {
  REQUIRE_FAMILIES(families);
  for (const IntegerFamily& f : families)
    for (const Backend* b : {f.one, f.three}) {
      Rng rng(3);
      auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 9, 64);
      for (std::int64_t m : {2, 6, 16})  // decode, the prefill tiles and avx512-int8's token groups
        for (float bad : {NAN, INFINITY}) {
          auto x = random_activations(rng, m, 64);
          x[64 * (m - 1) + 5] = bad;  // last row only
          std::vector<float> y(static_cast<std::size_t>(9 * m), 0.0f);
          b->fp4.gemm->run(x.data(), m, w->w, y.data(), Fp4Semantics::W4A16);
          for (int n = 0; n < 9; ++n)
            EXPECT_TRUE(std::isnan(y[9 * (m - 1) + n]) || std::isinf(y[9 * (m - 1) + n]))
                << b->name << " m=" << m << " output " << n;
        }
    }
}

// Prefill: 90 tokens of k = 2048 span two token blocks (AVX2: 64 + 26, AVX-512: 80 + 10) and end
// in a partial tile, and 61 rows span several row chunks; the codes must meet the right weights
// in every tile.
TEST(Int8Activations, PrefillTilesEqualTheReferenceOnQuantizedActivations) {
  REQUIRE_FAMILIES(families);
  for (const IntegerFamily& f : families) {
    Rng rng(4);
    constexpr std::int64_t m = 90, n = 61, k = 2048;
    auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
    const auto x = random_activations(rng, m, k);
    const std::vector<float> xq = int8_model(x, m, k);
    std::vector<float> want(m * n), got(want.size(), NAN);
    reference_kernels().fp4_gemm->run(xq.data(), m, w->w, want.data(), Fp4Semantics::W4A16);
    f.one->fp4.gemm->run(x.data(), m, w->w, got.data(), Fp4Semantics::W4A16);
    EXPECT_LE(output_error(got.data(), want.data(), m, n), 2e-6) << f.one->name;
  }
}

// The largest sums the integer steps see: every weight +6 or -6 (2 * E2M1 + 12 = 24 or 0) under
// activations of +-max (code +-127) in every element. On AVX2 a group's sums reach
// 4 * 24 * 127 * 2 = 24384 in int16 before widening; one more term would pass 2^15 and wrap.
// max = 127 / 32, so the grid's step is exactly 1 / 32 (a bf16 quotient) and q * step is max
// itself: the int8 grid adds no error and the result must match the fp32 reference.
TEST(Int8Activations, LargestProductsStayExact) {
  REQUIRE_FAMILIES(families);
  for (const IntegerFamily& f : families)
    for (const Backend* b : {f.one, f.three}) {
      Rng rng(8);
      constexpr std::int64_t k = 256, n = 4;
      for (std::int64_t m : {1, 6, 16}) {  // decode rows, 8-token tiles, a group of 16 in the lanes (AVX-512)
        auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
        std::fill(w->data.begin(), w->data.begin() + k / 2, 0x77);  // row 0: +6 everywhere
        std::fill(w->data.begin() + k / 2, w->data.begin() + k, 0xFF);  // row 1: -6 everywhere
        constexpr float max = 127.0f / 32.0f;
        std::vector<float> x(static_cast<std::size_t>(m * k), max);
        for (std::int64_t i = k; i < m * k; ++i) x[i] = i < 2 * k || i % 2 == 0 ? -max : max;  // -max, then mixed
        std::vector<float> want(static_cast<std::size_t>(m * n)), got(want.size(), NAN);
        reference_kernels().fp4_gemm->run(x.data(), m, w->w, want.data(), Fp4Semantics::W4A16);
        b->fp4.gemm->run(x.data(), m, w->w, got.data(), Fp4Semantics::W4A16);
        EXPECT_LE(output_error(got.data(), want.data(), m, n), 2e-6) << b->name << " m=" << m;
      }
    }
}

// The three-part kernels have no tiles: where three parts cost more than the exact kernel (m > 4
// on AVX2, m > 2 on AVX-512, where the fp32 kernel shares its decode between tokens), they run it.
TEST(Int8x3Activations, LargerBatchesRunTheExactKernel) {
  REQUIRE_FAMILIES(families);
  for (const IntegerFamily& f : families)
    for (std::int64_t m : {f.three_max_m + 1, std::int64_t{9}}) {
      Rng rng(4);
      auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 21, 128);
      const auto x = random_activations(rng, m, 128);
      std::vector<float> want(static_cast<std::size_t>(m * 21)), got(want.size(), NAN);
      f.exact->fp4.gemm->run(x.data(), m, w->w, want.data(), Fp4Semantics::W4A16);
      f.three->fp4.gemm->run(x.data(), m, w->w, got.data(), Fp4Semantics::W4A16);
      EXPECT_EQ(got, want) << f.three->name << " m=" << m;  // bit for bit: the same kernel
    }
}

// Up to their largest m (4 on AVX2, 2 on AVX-512) the three-part kernels run their own integer
// path: within the fp32 tolerance of the reference, yet not bit for bit the exact kernel's result
// (their sums are exact integers combined in fp32, the exact kernel's FMAs round per product).
TEST(Int8x3Activations, SmallBatchesRunTheThreePartKernel) {
  REQUIRE_FAMILIES(families);
  for (const IntegerFamily& f : families)
    for (std::int64_t m = 1; m <= f.three_max_m; ++m) {
      Rng rng(4);
      auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 21, 128);
      const auto x = random_activations(rng, m, 128);
      std::vector<float> want(static_cast<std::size_t>(m * 21)), exact(want.size(), NAN), got(want.size(), NAN);
      reference_kernels().fp4_gemm->run(x.data(), m, w->w, want.data(), Fp4Semantics::W4A16);
      f.exact->fp4.gemm->run(x.data(), m, w->w, exact.data(), Fp4Semantics::W4A16);
      f.three->fp4.gemm->run(x.data(), m, w->w, got.data(), Fp4Semantics::W4A16);
      EXPECT_LE(output_error(got.data(), want.data(), m, 21), 2e-6) << f.three->name << " m=" << m;
      EXPECT_NE(got, exact) << f.three->name << " m=" << m << ": the exact kernel ran";
    }
}

// Each thread keeps its last quantization and reuses it for the same activation bits (decode
// passes the same vector once per expert slice). The same buffer rewritten in place, a NaN put in
// and taken out, and another k over the same memory must each be quantized afresh.
TEST(Int8Activations, ReusedActivationBufferFollowsItsContents) {
  REQUIRE_FAMILIES(families);
  for (const IntegerFamily& f : families) {
    const Backend* b = f.one;
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
      EXPECT_LE(output_error(got.data(), want.data(), m, 19), 2e-6) << b->name << ": " << what;
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
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << b->name << ": NaN in the activations";
    x[7] = 0.25f;
    check(w->w, 1, "NaN replaced");
  }
}

// Three int8 parts per block put every activation within 6.1e-8 of its block's max, so against
// the reference on the exact activations the three-part kernels must hold the fp32 kernels' own
// bound, outliers and special scales included, and sit far below the one-part class.
TEST(Int8x3Activations, MatchesTheReferenceAtFp32Accuracy) {
  REQUIRE_FAMILIES(families);
  EXPECT_EQ(validation_tolerance(Precision::Int8x3Activations), validation_tolerance(Precision::Fp32));
  const GemmKernel* ref = reference_kernels().fp4_gemm;
  for (const IntegerFamily& f : families) {
    EXPECT_EQ(f.three->fp4.precision, Precision::Int8x3Activations);
    for_each_gemm_case(37, [&](std::int64_t k, std::int64_t m, const WeightMatrix& w, std::vector<float> x) {
      if (k > 20) x[17] = 1e-6f;  // a tiny element next to ordinary ones
      std::vector<float> want(static_cast<std::size_t>(m * 37)), got(want.size(), NAN), coarse(want.size(), NAN);
      ref->run(x.data(), m, w, want.data(), Fp4Semantics::W4A16);
      f.three->fp4.gemm->run(x.data(), m, w, got.data(), Fp4Semantics::W4A16);
      f.one->fp4.gemm->run(x.data(), m, w, coarse.data(), Fp4Semantics::W4A16);
      const double err = output_error(got.data(), want.data(), m, 37);
      EXPECT_LE(err, 2e-6) << f.three->name << " k=" << k << " m=" << m;
      EXPECT_LT(err * 1000, output_error(coarse.data(), want.data(), m, 37)) << f.three->name << " k=" << k << " m=" << m;
    });
  }
}

// One thread alternating kernels of both classes, and of both instruction sets (their code
// layouts differ), on the same activations must never reuse another kernel's quantization.
TEST(Int8x3Activations, KernelsOfBothClassesKeepTheirOwnQuantization) {
  REQUIRE_FAMILIES(families);
  Rng rng(6);
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 23, 512);
  const auto x = random_activations(rng, 1, 512);
  std::vector<float> exact(23);
  reference_kernels().fp4_gemm->run(x.data(), 1, w->w, exact.data(), Fp4Semantics::W4A16);
  // Each class twice over every instruction set, so that a kernel whose memo is still valid runs
  // right after the other instruction set's kernel of the same class quantized the same x (with a
  // shared scratch buffer it would read the other's layout), then the classes alternate.
  std::vector<const Backend*> order;
  for (int cls = 0; cls < 2; ++cls)
    for (int round = 0; round < 2; ++round)
      for (const IntegerFamily& f : families) order.push_back(cls == 0 ? f.one : f.three);
  for (const IntegerFamily& f : families) {
    order.push_back(f.one);
    order.push_back(f.three);
  }
  for (const Backend* b : order) {
    std::vector<float> got(23, NAN);
    b->fp4.gemm->run(x.data(), 1, w->w, got.data(), Fp4Semantics::W4A16);
    const double err = output_error(got.data(), exact.data(), 1, 23);
    if (b->fp4.precision == Precision::Int8x3Activations) EXPECT_LE(err, 2e-6) << b->name;
    else EXPECT_GT(err, 1e-4) << b->name;
    // And a one-part kernel equals the reference on its own quantization, not another kernel's.
    if (b->fp4.precision == Precision::Int8Activations) {
      const std::vector<float> xq = int8_model(x, 1, 512);
      std::vector<float> want(23);
      reference_kernels().fp4_gemm->run(xq.data(), 1, w->w, want.data(), Fp4Semantics::W4A16);
      EXPECT_LE(output_error(got.data(), want.data(), 1, 23), 2e-6) << b->name;
    }
  }
}

// The integer backends route with the exact fp32 kernel: a token's experts are chosen from
// unquantized activations, so the int8 classes change expert outputs, never which experts run.
TEST(Int8Activations, MoeRouterRunsTheExactKernel) {
  REQUIRE_FAMILIES(families);
  for (const IntegerFamily& f : families) {
    Rng rng(7);
    auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 128, 256);  // a router: 128 experts
    const auto x = random_activations(rng, 1, 256);
    std::vector<float> want(128);
    f.exact->fp4.gemm->run(x.data(), 1, w->w, want.data(), Fp4Semantics::W4A16);
    for (const Backend* b : {f.one, f.three}) {
      const auto* moe = dynamic_cast<const GroupedMoeKernel*>(b->moe.moe);
      ASSERT_NE(moe, nullptr) << b->name;
      std::vector<float> got(128, NAN);
      moe->gemms().router_fp4->run(x.data(), 1, w->w, got.data(), Fp4Semantics::W4A16);
      EXPECT_EQ(got, want) << b->name;  // bit for bit: the same kernel
    }
  }
}

// amx-int8's tiles move each activation block to the int8 grid as they pack it: the scalar int8
// model's values, carried exactly by hi + lo, so the tiles match the reference fed int8_model(x)
// up to fp32 summation order. k with tails (half a 32-element step, part of a 128-element line),
// m from one partial tile to several pairs. A row holding NaN keeps it: its outputs are all
// non-finite.
TEST(Int8Activations, AmxTilesRunOnTheScalarInt8Model) {
  if (runnable_backend("amx-int8") == nullptr) GTEST_SKIP() << "no AMX + VNNI here";
  const std::int64_t n = 37;
  for (std::int64_t k : {16, 48, 272, 2048}) {
    for (std::int64_t m : {1, 20, 33, 70}) {
      Rng rng(static_cast<std::uint64_t>(k * 100 + m));
      auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
      auto x = random_activations(rng, m, k);
      x[0] = 40.0f;  // coarse steps for the rest of its block
      x[static_cast<std::size_t>(k - 1)] = 0.0f;
      std::vector<float> want(static_cast<std::size_t>(m * n)), got(want.size(), -1.0f);
      reference_kernels().fp4_gemm->run(int8_model(x, m, k).data(), m, w->w, want.data(), Fp4Semantics::W4A16);
      amx::nvfp4_gemm_int8_grid(x.data(), m, w->w, got.data());
      EXPECT_LE(output_error(got.data(), want.data(), m, n), 2e-6) << "k=" << k << " m=" << m;
      if (m > 1) {
        x[static_cast<std::size_t>(k + 1)] = NAN;  // row 1
        amx::nvfp4_gemm_int8_grid(x.data(), m, w->w, got.data());
        for (std::int64_t j = 0; j < n; ++j) EXPECT_FALSE(std::isfinite(got[static_cast<std::size_t>(n + j)])) << j;
        EXPECT_LE(output_error(got.data(), want.data(), 1, n), 2e-6) << "row 0, k=" << k << " m=" << m;
      }
    }
  }
}

// amx-int8 hands a call to the AMX tiles from 20 tokens (where they tie with the VNNI token
// groups, docs/perf.md session 31): 19 tokens run avx512-int8's kernels, 20 the tiles, bit for bit.
TEST(Int8Activations, AmxInt8TakesTheTilesFromTwentyTokens) {
  const Backend* b = runnable_backend("amx-int8");
  if (b == nullptr) GTEST_SKIP() << "no AMX + VNNI here";
  Rng rng(43);
  const std::int64_t n = 48, k = 256;
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
  for (std::int64_t m : {19, 20}) {
    const auto x = random_activations(rng, m, k);
    std::vector<float> got(static_cast<std::size_t>(m * n), NAN), want(got.size(), NAN);
    b->fp4.gemm->run(x.data(), m, w->w, got.data(), Fp4Semantics::W4A16);
    if (m < 20) vnni::nvfp4_gemm_int8(x.data(), m, w->w, want.data());
    else amx::nvfp4_gemm_int8_grid(x.data(), m, w->w, want.data());
    EXPECT_EQ(got, want) << "m=" << m;
  }
}

// A token's output must not depend on how many tokens share the call (a request alone or in a
// batch, a prompt chunked or not): amx-int8 runs one token on the int8 GEMV and 20 or more on
// AMX tiles, so the tiles must see the int8 grid's activations, exactly: as hi + lo, which the
// grid's bf16 step makes exact. Tiles on the raw activations land ~0.7 % away, and hi + lo of a
// grid with an fp32 step 4e-6: both flipped greedy tokens between 16 streams and each alone.
// 19 tokens stay on the token groups; 20, 33 and 64 take one, two and two full pairs of tiles,
// and 300 at k = 2048 three chunks of 128 tokens.
TEST(Int8Activations, AmxInt8GivesATokenTheSameResultAloneAndBatched) {
  const Backend* b = runnable_backend("amx-int8");
  if (b == nullptr) GTEST_SKIP() << "no AMX + VNNI here";
  Rng rng(41);
  const std::int64_t n = 80;
  for (std::int64_t k : {32, 64, 2048}) {
    for (std::int64_t m : {19, 20, 33, 64, 300}) {
      if (m == 300 && k != 2048) continue;
      auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k);
      auto x = random_activations(rng, m, k);
      x[3] = 40.0f;
      std::vector<float> batched(static_cast<std::size_t>(m * n), NAN), alone(static_cast<std::size_t>(n), NAN);
      std::vector<float> raw_tiles(batched.size(), NAN);
      b->fp4.gemm->run(x.data(), m, w->w, batched.data(), Fp4Semantics::W4A16);
      amx::nvfp4_gemm_split(x.data(), m, w->w, raw_tiles.data());
      double worst = 0.0, worst_raw = 0.0;
      for (std::int64_t i = 0; i < m; ++i) {
        b->fp4.gemm->run(x.data() + i * k, 1, w->w, alone.data(), Fp4Semantics::W4A16);
        worst = std::max(worst, output_error(batched.data() + i * n, alone.data(), 1, n));
        worst_raw = std::max(worst_raw, output_error(raw_tiles.data() + i * n, alone.data(), 1, n));
      }
      EXPECT_LE(worst, 1e-6) << "k=" << k << " m=" << m;  // hi + lo of an fp32-step grid: 4.4e-6 (flipped tokens)
      EXPECT_GT(worst_raw, 1000 * worst) << "k=" << k << " m=" << m << ": the raw tiles should be far off the int8 GEMV";
    }
  }
}

}  // namespace
}  // namespace fp4serve::kernels
