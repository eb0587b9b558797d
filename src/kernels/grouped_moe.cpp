#include "kernels/grouped_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/dtype.h"
#include "kernels/scratch.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {

WeightMatrix weight_rows_view(const WeightMatrix& w, std::int64_t r0, std::int64_t r1) {
  WeightMatrix v = w;
  v.n = r1 - r0;
  switch (w.kind) {
    case SchemeKind::NVFP4:
      v.data = w.data + r0 * (w.k / 2);
      v.block_scales = w.block_scales + r0 * (w.k / 16);
      break;
    case SchemeKind::FP8: v.data = w.data + r0 * w.k; break;
    case SchemeKind::Dense: v.data = w.data + r0 * w.k * static_cast<std::int64_t>(dtype_size(w.dtype)); break;
  }
  return v;
}

void check_moe_layer(const MoeLayer& layer, const std::string& backend) {
  const std::int64_t hidden = layer.router.k, experts = layer.router.n;
  if (static_cast<std::int64_t>(layer.experts.size()) != experts)
    fail(backend, " moe: router has ", experts, " outputs but the layer has ", layer.experts.size(), " experts");
  if (layer.top_k < 1 || layer.top_k > experts) fail(backend, " moe: top_k = ", layer.top_k, " with ", experts, " experts");
  for (std::size_t e = 0; e < layer.experts.size(); ++e) {
    const MoeExpert& ex = layer.experts[e];
    const std::int64_t inter = layer.experts[0].gate.n;
    if (ex.gate.n != inter || ex.gate.k != hidden || ex.up.k != hidden || ex.up.n != inter || ex.down.n != hidden || ex.down.k != inter)
      fail(backend, " moe: expert ", e, " shapes gate ", ex.gate.n, "x", ex.gate.k, ", up ", ex.up.n, "x", ex.up.k,
           ", down ", ex.down.n, "x", ex.down.k, " do not fit hidden ", hidden);
  }
}

namespace {

float silu(float v) { return v / (1.0f + std::exp(-v)); }

struct Route {
  std::vector<std::int32_t> expert;  // [m * top_k] in rank order per token
  std::vector<float> weight;
};

// Softmax in fp32 (sum in fp64), top-k with ties to the lower index, optional renormalisation:
// the same arithmetic as the reference, so both choose the same experts.
void route(const float* logits, std::int64_t m, std::int64_t num_experts, std::int64_t k, bool norm, Route& r) {
  r.expert.resize(static_cast<std::size_t>(m * k));
  r.weight.resize(static_cast<std::size_t>(m * k));
  std::vector<float> probs(static_cast<std::size_t>(num_experts));
  std::vector<char> taken(static_cast<std::size_t>(num_experts));
  for (std::int64_t t = 0; t < m; ++t) {
    const float* l = logits + t * num_experts;
    float mx = l[0];
    for (std::int64_t e = 1; e < num_experts; ++e) mx = std::max(mx, l[e]);
    double sum = 0.0;
    for (std::int64_t e = 0; e < num_experts; ++e) sum += probs[e] = std::exp(l[e] - mx);
    for (float& p : probs) p = static_cast<float>(p / sum);
    std::fill(taken.begin(), taken.end(), 0);
    float chosen = 0.0f;
    for (std::int64_t i = 0; i < k; ++i) {
      std::int64_t best = -1;
      for (std::int64_t e = 0; e < num_experts; ++e)
        if (!taken[e] && (best < 0 || probs[e] > probs[best])) best = e;
      taken[best] = 1;
      r.expert[t * k + i] = static_cast<std::int32_t>(best);
      chosen += probs[best];
    }
    for (std::int64_t i = 0; i < k; ++i) {
      const float p = probs[r.expert[t * k + i]];
      r.weight[t * k + i] = norm ? p / chosen : p;
    }
  }
}

// One unit of parallel work: rows [r0, r1) of one projection of one expert, for all its tokens.
struct Task {
  std::int32_t expert;
  std::int32_t proj;  // 0 gate, 1 up, 2 down
  std::int64_t r0, r1;
};

}  // namespace

void GroupedMoeKernel::run(const float* x, std::int64_t m, const MoeLayer& layer, float* y, Fp4Semantics semantics) const {
  check_moe_layer(layer, backend_);
  if (m <= 0) return;
  const std::int64_t hidden = layer.router.k, E = layer.router.n, K = layer.top_k;
  const std::int64_t inter = layer.experts[0].gate.n;
  auto gemm_for = [](const WeightMatrix& w, const GemmKernel* fp4, const GemmKernel* dense) {
    return w.kind == SchemeKind::NVFP4 ? fp4 : dense;
  };

  // 1. Route.
  std::vector<float> logits(static_cast<std::size_t>(m * E));
  gemm_for(layer.router, g_.router_fp4, g_.router_dense)->run(x, m, layer.router, logits.data(), semantics);
  Route r;
  route(logits.data(), m, E, K, layer.norm_topk_prob, r);

  // 2. Group (token, rank) slots by expert: slot order = expert, then token.
  std::vector<std::int64_t> count(static_cast<std::size_t>(E) + 1, 0), offset(static_cast<std::size_t>(E) + 1, 0);
  for (std::int32_t e : r.expert) ++count[static_cast<std::size_t>(e)];
  for (std::int64_t e = 0; e < E; ++e) offset[e + 1] = offset[e] + count[e];
  std::vector<std::int64_t> slot_of(static_cast<std::size_t>(m * K)), fill(offset.begin(), offset.end() - 1);
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t i = 0; i < K; ++i) slot_of[t * K + i] = fill[r.expert[t * K + i]]++;
  // The element-wise steps (this gather, SiLU x up, the weighted sum) are split across the pool
  // by token or element: each output is computed by the same operations whatever the split. In
  // a 512-token prefill they were ~40 % of the samples, on one thread; decode sizes stay inline.
  constexpr std::int64_t kTokenGrain = 8, kElementGrain = 16384;
  std::vector<float> xg(static_cast<std::size_t>(m * K * hidden));
  parallel_for(m, kTokenGrain, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t)
      for (std::int64_t i = 0; i < K; ++i)
        std::memcpy(xg.data() + slot_of[t * K + i] * hidden, x + t * hidden, static_cast<std::size_t>(hidden) * sizeof(float));
  });

  // 3. Expert GEMMs over (expert, projection, row slice) tasks: gate and up, then down.
  std::vector<float> gate(static_cast<std::size_t>(m * K * inter)), up(gate.size()), out(static_cast<std::size_t>(m * K * hidden));
  auto make_tasks = [&](std::int32_t first_proj, std::int32_t last_proj) {
    std::vector<Task> tasks;
    for (std::int64_t e = 0; e < E; ++e) {
      if (count[e] == 0) continue;
      // Bigger slices when an expert has many tokens, so per-call setup (activation packing)
      // stays small next to the work.
      const std::int64_t slice = count[e] >= 16 ? 256 : 64;
      for (std::int32_t p = first_proj; p <= last_proj; ++p) {
        const std::int64_t rows = p == 2 ? hidden : inter;
        for (std::int64_t r0 = 0; r0 < rows; r0 += slice)
          tasks.push_back({static_cast<std::int32_t>(e), p, r0, std::min(rows, r0 + slice)});
      }
    }
    return tasks;
  };
  auto run_tasks = [&](const std::vector<Task>& tasks) {
    parallel_for(static_cast<std::int64_t>(tasks.size()), 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t ti = b; ti < e; ++ti) {
        const Task& t = tasks[static_cast<std::size_t>(ti)];
        const MoeExpert& ex = layer.experts[static_cast<std::size_t>(t.expert)];
        const WeightMatrix& w = t.proj == 0 ? ex.gate : t.proj == 1 ? ex.up : ex.down;
        const std::int64_t cnt = count[t.expert], first = offset[t.expert];
        const float* in = t.proj == 2 ? gate.data() + first * inter : xg.data() + first * hidden;
        float* dst = t.proj == 0 ? gate.data() : t.proj == 1 ? up.data() : out.data();
        const std::int64_t ld = t.proj == 2 ? hidden : inter, width = t.r1 - t.r0;
        const WeightMatrix view = weight_rows_view(w, t.r0, t.r1);
        float* tmp = thread_scratch_as<float>(kScratchMoeFirst, static_cast<std::size_t>(cnt * width));
        gemm_for(w, g_.expert_fp4, g_.expert_dense)->run(in, cnt, view, tmp, semantics);
        for (std::int64_t i = 0; i < cnt; ++i)
          std::memcpy(dst + (first + i) * ld + t.r0, tmp + i * width, static_cast<std::size_t>(width) * sizeof(float));
      }
    });
  };
  run_tasks(make_tasks(0, 1));
  parallel_for(static_cast<std::int64_t>(gate.size()), kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) gate[i] = silu(gate[i]) * up[i];
  });
  run_tasks(make_tasks(2, 2));

  // 4. Weighted sum per token, in rank order.
  parallel_for(m, kTokenGrain, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      float* yt = y + t * hidden;
      std::fill(yt, yt + hidden, 0.0f);
      for (std::int64_t i = 0; i < K; ++i) {
        const float w = r.weight[t * K + i];
        const float* o = out.data() + slot_of[t * K + i] * hidden;
        for (std::int64_t j = 0; j < hidden; ++j) yt[j] += w * o[j];
      }
    }
  });
}

}  // namespace fp4serve::kernels
