#pragma once
// The parameters a Hugging Face checkpoint of a given config holds, named and shaped as the
// modeling file does. `synth` writes exactly these; the model loader checks against them.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/model_config.h"

namespace fp4serve {

enum class ParamKind {
  Linear,     // [out, in] weight of an nn.Linear: the ones quantization applies to
  Embedding,  // [vocab, hidden]
  NormGain,   // [dim] RMSNorm weight
  Conv1d,     // [channels, 1, kernel] depthwise causal conv weight (linear_attn.conv1d)
  Vector,     // [n] bare nn.Parameter whose tensor is named `module` itself (linear_attn.A_log, dt_bias)
};

struct ParamSpec {
  std::string module;  // e.g. "model.layers.0.mlp.experts.3.up_proj"; see tensor_name()
  ParamKind kind = ParamKind::Linear;
  std::vector<std::int64_t> shape;
  // Residual-branch outputs (o_proj, down_proj, out_proj) are initialised smaller so random
  // models keep bounded activations through many layers.
  bool residual_output = false;
  // NormGain only: the model multiplies by (1 + w) (Qwen3-Next / Qwen3.5), so a neutral gain is
  // stored as 0. The Gated DeltaNet output norm (linear_attn.norm) is plain `w`, neutral at 1.
  bool zero_centered = false;
  // Linear only: the published NVFP4 release of this architecture stores the module as NVFP4.
  // Qwen3-MoE and the hybrids quantize the routed experts only (attention, linear attention,
  // shared experts, routers and lm_head stay BF16); dense Qwen3 quantizes every Linear but lm_head.
  bool release_nvfp4 = false;

  // The checkpoint tensor: module + ".weight", or the module itself for a Vector.
  std::string tensor_name() const { return kind == ParamKind::Vector ? module : module + ".weight"; }
};

// Every parameter of `config` in checkpoint order (embeddings, layers in order, final norm,
// lm_head), for qwen3, qwen3_moe, qwen3_next and qwen3_5_moe. Routed experts are per-expert
// tensors (`mlp.experts.E.{gate,up,down}_proj`), as ModelOpt exports them; MTP and vision
// weights are not part of the text model and not listed.
std::vector<ParamSpec> weight_layout(const ModelConfig& config);

}  // namespace fp4serve
