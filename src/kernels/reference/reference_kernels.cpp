// The scalar reference backends: straightforward loops in fp32 (double accumulation where it
// costs nothing in clarity), the source of truth every other backend is validated against.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/weight_rows.h"

namespace fp4serve::kernels {

namespace {

class ReferenceGemm final : public GemmKernel {
 public:
  void run(const float* x, std::int64_t m, const WeightMatrix& w, float* y, Fp4Semantics semantics) const override {
    const auto k = static_cast<std::size_t>(w.k);
    std::vector<float> row(k), act(k);
    const bool w4a4 = semantics == Fp4Semantics::W4A4 && w.kind == SchemeKind::NVFP4;
    for (std::int64_t n = 0; n < w.n; ++n) {
      dequantize_row(w, n, row.data());
      for (std::int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * w.k;
        if (w4a4) {
          std::copy(xi, xi + k, act.begin());
          fake_quantize_activations_nvfp4(act.data(), w.k, w.input_scale);
          xi = act.data();
        }
        double acc = 0.0;
        for (std::size_t j = 0; j < k; ++j) acc += static_cast<double>(xi[j]) * row[j];
        y[i * w.n + n] = static_cast<float>(acc);
      }
    }
  }
};

float silu(float v) { return v / (1.0f + std::exp(-v)); }

class ReferenceMoe final : public MoeKernel {
 public:
  void run(const float* x, std::int64_t m, const MoeLayer& layer, float* y, Fp4Semantics semantics) const override {
    const std::int64_t hidden = layer.router.k;
    const auto num_experts = static_cast<std::size_t>(layer.router.n);
    const ReferenceGemm gemm;
    std::vector<float> logits(num_experts), gate, up, out(static_cast<std::size_t>(hidden));
    for (std::int64_t t = 0; t < m; ++t) {
      const float* xt = x + t * hidden;
      float* yt = y + t * hidden;
      gemm.run(xt, 1, layer.router, logits.data(), semantics);
      // Router softmax in fp32, then top-k (ties: lower expert index first).
      const float mx = *std::max_element(logits.begin(), logits.end());
      double sum = 0.0;
      std::vector<float> probs(num_experts);
      for (std::size_t e = 0; e < num_experts; ++e) sum += probs[e] = std::exp(logits[e] - mx);
      for (float& p : probs) p = static_cast<float>(p / sum);
      std::vector<std::size_t> order(num_experts);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return probs[a] > probs[b]; });
      const auto k = static_cast<std::size_t>(layer.top_k);
      float chosen_sum = 0.0f;
      for (std::size_t i = 0; i < k; ++i) chosen_sum += probs[order[i]];
      std::fill(yt, yt + hidden, 0.0f);
      for (std::size_t i = 0; i < k; ++i) {
        const MoeExpert& ex = layer.experts[order[i]];
        const float weight = layer.norm_topk_prob ? probs[order[i]] / chosen_sum : probs[order[i]];
        gate.resize(static_cast<std::size_t>(ex.gate.n));
        up.resize(static_cast<std::size_t>(ex.up.n));
        gemm.run(xt, 1, ex.gate, gate.data(), semantics);
        gemm.run(xt, 1, ex.up, up.data(), semantics);
        for (std::size_t j = 0; j < gate.size(); ++j) gate[j] = silu(gate[j]) * up[j];
        gemm.run(gate.data(), 1, ex.down, out.data(), semantics);
        for (std::int64_t j = 0; j < hidden; ++j) yt[j] += weight * out[static_cast<std::size_t>(j)];
      }
    }
  }
};

class ReferenceAttention final : public AttentionKernel {
 public:
  void run(const AttentionArgs& a) const override {
    const std::int64_t D = a.head_dim, group = a.num_heads / a.num_kv_heads;
    std::vector<float> scores;
    for (std::int64_t i = 0; i < a.m; ++i) {
      const std::int64_t visible = a.past + i + 1;
      scores.resize(static_cast<std::size_t>(visible));
      for (std::int64_t h = 0; h < a.num_heads; ++h) {
        const float* q = a.q + (i * a.num_heads + h) * D;
        const std::int64_t kvh = h / group;
        float mx = -INFINITY;
        for (std::int64_t p = 0; p < visible; ++p) {
          const float* k = a.k_cache + (p * a.num_kv_heads + kvh) * D;
          double dot = 0.0;
          for (std::int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[d];
          scores[static_cast<std::size_t>(p)] = static_cast<float>(dot) * a.scale;
          mx = std::max(mx, scores[static_cast<std::size_t>(p)]);
        }
        double sum = 0.0;
        for (float& s : scores) sum += s = std::exp(s - mx);
        float* out = a.out + (i * a.num_heads + h) * D;
        for (std::int64_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (std::int64_t p = 0; p < visible; ++p)
            acc += static_cast<double>(scores[static_cast<std::size_t>(p)]) * a.v_cache[(p * a.num_kv_heads + kvh) * D + d];
          out[d] = static_cast<float>(acc / sum);
        }
      }
    }
  }
};

}  // namespace

KernelSet reference_kernels() {
  static const ReferenceGemm gemm;
  static const ReferenceMoe moe;
  static const ReferenceAttention attention;
  return KernelSet{&gemm, &gemm, &moe, &attention};
}

}  // namespace fp4serve::kernels
