#pragma once
// The MoE driver every SIMD backend shares: route each token (router GEMM, fp32 softmax, top-k),
// group the (token, expert) pairs by expert, run each expert's gate/up/down GEMMs once on all
// of its tokens, and sum the weighted expert outputs per token in rank order (as the reference).
// Parallel over (expert, projection) tasks, or (expert, projection, row slice) tasks when there
// are too few experts per thread (moe_whole_projections); the GEMMs inside run on one thread.
#include <string>

#include "kernels/kernels.h"
#include "kernels/vector_math.h"

namespace fp4serve::kernels {

struct MoeGemms {
  const GemmKernel* expert_fp4 = nullptr;    // NVFP4 expert weights
  const GemmKernel* expert_dense = nullptr;  // Dense / FP8 expert weights
  // The router must compute in fp32: a bf16-rounded logit can swap the k-th and (k+1)-th expert
  // of a token, which changes that token's output by a whole expert.
  const GemmKernel* router_fp4 = nullptr;
  const GemmKernel* router_dense = nullptr;
};

class GroupedMoeKernel final : public MoeKernel {
 public:
  // The element-wise steps (router softmax, SiLU x up, weighted sum) use `vm`, the table of the
  // backend's instruction set.
  GroupedMoeKernel(std::string backend, MoeGemms gemms, const VectorMath& vm)
      : backend_(std::move(backend)), g_(gemms), vm_(&vm) {}
  void run(const float* x, std::int64_t m, const MoeLayer& layer, float* y, Fp4Semantics semantics) const override;
  const VectorMath& vector_math() const { return *vm_; }
  const MoeGemms& gemms() const { return g_; }

 private:
  std::string backend_;
  MoeGemms g_;
  const VectorMath* vm_;
};

// Rows [r0, r1) of w as a matrix of its own (same data, no copy).
WeightMatrix weight_rows_view(const WeightMatrix& w, std::int64_t r0, std::int64_t r1);

// Whether a MoE call runs each expert projection as one task over all its rows (true) or splits
// the rows into slices (128 rows; 256 for an expert with >= 16 tokens). Whole projections when
// there are enough tasks to keep `threads` busy: at least 4 used experts per thread (the down
// phase has one task per expert), or, in prefill, 2 per thread with >= 16 tokens each (`busy`).
// Then each GEMM streams the whole matrix (≈ 0.9 MB for 30b-a3b) and writes straight into the
// slot buffers; a 128-row slice began a fresh stream every 48-128 KB, checked its scales again,
// compared the memo's activations and copied its outputs out (batch 16 on 30b-a3b 1.05-1.07x,
// batch 1 on 2 threads 1.02-1.05x; docs/perf.md, session 30). Few experts per thread (decode on many
// cores) keep the slices so that top_k experts still occupy every core.
bool moe_whole_projections(std::int64_t used_experts, std::int64_t busy_experts, std::int64_t threads);

// Throws Error naming the backend and the mismatch when layer's shapes do not fit together.
void check_moe_layer(const MoeLayer& layer, const std::string& backend);

}  // namespace fp4serve::kernels
