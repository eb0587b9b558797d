#pragma once
// What a checkpoint tensor is for, read from its Hugging Face name. `inspect` uses it to count
// active parameters and bytes read per token; the model loader uses it to find its weights.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fp4serve {

enum class TensorRole {
  Embedding,        // embed_tokens: one row read per token
  LmHead,           // lm_head: read whole per token
  Norm,             // RMSNorm gains
  Attention,        // self_attn.* (full attention)
  LinearAttention,  // linear_attn.* (Gated DeltaNet)
  Router,           // mlp.gate (expert router)
  RoutedExpert,     // mlp.experts.* : only top-k of them per token
  SharedExpert,     // mlp.shared_expert.* and shared_expert_gate
  DenseMlp,         // mlp.{gate,up,down}_proj of dense layers
  Mtp,              // multi-token-prediction head: not used for decoding
  Vision,           // vision tower: not used for text
  Other,
};

std::string_view tensor_role_name(TensorRole role);

struct TensorRoleInfo {
  TensorRole role = TensorRole::Other;
  std::int64_t layer = -1;   // decoder layer index, -1 when none
  std::int64_t expert = -1;  // routed expert index, -1 when none or fused
  // The name with layer and expert indices replaced by '*', for grouping
  // (e.g. "model.layers.*.mlp.experts.*.up_proj.weight").
  std::string group;
};

TensorRoleInfo classify_tensor(std::string_view name);

// Tensors that hold quantization metadata rather than parameters (scales, global scales).
bool is_quant_metadata_tensor(std::string_view name);

}  // namespace fp4serve
