#pragma once
// Generic halves of the SIMD linear-attention kernels: argument checks, the transcendental parts
// (SiLU, exp of the log decay) and the conv state update run here, compiled without ISA flags;
// the ISA cores (isa_kernels.h) do the multiply-adds.
#include <cstdint>
#include <string>

#include "kernels/kernels.h"

namespace fp4serve::kernels {

// Writes the conv pre-activations sum_j w[j, c] x'[t + j, c] to args.out; reads args.state.
using Conv1dCore = void (*)(const Conv1dArgs& args);
// The delta rule with decay[t * num_v_heads + h] = exp(g) already computed; updates args.state.
using DeltaRuleCore = void (*)(const DeltaRuleArgs& args, const float* decay);

class SimdConv1dKernel final : public Conv1dKernel {
 public:
  SimdConv1dKernel(std::string backend, Conv1dCore core) : backend_(std::move(backend)), core_(core) {}
  void run(const Conv1dArgs& args) const override;

 private:
  std::string backend_;
  Conv1dCore core_;
};

class SimdDeltaRuleKernel final : public DeltaRuleKernel {
 public:
  SimdDeltaRuleKernel(std::string backend, DeltaRuleCore core) : backend_(std::move(backend)), core_(core) {}
  void run(const DeltaRuleArgs& args) const override;

 private:
  std::string backend_;
  DeltaRuleCore core_;
};

}  // namespace fp4serve::kernels
