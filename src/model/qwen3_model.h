#pragma once
// Qwen3-MoE (and dense Qwen3, the same model without experts), written to mirror transformers'
// modeling_qwen3_moe.py / modeling_qwen3.py. Activations are fp32 throughout; every matrix
// product goes through the KernelSet (dense GEMM, FP4 GEMM, MoE, attention), while the cheap
// element-wise parts (embedding lookup, RMSNorm, RoPE, SiLU, residual adds) are plain loops here.
//
// forward() takes the new tokens of several sequences at once (see model/causal_lm.h): their
// rows are stacked so every Linear and the MoE block run once over all of them; RoPE, the KV
// writes and attention are per row / per sequence.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "model/causal_lm.h"
#include "model/model_weights.h"
#include "model/rope.h"
#include "model/workspace_pool.h"

namespace fp4serve {

class Qwen3Model final : public CausalLM {
 public:
  // `semantics` chooses how NVFP4 weights meet activations: W4A16 (default) or W4A4, which
  // needs a static input_scale on every NVFP4 matrix (an Error names the first without one).
  Qwen3Model(ModelWeights weights, kernels::KernelSet kernel_set,
             kernels::Fp4Semantics semantics = kernels::Fp4Semantics::W4A16);
  ~Qwen3Model() override;

  void set_kernels(kernels::KernelSet kernel_set) override;
  const kernels::KernelSet& kernels() const override { return kernels_; }
  const ModelConfig& config() const override { return weights_.config; }
  const ModelWeights& weights() const override { return weights_; }
  kernels::Fp4Semantics semantics() const override { return semantics_; }
  StateSpec state_spec() const override;

  // Thread-safe for chunks of distinct sequences (the model is read-only; each call borrows
  // its own scratch workspace, kept for re-use so steady-state calls do not allocate).
  void forward(std::span<const SequenceChunk> chunks, std::span<float> logits) const override;

 private:
  struct Workspace;
  // y[m, W.n] = x[m, W.k] * W^T through the kernel for W's storage kind.
  void linear(const float* x, std::int64_t m, const kernels::WeightMatrix& w, float* y) const;
  void attention(const DecoderLayerWeights& layer, std::int64_t layer_index, std::span<const SequenceChunk> chunks,
                 Workspace& s, float* out) const;
  void dense_mlp(const MlpWeights& mlp, std::int64_t rows, Workspace& s, float* out) const;
  // Checks the chunks and the logits buffer; returns the number of logits rows.
  std::int64_t validate(std::span<const SequenceChunk> chunks, std::size_t logits_size) const;

  ModelWeights weights_;
  kernels::KernelSet kernels_;
  kernels::Fp4Semantics semantics_;
  RotaryEmbedding rope_;
  WorkspacePool<Workspace> workspaces_;
};

}  // namespace fp4serve
