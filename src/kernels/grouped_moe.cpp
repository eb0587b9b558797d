#include "kernels/grouped_moe.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/moe_traffic.h"
#include "kernels/scratch.h"
#include "kernels/weight_rows.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {

WeightMatrix weight_rows_view(const WeightMatrix& w, std::int64_t r0, std::int64_t r1) {
  WeightMatrix v = w;
  v.n = r1 - r0;
  v.data = w.data + r0 * weight_row_bytes(w);
  if (w.kind == SchemeKind::NVFP4) v.block_scales = w.block_scales + r0 * (w.k / 16);
  return v;
}

bool moe_whole_projections(std::int64_t used_experts, std::int64_t busy_experts, std::int64_t threads) {
  constexpr std::int64_t kWholeTasksPerThread = 4;
  return used_experts >= kWholeTasksPerThread * threads || busy_experts >= 2 * threads;
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

// One unit of parallel work: rows [r0, r1) of one projection of one expert, for all its tokens.
struct Task {
  std::int32_t expert;
  std::int32_t proj;  // 0 gate, 1 up, 2 down
  std::int64_t r0, r1;
};

const WeightMatrix& task_weights(const MoeLayer& layer, const Task& t) {
  const MoeExpert& ex = layer.experts[static_cast<std::size_t>(t.expert)];
  return t.proj == 0 ? ex.gate : t.proj == 1 ? ex.up : ex.down;
}

// Requests the first 2 KB of a task's rows and their block scales (to L2). A thread's next task
// is in another tensor, so its GEMM's own prefetch never reaches it: called one task ahead, the
// first loads of each task no longer wait on memory (in decode they had stalled every 128-row
// slice: 5 % of a token's time, docs/perf.md, session 19).
void prefetch_task_start(const WeightMatrix& w, std::int64_t r0, std::int64_t r1) {
  constexpr std::int64_t kBytes = 2048;
  const WeightMatrix v = weight_rows_view(w, r0, r1);
  const std::int64_t bytes = weight_row_bytes(w), rows = std::min(v.n, (kBytes + bytes - 1) / bytes);
  const char* codes = reinterpret_cast<const char*>(v.data);
  for (std::int64_t off = 0; off < rows * bytes; off += 64) __builtin_prefetch(codes + off, 0, 2);
  if (w.kind == SchemeKind::NVFP4) {
    const char* scales = reinterpret_cast<const char*>(v.block_scales);
    for (std::int64_t off = 0; off < rows * (w.k / 16); off += 64) __builtin_prefetch(scales + off, 0, 2);
  }
}

// The driver's bookkeeping, per calling thread; vectors only grow, so once a thread has seen the
// largest call, a decode step allocates nothing (tests/model/decode_allocation_test.cpp).
struct Workspace {
  std::vector<float> logits;         // [m, experts]
  std::vector<std::int32_t> expert;  // [m * top_k] in rank order per token
  std::vector<float> weight;
  std::vector<float> probs;
  std::vector<char> taken;
  std::vector<std::int64_t> count, offset, slot_of, fill;
  std::vector<Task> tasks;
};

Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

// Softmax in fp32 (sum in fp64), top-k with ties to the lower index, optional renormalisation:
// the reference's arithmetic except exp_approx for std::exp (within 2 ulp), so both choose the
// same experts unless two probabilities are that close.
void route(const VectorMath& vm, const float* logits, std::int64_t m, std::int64_t num_experts, std::int64_t k,
           bool norm, Workspace& r) {
  r.expert.resize(static_cast<std::size_t>(m * k));
  r.weight.resize(static_cast<std::size_t>(m * k));
  std::vector<float>& probs = r.probs;
  std::vector<char>& taken = r.taken;
  probs.resize(static_cast<std::size_t>(num_experts));
  taken.resize(static_cast<std::size_t>(num_experts));
  for (std::int64_t t = 0; t < m; ++t) {
    const float* l = logits + t * num_experts;
    std::copy(l, l + num_experts, probs.begin());
    const double sum = vm.softmax_numerators(probs.data(), num_experts);
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

}  // namespace

void GroupedMoeKernel::run(const float* x, std::int64_t m, const MoeLayer& layer, float* y, Fp4Semantics semantics) const {
  check_moe_layer(layer, backend_);
  if (m <= 0) return;
  const std::int64_t hidden = layer.router.k, E = layer.router.n, K = layer.top_k;
  const std::int64_t inter = layer.experts[0].gate.n;
  auto gemm_for = [](const WeightMatrix& w, const GemmKernel* fp4, const GemmKernel* dense) {
    return w.kind == SchemeKind::NVFP4 ? fp4 : dense;
  };

  Workspace& r = workspace();

  // 1. Route.
  r.logits.resize(static_cast<std::size_t>(m * E));
  gemm_for(layer.router, g_.router_fp4, g_.router_dense)->run(x, m, layer.router, r.logits.data(), semantics);
  route(*vm_, r.logits.data(), m, E, K, layer.norm_topk_prob, r);

  // 2. Group (token, rank) slots by expert: slot order = expert, then token.
  std::vector<std::int64_t>& count = r.count;
  std::vector<std::int64_t>& offset = r.offset;
  std::vector<std::int64_t>& slot_of = r.slot_of;
  std::vector<std::int64_t>& fill = r.fill;
  count.assign(static_cast<std::size_t>(E) + 1, 0);
  offset.assign(static_cast<std::size_t>(E) + 1, 0);
  for (std::int32_t e : r.expert) ++count[static_cast<std::size_t>(e)];
  for (std::int64_t e = 0; e < E; ++e) offset[e + 1] = offset[e] + count[e];
  slot_of.resize(static_cast<std::size_t>(m * K));
  fill.assign(offset.begin(), offset.end() - 1);
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t i = 0; i < K; ++i) slot_of[t * K + i] = fill[r.expert[t * K + i]]++;
  std::uint64_t used = 0, used_bytes = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    if (count[e] == 0) continue;
    const MoeExpert& ex = layer.experts[static_cast<std::size_t>(e)];
    ++used;
    used_bytes += weight_bytes(ex.gate) + weight_bytes(ex.up) + weight_bytes(ex.down);
  }
  count_moe_call(used, used_bytes);
  // The element-wise steps (this gather, SiLU x up, the weighted sum) are split across the pool
  // by token or element: each output is computed by the same operations whatever the split. In
  // a 512-token prefill they were ~40 % of the samples, on one thread; decode sizes stay inline.
  constexpr std::int64_t kTokenGrain = 8, kElementGrain = 16384;
  // The per-slot buffers (m * top_k rows: 32 MiB each for a 512-token prefill of Qwen3-30B-A3B)
  // live in this thread's scratch: fresh allocations that size were mmap'd and page-faulted in
  // on every call. Every element is written before it is read (each slot is gathered once;
  // the expert tasks cover all rows of every used expert).
  const auto slots = static_cast<std::size_t>(m * K);
  float* xg = thread_scratch_as<float>(kScratchMoeFirst + 1, slots * static_cast<std::size_t>(hidden));
  float* gate = thread_scratch_as<float>(kScratchMoeFirst + 2, slots * static_cast<std::size_t>(inter));
  float* up = thread_scratch_as<float>(kScratchMoeFirst + 3, slots * static_cast<std::size_t>(inter));
  float* out = thread_scratch_as<float>(kScratchMoeFirst + 4, slots * static_cast<std::size_t>(hidden));
  parallel_for(m, kTokenGrain, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t)
      for (std::int64_t i = 0; i < K; ++i)
        std::memcpy(xg + slot_of[t * K + i] * hidden, x + t * hidden, static_cast<std::size_t>(hidden) * sizeof(float));
  });

  // 3. Expert GEMMs over (expert, projection) tasks, or (expert, projection, row slice) tasks
  // when there are too few experts per thread (moe_whole_projections): gate and up, then down.
  constexpr std::int64_t kManyTokens = 16;
  std::int64_t busy_experts = 0;
  for (std::int64_t e = 0; e < E; ++e) busy_experts += count[e] >= kManyTokens ? 1 : 0;
  const bool whole_rows = moe_whole_projections(static_cast<std::int64_t>(used), busy_experts, global_thread_pool().size());
  auto make_tasks = [&](std::int32_t first_proj, std::int32_t last_proj) -> const std::vector<Task>& {
    std::vector<Task>& tasks = r.tasks;
    tasks.clear();
    for (std::int64_t e = 0; e < E; ++e) {
      if (count[e] == 0) continue;
      for (std::int32_t p = first_proj; p <= last_proj; ++p) {
        const std::int64_t rows = p == 2 ? hidden : inter;
        // Slices: bigger when an expert has many tokens, so per-call setup (activation
        // packing) stays small next to the work. Decode: 128 rows (≈ 128 KB of gate/up
        // weights) measured 0-6 % faster than 64 on 30b-a3b (docs/perf.md, session 4).
        const std::int64_t slice = whole_rows ? rows : count[e] < kManyTokens ? 128 : 256;
        for (std::int64_t r0 = 0; r0 < rows; r0 += slice)
          tasks.push_back({static_cast<std::int32_t>(e), p, r0, std::min(rows, r0 + slice)});
      }
    }
    return tasks;
  };
  auto run_tasks = [&](const std::vector<Task>& tasks) {
    parallel_for(static_cast<std::int64_t>(tasks.size()), 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t ti = b; ti < e; ++ti) {
        if (ti + 1 < e) {
          const Task& next = tasks[static_cast<std::size_t>(ti + 1)];
          prefetch_task_start(task_weights(layer, next), next.r0, next.r1);
        }
        const Task& t = tasks[static_cast<std::size_t>(ti)];
        const WeightMatrix& w = task_weights(layer, t);
        const std::int64_t cnt = count[t.expert], first = offset[t.expert];
        const float* in = t.proj == 2 ? gate + first * inter : xg + first * hidden;
        float* dst = t.proj == 0 ? gate : t.proj == 1 ? up : out;
        const std::int64_t ld = t.proj == 2 ? hidden : inter, width = t.r1 - t.r0;
        const GemmKernel* gemm = gemm_for(w, g_.expert_fp4, g_.expert_dense);
        if (width == ld) {  // all rows: the expert's block of slot rows is the GEMM's output
          gemm->run(in, cnt, w, dst + first * ld, semantics);
          continue;
        }
        const WeightMatrix view = weight_rows_view(w, t.r0, t.r1);
        float* tmp = thread_scratch_as<float>(kScratchMoeFirst, static_cast<std::size_t>(cnt * width));
        gemm->run(in, cnt, view, tmp, semantics);
        for (std::int64_t i = 0; i < cnt; ++i)
          std::memcpy(dst + (first + i) * ld + t.r0, tmp + i * width, static_cast<std::size_t>(width) * sizeof(float));
      }
    });
  };
  run_tasks(make_tasks(0, 1));
  parallel_for(m * K * inter, kElementGrain, [&](std::int64_t i0, std::int64_t i1) {
    vm_->silu_mul(gate + i0, up + i0, i1 - i0);
  });
  run_tasks(make_tasks(2, 2));

  // 4. Weighted sum per token, in rank order (one fma per term).
  parallel_for(m, kTokenGrain, [&](std::int64_t t0, std::int64_t t1) {
    thread_local std::vector<const float*> rows;  // grows once per thread
    rows.resize(static_cast<std::size_t>(K));
    for (std::int64_t t = t0; t < t1; ++t) {
      for (std::int64_t i = 0; i < K; ++i) rows[static_cast<std::size_t>(i)] = out + slot_of[t * K + i] * hidden;
      vm_->weighted_sum(y + t * hidden, rows.data(), r.weight.data() + t * K, K, hidden);
    }
  });
}

}  // namespace fp4serve::kernels
