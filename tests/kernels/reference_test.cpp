// The reference is the source of truth, so it is itself checked against the plainest possible
// code: whole-matrix dequantization with the numerics functions and one token at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/random_data.h"
#include "kernels/weight_rows.h"
#include "numerics/nvfp4.h"

namespace fp4serve::kernels {
namespace {

std::vector<float> naive_gemm(const std::vector<float>& x, std::int64_t m, const WeightMatrix& w, Fp4Semantics sem) {
  std::vector<float> wd(static_cast<std::size_t>(w.n * w.k));
  if (w.kind == SchemeKind::NVFP4) {
    nvfp4::dequantize({w.data, wd.size() / 2}, {w.block_scales, wd.size() / 16}, w.weight_scale_2, w.n, w.k, wd);
  } else {
    for (std::int64_t n = 0; n < w.n; ++n) dequantize_row(w, n, wd.data() + n * w.k);
  }
  std::vector<float> y(static_cast<std::size_t>(m * w.n));
  for (std::int64_t i = 0; i < m; ++i) {
    std::vector<float> xi(x.begin() + i * w.k, x.begin() + (i + 1) * w.k);
    if (sem == Fp4Semantics::W4A4 && w.kind == SchemeKind::NVFP4) fake_quantize_activations_nvfp4(xi.data(), w.k, w.input_scale);
    for (std::int64_t n = 0; n < w.n; ++n) {
      long double acc = 0;
      for (std::int64_t j = 0; j < w.k; ++j) acc += static_cast<long double>(xi[j]) * wd[n * w.k + j];
      y[i * w.n + n] = static_cast<float>(acc);
    }
  }
  return y;
}

TEST(Reference, GemmMatchesNaiveDefinition) {
  Rng rng(3);
  for (auto [kind, dt] : {std::pair{SchemeKind::NVFP4, DType::U8}, std::pair{SchemeKind::Dense, DType::BF16},
                          std::pair{SchemeKind::FP8, DType::F8_E4M3}})
    for (Fp4Semantics sem : {Fp4Semantics::W4A16, Fp4Semantics::W4A4}) {
      auto w = random_weight(rng, kind, dt, 37, 96);
      const auto x = random_activations(rng, 5, 96);
      std::vector<float> y(5 * 37);
      reference_kernels().fp4_gemm->run(x.data(), 5, w->w, y.data(), sem);
      const auto want = naive_gemm(x, 5, w->w, sem);
      for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6 * (1 + std::fabs(want[i]))) << i;
    }
}

// Token by token, expert by expert, exactly as the Hugging Face module reads.
std::vector<float> naive_moe(const std::vector<float>& x, std::int64_t m, const MoeLayer& l) {
  const std::int64_t H = l.router.k, E = l.router.n;
  std::vector<float> y(static_cast<std::size_t>(m * H), 0.0f);
  for (std::int64_t t = 0; t < m; ++t) {
    std::vector<float> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
    const auto logits = naive_gemm(xt, 1, l.router, Fp4Semantics::W4A16);
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    std::vector<float> p(static_cast<std::size_t>(E));
    for (std::int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(logits[e] - mx);
    for (float& v : p) v = static_cast<float>(v / sum);
    std::vector<std::size_t> order(static_cast<std::size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return p[a] > p[b]; });
    float chosen = 0;
    for (std::int64_t i = 0; i < l.top_k; ++i) chosen += p[order[i]];
    for (std::int64_t i = 0; i < l.top_k; ++i) {
      const MoeExpert& ex = l.experts[order[i]];
      auto g = naive_gemm(xt, 1, ex.gate, Fp4Semantics::W4A16);
      const auto u = naive_gemm(xt, 1, ex.up, Fp4Semantics::W4A16);
      for (std::size_t j = 0; j < g.size(); ++j) g[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
      const auto o = naive_gemm(g, 1, ex.down, Fp4Semantics::W4A16);
      const float wgt = l.norm_topk_prob ? p[order[i]] / chosen : p[order[i]];
      for (std::int64_t j = 0; j < H; ++j) y[t * H + j] += wgt * o[j];
    }
  }
  return y;
}

TEST(Reference, MoeMatchesNaiveDefinition) {
  MoeShape s;
  s.hidden = 48;
  s.intermediate = 32;
  s.experts = 6;
  s.top_k = 2;
  s.norm_topk_prob = true;
  Rng rng(4);
  auto moe = random_moe(rng, s, 1 << 20);
  const auto x = random_activations(rng, 9, s.hidden);
  std::vector<float> y(x.size());
  reference_kernels().moe->run(x.data(), 9, moe->layer, y.data(), Fp4Semantics::W4A16);
  const auto want = naive_moe(x, 9, moe->layer);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
}

}  // namespace
}  // namespace fp4serve::kernels
