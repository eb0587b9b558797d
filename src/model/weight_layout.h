#pragma once
// The parameters a Hugging Face checkpoint of a given config holds, named and shaped as the
// modeling file does. `synth` writes exactly these; the model loader will check against them.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/model_config.h"

namespace fp4serve {

enum class ParamKind {
  Linear,     // [out, in] weight of an nn.Linear: the ones quantization applies to
  Embedding,  // [vocab, hidden]
  NormGain,   // [dim] RMSNorm weight
};

struct ParamSpec {
  std::string module;  // e.g. "model.layers.0.mlp.experts.3.up_proj"; the tensor is module + ".weight"
  ParamKind kind = ParamKind::Linear;
  std::vector<std::int64_t> shape;
  // Residual-branch outputs (o_proj, down_proj) are initialised smaller so random models keep
  // bounded activations through many layers.
  bool residual_output = false;
};

// Every parameter of `config` in checkpoint order (embeddings, layers in order, final norm,
// lm_head). Supports qwen3 and qwen3_moe; hybrid architectures throw Error for now.
std::vector<ParamSpec> weight_layout(const ModelConfig& config);

}  // namespace fp4serve
