#pragma once
// Generic halves of the SIMD linear-attention kernels: argument checks, the transcendental parts
// (SiLU, exp of the log decay) and the conv state update run here, compiled without ISA flags;
// the ISA cores (isa_kernels.h) do the multiply-adds. The transcendentals go through the
// backend's VectorMath table (exp_approx, within 2 ulp of std::exp): glibc's scalar expf was
// 1-1.5 % of a Qwen3.5-shaped step or prefill (docs/perf.md, session 38).
#include <cstdint>
#include <string>

#include "kernels/kernels.h"
#include "kernels/vector_math.h"

namespace fp4serve::kernels {

// Writes the conv pre-activations sum_j w[j, c] x'[t + j, c] to args.out; reads args.state.
using Conv1dCore = void (*)(const Conv1dArgs& args);
// The delta rule with decay[t * num_v_heads + h] = exp(g) already computed; updates args.state.
using DeltaRuleCore = void (*)(const DeltaRuleArgs& args, const float* decay);

class SimdConv1dKernel final : public Conv1dKernel {
 public:
  SimdConv1dKernel(std::string backend, Conv1dCore core, const VectorMath& vm)
      : backend_(std::move(backend)), core_(core), vm_(&vm) {}
  void run(const Conv1dArgs& args) const override;

 private:
  std::string backend_;
  Conv1dCore core_;
  const VectorMath* vm_;
};

class SimdDeltaRuleKernel final : public DeltaRuleKernel {
 public:
  SimdDeltaRuleKernel(std::string backend, DeltaRuleCore core, const VectorMath& vm)
      : backend_(std::move(backend)), core_(core), vm_(&vm) {}
  void run(const DeltaRuleArgs& args) const override;

 private:
  std::string backend_;
  DeltaRuleCore core_;
  const VectorMath* vm_;
};

}  // namespace fp4serve::kernels
