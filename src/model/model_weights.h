#pragma once
// The parameters of a qwen3 / qwen3_moe checkpoint, laid out as the modeling file's modules.
// Every Linear (and the embedding table) is a kernels::WeightMatrix: a view over the
// memory-mapped safetensors with its quantization scheme (BF16/F16/F32, NVFP4 from ModelOpt or
// compressed-tensors, FP8 per tensor) as resolve_quantization decided it; nothing large is
// copied. RMSNorm gains are small and become fp32 vectors.
//
// Loading checks each tensor the model needs against the config: a missing, mis-shaped or
// wrong-dtype tensor is an Error naming it and the checkpoint directory.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/model_config.h"
#include "formats/quant_scheme.h"
#include "kernels/kernels.h"

namespace fp4serve {

struct AttentionWeights {
  kernels::WeightMatrix q_proj, k_proj, v_proj, o_proj;
  std::vector<float> q_norm, k_norm;  // [head_dim], shared by all heads
};

// SwiGLU MLP of a dense layer: down_proj(silu(gate_proj(x)) * up_proj(x)).
struct MlpWeights {
  kernels::WeightMatrix gate_proj, up_proj, down_proj;
};

// Gated DeltaNet (linear_attn) of a Qwen3.5 / Qwen3-Next linear-attention layer. The input
// projections come in one of two checkpoint layouts; the model turns both into the same
// [q | k | v] (conv input), z, b and a.
enum class LinearAttnLayout {
  Split,        // Qwen3.5: in_proj_qkv [2*key_dim + value_dim, H] (contiguous q|k|v), in_proj_z, in_proj_b, in_proj_a
  GroupedQkvz,  // Qwen3-Next: in_proj_qkvz / in_proj_ba, rows grouped per key head [q k v z] / [b a]
};
struct LinearAttentionWeights {
  LinearAttnLayout layout = LinearAttnLayout::Split;
  kernels::WeightMatrix in_proj_qkv, in_proj_z, in_proj_b, in_proj_a;  // Split
  kernels::WeightMatrix in_proj_qkvz, in_proj_ba;                       // GroupedQkvz
  std::vector<float> conv1d;            // [kernel, conv_dim]: the checkpoint's [conv_dim, 1, kernel] transposed
  std::vector<float> A_log, dt_bias;    // [num_v_heads], widened to fp32
  std::vector<float> norm;              // [head_v_dim] gated RMSNorm gain (plain w, not 1 + w)
  kernels::WeightMatrix out_proj;       // [H, value_dim]
};

struct DecoderLayerWeights {
  // RMSNorm gains hold the factor applied to the normalised row: w, or 1 + w (computed in fp32,
  // as transformers does) for the zero-centred norms of Qwen3.5 / Qwen3-Next.
  std::vector<float> input_layernorm, post_attention_layernorm;
  LayerType type = LayerType::FullAttention;
  AttentionWeights self_attn;           // full attention (q_proj is [2 * heads * head_dim, H] when gated)
  LinearAttentionWeights linear_attn;   // linear attention
  bool sparse_moe = false;  // config.is_moe_layer(layer): `moe` is used, else `mlp`
  kernels::MoeLayer moe;
  MlpWeights mlp;
  // Qwen3.5 / Qwen3-Next MoE blocks add sigmoid(shared_expert_gate(x)) * shared_expert(x).
  bool has_shared_expert = false;
  MlpWeights shared_expert;
  kernels::WeightMatrix shared_expert_gate;  // [1, H]
  // Fused 3-D expert tensors (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]) as
  // whole matrices [E*2I, H] / [E*H, I], for scans; `moe.experts` holds per-expert views into them.
  bool fused_experts = false;
  kernels::WeightMatrix fused_gate_up, fused_down;
};

// One named matrix, for scans and reports.
struct NamedMatrix {
  std::string name;  // the weight tensor's name, e.g. "model.layers.0.self_attn.q_proj.weight"
  const kernels::WeightMatrix* matrix = nullptr;
};

struct ModelWeights {
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;  // owns the mappings every WeightMatrix points into
  ResolvedQuantization quantization;
  kernels::WeightMatrix embed_tokens;  // [vocab, hidden]
  std::vector<DecoderLayerWeights> layers;
  std::vector<float> norm;            // final RMSNorm
  kernels::WeightMatrix lm_head;      // [vocab, hidden]; the embedding table when tied
  std::vector<std::string> warnings;  // e.g. checkpoint tensors the model does not use

  // Every matrix with its tensor name (the tied lm_head appears once, as the embedding).
  std::vector<NamedMatrix> matrices() const;
  // NVFP4 matrices that lack a static input scale (W4A4 cannot run on them).
  std::vector<std::string> nvfp4_without_input_scale() const;
  std::int64_t nvfp4_matrices() const;
};

// Opens `model_dir` (config.json, quantization config, safetensors) and builds the views.
// Supports qwen3, qwen3_moe, qwen3_next and qwen3_5_moe (per-expert or fused expert tensors).
ModelWeights load_model_weights(const std::filesystem::path& model_dir);

// --check-weights: scans every parameter and scale for NaN and Inf (E4M3 codes 0x7F/0xFF are
// NaN; E2M1 codes cannot be). Touches every byte of the checkpoint.
struct WeightCheckReport {
  std::int64_t tensors = 0;       // tensors scanned (weights, block scales, gains)
  std::uint64_t values = 0;       // elements scanned
  std::vector<std::string> problems;  // one line per bad tensor, naming it
  bool ok() const { return problems.empty(); }
};
WeightCheckReport check_weights(const ModelWeights& weights, unsigned threads = 0);

}  // namespace fp4serve
