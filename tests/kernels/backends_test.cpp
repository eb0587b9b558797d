// Every backend this CPU can run, every family, against the scalar reference on awkward shapes:
// M across tile remainders, N not a multiple of the row block, K with a half 32-chunk, both FP4
// semantics, every dense dtype, GQA attention with and without history.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention_check.h"
#include "kernels/backend.h"
#include "kernels/paged_kv.h"
#include "kernels/random_data.h"
#include "kernels/runnable_backends.h"
#include "kernels/validation.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace fp4serve::kernels {
namespace {

// Tighter than the registry's tolerances on purpose: these shapes are small.
double tolerance(Precision p) {
  switch (p) {
    case Precision::Fp32:
    case Precision::Int8x3Activations: return 2e-6;
    case Precision::Activations16: return 2e-5;
    case Precision::Bf16Activations: return 1e-2;
    case Precision::Int8Activations: return 5e-2;
  }
  return 0.0;
}

using testing::runnable;

double max_error(const std::vector<float>& out, const std::vector<float>& ref, std::int64_t rows, std::int64_t cols) {
  return output_error(out.data(), ref.data(), rows, cols);
}

constexpr std::int64_t kTileRemainders[] = {1, 2, 3, 4, 5, 7, 16, 17, 33};

template <class Ms = decltype(kTileRemainders)>
void check_gemm(OpFamily family, SchemeKind kind, DType dtype, std::int64_t n, std::int64_t k, Fp4Semantics sem,
                const Ms& ms = kTileRemainders) {
  Rng rng(n * 1000003 + k * 7 + static_cast<int>(dtype));
  auto w = random_weight(rng, kind, dtype, n, k);
  const GemmKernel* ref = reference_kernels().fp4_gemm;
  for (std::int64_t m : ms) {
    const auto x = random_activations(rng, m, k);
    std::vector<float> want(static_cast<std::size_t>(m * n));
    ref->run(x.data(), m, w->w, want.data(), sem);
    for (const Backend* b : runnable(family)) {
      std::vector<float> got(want.size(), NAN);
      b->family(family).gemm->run(x.data(), m, w->w, got.data(), sem);
      const double err = max_error(got, want, m, n);
      EXPECT_LE(err, tolerance(b->family(family).precision))
          << b->name << " " << dtype_name(dtype) << " n=" << n << " k=" << k << " m=" << m;
    }
  }
}

TEST(Backends, AllFamiliesHaveRunnableCandidates) {
  for (OpFamily f : {OpFamily::DenseGemm, OpFamily::Fp4Gemm, OpFamily::Moe, OpFamily::Attention})
    EXPECT_FALSE(runnable(f).empty());
  if (cpu_features().usable(CpuFeature::AVX512F)) {
    EXPECT_GE(runnable(OpFamily::Fp4Gemm).size(), 3u);
  }
}

TEST(Backends, Nvfp4W4A16MatchesReference) {
  for (std::int64_t n : {1, 5, 37, 64})
    for (std::int64_t k : {16, 48, 64, 272})
      check_gemm(OpFamily::Fp4Gemm, SchemeKind::NVFP4, DType::U8, n, k, Fp4Semantics::W4A16);
}

TEST(Backends, Nvfp4W4A4MatchesReference) {
  for (std::int64_t k : {32, 80}) check_gemm(OpFamily::Fp4Gemm, SchemeKind::NVFP4, DType::U8, 19, k, Fp4Semantics::W4A4);
}

TEST(Backends, DenseDtypesMatchReference) {
  for (DType dt : {DType::BF16, DType::F16, DType::F32})
    for (std::int64_t k : {8, 21, 48, 64, 100, 200}) check_gemm(OpFamily::DenseGemm, SchemeKind::Dense, dt, 13, k, Fp4Semantics::W4A16);
  for (std::int64_t k : {16, 40}) check_gemm(OpFamily::DenseGemm, SchemeKind::FP8, DType::F8_E4M3, 9, k, Fp4Semantics::W4A16);
}

// From 16 tokens the dense GEMMs put tokens in the lanes (avx512/ and avx2/dense_token_groups_*.cpp):
// panels of 16 (AVX2: 12) rows x 256 elements summed into totals, groups of 16 (8) tokens, a padded
// last group from 12 (6) tokens, the rest on the row loops. Several panels of rows and of
// elements, a partial last one of each.
TEST(Backends, DenseTokenGroupsMatchReference) {
  constexpr std::int64_t kMs[] = {16, 28, 31, 45};
  for (DType dt : {DType::BF16, DType::F16, DType::F32})
    check_gemm(OpFamily::DenseGemm, SchemeKind::Dense, dt, 70, 600, Fp4Semantics::W4A16, kMs);
  check_gemm(OpFamily::DenseGemm, SchemeKind::FP8, DType::F8_E4M3, 37, 528, Fp4Semantics::W4A16, kMs);
}

TEST(Backends, Fp8EveryCodeDecodes) {
  // One row holding all 254 non-NaN codes, against one-hot activations: each output is one code.
  std::vector<std::uint8_t> codes;
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7F) != 0x7F) codes.push_back(static_cast<std::uint8_t>(c));
  while (codes.size() % 16 != 0) codes.push_back(0);
  const auto k = static_cast<std::int64_t>(codes.size());
  WeightMatrix w;
  w.kind = SchemeKind::FP8;
  w.dtype = DType::F8_E4M3;
  w.n = 1;
  w.k = k;
  w.data = codes.data();
  w.weight_scale_2 = 1.0f;
  std::vector<float> x(static_cast<std::size_t>(k * k), 0.0f);
  for (std::int64_t i = 0; i < k; ++i) x[i * k + i] = 1.0f;
  std::vector<float> want(static_cast<std::size_t>(k));
  reference_kernels().dense_gemm->run(x.data(), k, w, want.data(), Fp4Semantics::W4A16);
  for (const Backend* b : runnable(OpFamily::DenseGemm)) {
    if (b->family(OpFamily::DenseGemm).precision != Precision::Fp32) continue;
    std::vector<float> got(want.size(), NAN);
    b->dense.gemm->run(x.data(), k, w, got.data(), Fp4Semantics::W4A16);
    for (std::int64_t i = 0; i < k; ++i) EXPECT_EQ(got[i], want[i]) << b->name << " code " << int(codes[i]);
  }
}

TEST(Backends, Nvfp4NanScalePropagates) {
  // E4M3 0x7F is NaN: a block with it must poison its outputs in every backend, as in the reference.
  Rng rng(5);
  auto w = random_weight(rng, SchemeKind::NVFP4, DType::U8, 8, 64);
  w->scales[3 * 4 + 1] = 0x7F;
  for (std::int64_t m : {1, 16}) {  // 16: the AMX tiles, which look scales up in bf16 tables
    const auto x = random_activations(rng, m, 64);
    for (const Backend* b : runnable(OpFamily::Fp4Gemm)) {
      std::vector<float> y(static_cast<std::size_t>(8 * m), 0.0f);
      b->fp4.gemm->run(x.data(), m, w->w, y.data(), Fp4Semantics::W4A16);
      for (std::int64_t i = 0; i < 8 * m; ++i) EXPECT_EQ(std::isnan(y[i]), i % 8 == 3) << b->name << " m=" << m << " output " << i;
    }
  }
}

TEST(Backends, MoeMatchesReference) {
  for (SchemeKind kind : {SchemeKind::NVFP4, SchemeKind::Dense}) {
    const MoeShape s = testing::small_moe_shape(kind);
    Rng rng(11);
    auto moe = random_moe(rng, s, 1 << 20);
    // 160 tokens: >= 16 per expert, so AMX runs its tiles, and the gather, SiLU and weighted sum
    // are split across the pool.
    for (std::int64_t m : {1, 5, 40, 160}) {
      const auto x = random_activations(rng, m, s.hidden);
      std::vector<float> want(static_cast<std::size_t>(m * s.hidden));
      reference_kernels().moe->run(x.data(), m, moe->layer, want.data(), Fp4Semantics::W4A16);
      for (const Backend* b : runnable(OpFamily::Moe)) {
        std::vector<float> got(want.size(), NAN);
        b->moe.moe->run(x.data(), m, moe->layer, got.data(), Fp4Semantics::W4A16);
        // Once AMX rounds activations to bf16 for real (m = 160: 0.018 here) only the registry's
        // validation tolerance applies; below that the tighter test tolerance does.
        const double tol = m >= 160 && b->moe.precision != Precision::Fp32 ? validation_tolerance(b->moe.precision)
                                                                            : tolerance(b->moe.precision);
        EXPECT_LE(max_error(got, want, m, s.hidden), tol) << b->name << " m=" << m;
      }
    }
  }
}

TEST(Backends, AttentionMatchesReference) {
  using testing::AttentionCase;
  for (const AttentionCase& c : {AttentionCase{4, 2, 16, 1, 0}, AttentionCase{4, 2, 16, 5, 9}, AttentionCase{8, 2, 64, 3, 40},
                                 AttentionCase{4, 4, 128, 17, 3}, AttentionCase{2, 1, 272, 2, 5}})
    testing::expect_attention_matches_reference(c, static_cast<std::uint64_t>(c.heads * 31 + c.dim));
}

TEST(Backends, AttentionWithoutBlocksIsAClearError) {
  const auto q = std::vector<float>(64, 0.5f);
  std::vector<float> out(64);
  AttentionArgs a;
  a.q = q.data();
  a.out = out.data();
  a.m = 1;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 16;
  for (const Backend* b : runnable(OpFamily::Attention)) {
    if (b->name == "reference") continue;  // the reference trusts its caller; backends check
    try {
      b->attention.attention->run(a);
      ADD_FAILURE() << b->name << " accepted attention without KV blocks";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no KV blocks"), std::string::npos) << e.what();
    }
  }
}

TEST(Backends, WrongKindIsAClearError) {
  Rng rng(1);
  auto w = random_weight(rng, SchemeKind::Dense, DType::BF16, 4, 32);
  std::vector<float> x(32), y(4);
  for (const Backend* b : runnable(OpFamily::Fp4Gemm)) {
    try {
      b->fp4.gemm->run(x.data(), 1, w->w, y.data(), Fp4Semantics::W4A16);
      if (b->name != "reference") ADD_FAILURE() << b->name << " accepted a BF16 weight as NVFP4";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(b->name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fp4serve::kernels
