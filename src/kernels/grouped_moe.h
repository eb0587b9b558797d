#pragma once
// The MoE driver every SIMD backend shares: route each token (router GEMM, fp32 softmax, top-k),
// group the (token, expert) pairs by expert, run each expert's gate/up/down GEMMs once on all
// of its tokens, and sum the weighted expert outputs per token in rank order (as the reference).
// Parallel over (expert, row slice) pairs so decode (one token, top_k experts of a few hundred
// rows each) still keeps every core busy; the GEMMs inside run on one thread.
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

// Throws Error naming the backend and the mismatch when layer's shapes do not fit together.
void check_moe_layer(const MoeLayer& layer, const std::string& backend);

}  // namespace fp4serve::kernels
