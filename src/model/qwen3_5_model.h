#pragma once
// Qwen3.5-MoE (qwen3_5_moe) and Qwen3-Next (qwen3_next): hybrid decoders that interleave Gated
// DeltaNet linear-attention layers with gated full-attention layers, each followed by a sparse
// MoE block with a sigmoid-gated shared expert (or, in Qwen3-Next's mlp_only_layers, a dense
// MLP). Written to mirror transformers' modeling_qwen3_5_moe.py / modeling_qwen3_next.py; the
// layer code lives in hybrid_layers.h, the element-wise pieces in hybrid_ops.h.
//
// State per sequence (StateSpec): paged KV for the full-attention layers; for each linear layer
// a conv state [K-1, conv_dim] and a recurrent state [Hv, dk, dv], fp32.
#include <memory>

#include "kernels/kernels.h"
#include "model/causal_lm.h"
#include "model/model_weights.h"

namespace fp4serve {

// `weights` must be a qwen3_next or qwen3_5_moe checkpoint (an Error otherwise). W4A4 needs a
// static input_scale on every NVFP4 weight (an Error names the first without one).
std::unique_ptr<CausalLM> make_qwen3_5_model(ModelWeights weights, kernels::KernelSet kernel_set,
                                             kernels::Fp4Semantics semantics = kernels::Fp4Semantics::W4A16);

}  // namespace fp4serve
