#pragma once
// The token mixers of Qwen3.5-MoE / Qwen3-Next decoder layers, run over the rows of several
// sequences at once: every projection is one GEMM over all rows; the conv1d, the delta rule and
// attention then run per sequence against that sequence's own state.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "model/causal_lm.h"
#include "model/model_weights.h"
#include "model/rope.h"

namespace fp4serve::hybrid {

struct Context {
  const ModelConfig* config = nullptr;
  kernels::KernelSet kernels;
  kernels::Fp4Semantics semantics = kernels::Fp4Semantics::W4A16;
  // y[m, w.n] = x[m, w.k] * W^T with the kernel for W's storage kind.
  void linear(const float* x, std::int64_t m, const kernels::WeightMatrix& w, float* y) const;
};

// The token mixers' scratch buffers, re-used across calls (see model/workspace_pool.h).
struct LayerWorkspace {
  std::vector<float> qg, q, gate, k, v, attn;                     // gated attention
  std::vector<float> qkv, z, b, a, qkvz, ba, core, conv, lq, lk, lv;  // gated DeltaNet
};

// Rows [begin, begin + m) of the batch belong to one sequence with this state.
struct SequenceRows {
  std::int64_t begin = 0;
  std::int64_t m = 0;
  const SequenceState* state = nullptr;
};

// Qwen3_5MoeGatedDeltaNet.forward (and Qwen3NextGatedDeltaNet's, whose fused projections are
// reordered into the same q|k|v, z, b, a): x [rows, hidden] -> out [rows, hidden]. Updates each
// sequence's conv and recurrent state of linear layer `linear_index`.
void gated_deltanet(const Context& ctx, const LinearAttentionWeights& w, std::int64_t linear_index, const float* x,
                    std::span<const SequenceRows> seqs, std::int64_t rows, LayerWorkspace& ws, float* out);

// Qwen3_5MoeAttention.forward: q_proj gives query and output gate per head, q/k RMSNorm, partial
// RoPE (cos/sin per row), paged KV write of attention layer `attention_index`, causal GQA
// attention, out * sigmoid(gate), o_proj.
void gated_attention(const Context& ctx, const AttentionWeights& w, std::int64_t attention_index,
                     const RotaryEmbedding& rope, const float* cos, const float* sin, const float* x,
                     std::span<const SequenceRows> seqs, std::int64_t rows, LayerWorkspace& ws, float* out);

}  // namespace fp4serve::hybrid
