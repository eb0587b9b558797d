// The scalar reference backends: straightforward loops with fp64 accumulation, the source of
// truth every other backend is validated against. Each weight row is dequantized once per call
// (weight_rows.h, the format definition) and used for every activation row; products of two
// floats are exact in fp64, so the result differs from the exact dot product only by fp64
// rounding of the sums (~1e-16 relative), whatever the summation order (reference_dots.h). Rows of
// W, and attention's (token, head) pairs, are split over the thread pool: validation computes
// these outputs at every start and must be quick.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/kv_cache.h"
#include "kernels/reference/reference_dots.h"
#include "kernels/weight_rows.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {

namespace {

double dot(const float* a, const float* b, std::size_t k) {
  double out = 0.0;
  reference_dots(a, k, 1, b, k, 1, k, &out, 1);
  return out;
}

class ReferenceGemm final : public GemmKernel {
 public:
  void run(const float* x, std::int64_t m, const WeightMatrix& w, float* y, Fp4Semantics semantics) const override {
    const auto k = static_cast<std::size_t>(w.k);
    // W4A4: each activation row quantized once, as the tensor-core kernels do.
    std::vector<float> act;
    if (semantics == Fp4Semantics::W4A4 && w.kind == SchemeKind::NVFP4) {
      act.assign(x, x + m * w.k);
      for (std::int64_t i = 0; i < m; ++i) fake_quantize_activations_nvfp4(act.data() + i * w.k, w.k, w.input_scale);
      x = act.data();
    }
    // Four weight rows per call: the AVX-512 dots use each loaded value four times.
    constexpr std::int64_t kRows = 4;
    parallel_for(w.n, 8, [&](std::int64_t n0, std::int64_t n1) {
      std::vector<float> rows(kRows * k);
      std::vector<double> sums(static_cast<std::size_t>(m * kRows));
      for (std::int64_t n = n0; n < n1; n += kRows) {
        const std::int64_t c = std::min(kRows, n1 - n);
        for (std::int64_t j = 0; j < c; ++j) dequantize_row(w, n + j, rows.data() + j * w.k);
        reference_dots(x, k, static_cast<std::size_t>(m), rows.data(), k, static_cast<std::size_t>(c), k, sums.data(),
                       static_cast<std::size_t>(kRows));
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < c; ++j) y[i * w.n + n + j] = static_cast<float>(sums[static_cast<std::size_t>(i * kRows + j)]);
      }
    });
  }
};

float silu(float v) { return v / (1.0f + std::exp(-v)); }

class ReferenceMoe final : public MoeKernel {
 public:
  void run(const float* x, std::int64_t m, const MoeLayer& layer, float* y, Fp4Semantics semantics) const override {
    const std::int64_t hidden = layer.router.k;
    const auto num_experts = static_cast<std::size_t>(layer.router.n);
    const auto k = static_cast<std::size_t>(layer.top_k);
    const ReferenceGemm gemm;

    // Routing, per token: router softmax in fp32 (sum in fp64), top-k (ties: lower expert
    // index first), weights optionally renormalised over the chosen k.
    std::vector<float> logits(num_experts * static_cast<std::size_t>(m));
    gemm.run(x, m, layer.router, logits.data(), semantics);
    std::vector<std::size_t> chosen(static_cast<std::size_t>(m) * k);
    std::vector<float> weight(chosen.size());
    for (std::int64_t t = 0; t < m; ++t) {
      const float* lt = logits.data() + t * static_cast<std::int64_t>(num_experts);
      const float mx = *std::max_element(lt, lt + num_experts);
      double sum = 0.0;
      std::vector<float> probs(num_experts);
      for (std::size_t e = 0; e < num_experts; ++e) sum += probs[e] = std::exp(lt[e] - mx);
      for (float& p : probs) p = static_cast<float>(p / sum);
      std::vector<std::size_t> order(num_experts);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return probs[a] > probs[b]; });
      float chosen_sum = 0.0f;
      for (std::size_t i = 0; i < k; ++i) chosen_sum += probs[order[i]];
      for (std::size_t i = 0; i < k; ++i) {
        chosen[t * k + i] = order[i];
        weight[t * k + i] = layer.norm_topk_prob ? probs[order[i]] / chosen_sum : probs[order[i]];
      }
    }

    // Each chosen expert runs once on all of its tokens (the same dot products as one token at
    // a time); outputs land in a slot per (token, rank).
    std::vector<float> slots(chosen.size() * static_cast<std::size_t>(hidden));
    for (std::size_t e = 0; e < num_experts; ++e) {
      std::vector<std::size_t> mine;  // indices t * k + rank routed to e
      for (std::size_t s = 0; s < chosen.size(); ++s)
        if (chosen[s] == e) mine.push_back(s);
      if (mine.empty()) continue;
      const MoeExpert& ex = layer.experts[e];
      const auto cnt = static_cast<std::int64_t>(mine.size());
      const auto inter = static_cast<std::size_t>(ex.gate.n);
      std::vector<float> xs(mine.size() * static_cast<std::size_t>(hidden));
      for (std::size_t i = 0; i < mine.size(); ++i)
        std::copy_n(x + static_cast<std::int64_t>(mine[i] / k) * hidden, hidden, xs.begin() + static_cast<std::ptrdiff_t>(i * hidden));
      std::vector<float> gate(mine.size() * inter), up(gate.size()), out(xs.size());
      gemm.run(xs.data(), cnt, ex.gate, gate.data(), semantics);
      gemm.run(xs.data(), cnt, ex.up, up.data(), semantics);
      for (std::size_t j = 0; j < gate.size(); ++j) gate[j] = silu(gate[j]) * up[j];
      gemm.run(gate.data(), cnt, ex.down, out.data(), semantics);
      for (std::size_t i = 0; i < mine.size(); ++i)
        std::copy_n(out.begin() + static_cast<std::ptrdiff_t>(i * hidden), hidden, slots.begin() + static_cast<std::ptrdiff_t>(mine[i] * hidden));
    }

    // Weighted sum per token in rank order.
    for (std::int64_t t = 0; t < m; ++t) {
      float* yt = y + t * hidden;
      std::fill(yt, yt + hidden, 0.0f);
      for (std::size_t i = 0; i < k; ++i) {
        const float w = weight[t * k + i];
        const float* o = slots.data() + (t * k + i) * hidden;
        for (std::int64_t j = 0; j < hidden; ++j) yt[j] += w * o[j];
      }
    }
  }
};

// Position p's row of KV head g on one cache side (kv_cache.h, the layout's one formula).
const std::byte* kv_row(const AttentionArgs& a, std::int64_t side, std::int64_t p, std::int64_t g) {
  const KvBlockSide at{side, a.block_tokens, a.num_kv_heads, a.head_dim};
  return a.kv_blocks[p / a.block_tokens] +
         kv_head_row_element(at, g, p % a.block_tokens) * static_cast<std::int64_t>(kv_element_bytes(a.kv_dtype));
}

// Per (query token, head), split over the thread pool: scores q.k in fp64 (dot), softmax, then
// the value sum, each dimension's fp64 sum taken over the positions in order. Rows are widened to
// fp32 once each (load_kv_element, the cache format's definition).
class ReferenceAttention final : public AttentionKernel {
 public:
  void run(const AttentionArgs& a) const override {
    const std::int64_t D = a.head_dim, group = a.num_heads / a.num_kv_heads;
    parallel_for(a.m * a.num_heads, 1, [&](std::int64_t t0, std::int64_t t1) {
      std::vector<float> scores, wide(static_cast<std::size_t>(D));
      std::vector<double> acc(static_cast<std::size_t>(D));
      auto widen = [&](std::int64_t side, std::int64_t p, std::int64_t kvh) {
        const std::byte* r = kv_row(a, side, p, kvh);
        for (std::int64_t d = 0; d < D; ++d) wide[static_cast<std::size_t>(d)] = load_kv_element(r, a.kv_dtype, d);
        return wide.data();
      };
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t i = t / a.num_heads, h = t % a.num_heads, kvh = h / group, visible = a.past + i + 1;
        const float* q = a.q + (i * a.num_heads + h) * D;
        scores.resize(static_cast<std::size_t>(visible));
        float mx = -INFINITY;
        for (std::int64_t p = 0; p < visible; ++p) {
          const float sc = static_cast<float>(dot(q, widen(a.k_offset, p, kvh), static_cast<std::size_t>(D))) * a.scale;
          scores[static_cast<std::size_t>(p)] = sc;
          mx = std::max(mx, sc);
        }
        double sum = 0.0;
        for (float& sc : scores) sum += sc = std::exp(sc - mx);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t p = 0; p < visible; ++p) {
          const float* v = widen(a.v_offset, p, kvh);
          const double w = scores[static_cast<std::size_t>(p)];
          for (std::int64_t d = 0; d < D; ++d) acc[static_cast<std::size_t>(d)] += w * v[d];
        }
        float* out = a.out + (i * a.num_heads + h) * D;
        for (std::int64_t d = 0; d < D; ++d) out[d] = static_cast<float>(acc[static_cast<std::size_t>(d)] / sum);
      }
    });
  }
};

}  // namespace

KernelSet reference_kernels() {
  static const ReferenceGemm gemm;
  static const ReferenceMoe moe;
  static const ReferenceAttention attention;
  return KernelSet{&gemm, &gemm, &moe, &attention, reference_conv1d(), reference_delta_rule()};
}

}  // namespace fp4serve::kernels
