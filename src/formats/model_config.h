#pragma once
// config.json of the supported architectures, parsed into one typed struct. Qwen3.5-MoE nests the
// text model under `text_config`; both that and the flat form are accepted.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fp4serve {

enum class Arch { Qwen3, Qwen3Moe, Qwen3Next, Qwen3_5Moe };
enum class LayerType { FullAttention, LinearAttention };

std::string_view arch_name(Arch arch);  // the config's model_type, e.g. "qwen3_moe"

struct RopeScaling {
  std::string type = "default";  // "default" (none), "linear", "yarn", ...
  double factor = 1.0;
  std::int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // 0 = derive from factor (yarn)
};

struct ModelConfig {
  Arch arch = Arch::Qwen3Moe;
  std::string model_type;         // as written in the file
  std::string weight_prefix;      // "model." or "model.language_model." (Qwen3.5 multimodal)

  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;  // dense MLP width (qwen3, mlp_only_layers)
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool attn_output_gate = false;       // gated attention (qwen3_next, qwen3_5_moe)
  bool zero_centered_norm = false;     // RMSNorm gain is (1 + w)

  // Mixture of experts (num_experts == 0 for dense qwen3).
  std::int64_t num_experts = 0;
  std::int64_t num_experts_per_tok = 0;
  std::int64_t moe_intermediate_size = 0;
  std::int64_t shared_expert_intermediate_size = 0;  // 0 = no shared expert
  bool norm_topk_prob = false;
  std::int64_t decoder_sparse_step = 1;
  std::vector<std::int64_t> mlp_only_layers;

  // Hybrid linear attention (Gated DeltaNet); layer_types has one entry per layer for every arch.
  std::vector<LayerType> layer_types;
  std::int64_t linear_conv_kernel_dim = 0;
  std::int64_t linear_key_head_dim = 0;
  std::int64_t linear_value_head_dim = 0;
  std::int64_t linear_num_key_heads = 0;
  std::int64_t linear_num_value_heads = 0;

  std::int64_t bos_token_id = -1;
  std::vector<std::int64_t> eos_token_ids;

  bool is_moe() const { return num_experts > 0; }
  // Whether layer `layer` uses the sparse MoE block (else a dense MLP).
  bool is_moe_layer(std::int64_t layer) const;
  std::int64_t rotary_dim() const;
};

// Parses a config.json document; `source` names the file in errors. Unknown architectures,
// missing required fields and inconsistent values (e.g. heads not dividing) are errors.
ModelConfig parse_model_config(const nlohmann::json& doc, std::string_view source);
ModelConfig load_model_config(const std::filesystem::path& model_dir);

}  // namespace fp4serve
