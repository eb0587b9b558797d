// In an optimized build every backend's kernels return to their generic caller with the upper
// vector state clear (util/vector_state.h): a kernel that left it in use made the model's
// legacy-SSE code after it ~10x slower (docs/perf.md, session 41). The pool clears it after its
// jobs; this checks what runs on the calling thread outside them, over the sizes where the
// backends change paths (1-4 tokens, the narrow tiles, token groups, whole tiles, several chunks).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/attention_check.h"
#include "kernels/paged_kv.h"
#include "kernels/random_data.h"
#include "kernels/runnable_backends.h"
#include "kernels/vector_math.h"
#include "util/cpu_features.h"
#include "util/vector_state.h"

namespace fp4serve::kernels {
namespace {

// Empty where this build and CPU can check the state; else why not. GCC emits vzeroupper only
// when optimizing, so in an -O0 build (the ASan flavour) every AVX function returns with the
// state in use, and only the pool's clearing holds.
std::string cannot_check() {
#ifndef __OPTIMIZE__
  return "an unoptimized build: GCC emits no vzeroupper at -O0";
#else
  if (!cpu_features().usable(CpuFeature::AVX) || !upper_vector_state_in_use().has_value())
    return "no AVX, or no XGETBV(1) to read the state";
  return "";
#endif
}

using testing::runnable;

// Runs `call` from a clear state and says whether it came back clear.
template <class F>
bool returns_clear(F&& call) {
  clear_upper_vector_state();
  call();
  return upper_vector_state_in_use() == false;
}

constexpr std::int64_t kTokens[] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 20, 33, 64, 300};

TEST(UpperState, GemmsReturnItClear) {
  if (const std::string why = cannot_check(); !why.empty()) GTEST_SKIP() << why;
  struct Case {
    OpFamily family;
    SchemeKind kind;
    DType dtype;
  };
  Rng rng(17);
  for (const Case& c : {Case{OpFamily::Fp4Gemm, SchemeKind::NVFP4, DType::U8}, Case{OpFamily::DenseGemm, SchemeKind::Dense, DType::BF16},
                        Case{OpFamily::DenseGemm, SchemeKind::Dense, DType::F16}, Case{OpFamily::DenseGemm, SchemeKind::Dense, DType::F32},
                        Case{OpFamily::DenseGemm, SchemeKind::FP8, DType::F8_E4M3}}) {
    // k = 512: a whole number of the tiles' 32-element steps (BF16 tiles straight from the
    // weights); 80: a tail. n = 70: a partial 32-row block.
    for (std::int64_t k : {512, 80}) {
      auto w = random_weight(rng, c.kind, c.dtype, 70, k);
      for (std::int64_t m : kTokens) {
        const auto x = random_activations(rng, m, k);
        std::vector<float> y(static_cast<std::size_t>(m * 70));
        for (const Backend* b : runnable(c.family))
          for (Fp4Semantics sem : {Fp4Semantics::W4A16, Fp4Semantics::W4A4})
            EXPECT_TRUE(returns_clear([&] { b->family(c.family).gemm->run(x.data(), m, w->w, y.data(), sem); }))
                << b->name << " " << dtype_name(c.dtype) << " k=" << k << " m=" << m;
      }
    }
  }
}

TEST(UpperState, MoeReturnsItClear) {
  if (const std::string why = cannot_check(); !why.empty()) GTEST_SKIP() << why;
  for (SchemeKind kind : {SchemeKind::NVFP4, SchemeKind::Dense}) {
    const MoeShape s = testing::small_moe_shape(kind);
    Rng rng(19);
    auto moe = random_moe(rng, s, 1 << 20);
    for (std::int64_t m : {1, 5, 16, 40, 160}) {
      const auto x = random_activations(rng, m, s.hidden);
      std::vector<float> y(static_cast<std::size_t>(m * s.hidden));
      for (const Backend* b : runnable(OpFamily::Moe))
        EXPECT_TRUE(returns_clear([&] { b->moe.moe->run(x.data(), m, moe->layer, y.data(), Fp4Semantics::W4A16); }))
            << b->name << " m=" << m;
    }
  }
}

TEST(UpperState, AttentionReturnsItClear) {
  if (const std::string why = cannot_check(); !why.empty()) GTEST_SKIP() << why;
  using testing::AttentionCase;
  Rng rng(23);
  for (const AttentionCase& c : {AttentionCase{4, 2, 64, 1, 40}, AttentionCase{4, 2, 64, 3, 0}, AttentionCase{8, 2, 128, 40, 20},
                                 AttentionCase{4, 4, 128, 17, 300}}) {
    const std::int64_t total = c.past + c.m;
    const auto q = random_activations(rng, c.m, c.heads * c.dim);
    const auto k = random_activations(rng, total, c.kv * c.dim);
    const auto v = random_activations(rng, total, c.kv * c.dim);
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      const PagedKvCopy cache(k.data(), v.data(), total, c.kv, c.dim, 16, 1, 0, 1, dtype);
      std::vector<float> out(q.size());
      const AttentionArgs a = testing::attention_args(c, cache, q.data(), out.data());
      for (const Backend* b : runnable(OpFamily::Attention)) {
        if (!b->attention.attention_unsupported(AttentionShape{c.heads, c.kv, c.dim, dtype}).empty()) continue;
        EXPECT_TRUE(returns_clear([&] { b->attention.attention->run(a); }))
            << b->name << " m=" << c.m << " past=" << c.past << " dim=" << c.dim << " " << dtype_name(dtype);
      }
    }
  }
}

TEST(UpperState, LinearAttentionReturnsItClear) {
  if (const std::string why = cannot_check(); !why.empty()) GTEST_SKIP() << why;
  constexpr std::int64_t C = 96, K = 4, Hk = 2, Hv = 4, dk = 32, dv = 32;
  for (std::int64_t m : {1, 9, 130}) {
    std::vector<float> x(static_cast<std::size_t>(m * C), 0.25f), conv_out(x.size()), conv_state(static_cast<std::size_t>((K - 1) * C), 0.5f);
    std::vector<float> taps(static_cast<std::size_t>(K * C), 0.125f);
    std::vector<float> q(static_cast<std::size_t>(m * Hk * dk), 0.05f), k = q, v(static_cast<std::size_t>(m * Hv * dv), 0.5f);
    std::vector<float> g(static_cast<std::size_t>(m * Hv), -0.1f), beta(g.size(), 0.5f);
    std::vector<float> state(static_cast<std::size_t>(Hv * dk * dv), 0.01f), out(v.size());
    for (const Backend* b : runnable(OpFamily::LinearAttention)) {
      EXPECT_TRUE(returns_clear([&] { b->linear_attention.conv1d->run({x.data(), conv_out.data(), conv_state.data(), taps.data(), m, C, K}); }))
          << b->name << " conv1d m=" << m;
      EXPECT_TRUE(returns_clear([&] {
        b->linear_attention.delta_rule->run({q.data(), k.data(), v.data(), g.data(), beta.data(), state.data(), out.data(), m, Hk, Hv, dk, dv});
      })) << b->name << " delta rule m=" << m;
    }
  }
}

TEST(UpperState, VectorTablesReturnItClear) {
  if (const std::string why = cannot_check(); !why.empty()) GTEST_SKIP() << why;
  const CpuFeatures& f = cpu_features();
  std::vector<const VectorMath*> tables;
  if (f.usable(CpuFeature::AVX2) && f.usable(CpuFeature::FMA)) tables.push_back(&avx2_vector_math());
  if (&best_vector_math() == &avx512_vector_math()) tables.push_back(&avx512_vector_math());  // its CPU check
  if (tables.empty()) GTEST_SKIP() << "no SIMD table runs here";
  for (std::int64_t n : {1, 7, 16, 100, 1000}) {
    std::vector<float> a(static_cast<std::size_t>(n), 0.5f), b = a, out = a;
    const std::vector<const float*> rows{a.data(), b.data()};
    const float weights[2] = {0.25f, 0.75f};
    for (const VectorMath* t : tables) {
      EXPECT_TRUE(returns_clear([&] { t->exp(a.data(), out.data(), n); })) << t->name << " exp n=" << n;
      EXPECT_TRUE(returns_clear([&] { t->silu_mul(out.data(), b.data(), n); })) << t->name << " silu_mul n=" << n;
      EXPECT_TRUE(returns_clear([&] { t->silu(out.data(), n); })) << t->name << " silu n=" << n;
      EXPECT_TRUE(returns_clear([&] { (void)t->softmax_numerators(out.data(), n); })) << t->name << " softmax n=" << n;
      EXPECT_TRUE(returns_clear([&] { t->weighted_sum(out.data(), rows.data(), weights, 2, n); })) << t->name << " weighted_sum n=" << n;
      EXPECT_TRUE(returns_clear([&] { (void)t->sum_squares(a.data(), n); })) << t->name << " sum_squares n=" << n;
    }
  }
}

}  // namespace
}  // namespace fp4serve::kernels
