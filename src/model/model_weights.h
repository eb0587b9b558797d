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

struct DecoderLayerWeights {
  std::vector<float> input_layernorm, post_attention_layernorm;
  AttentionWeights self_attn;
  bool sparse_moe = false;  // config.is_moe_layer(layer): `moe` is used, else `mlp`
  kernels::MoeLayer moe;
  MlpWeights mlp;
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
// Supports qwen3 and qwen3_moe; other architectures are an Error naming model_type.
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
