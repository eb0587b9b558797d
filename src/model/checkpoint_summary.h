#pragma once
// What a checkpoint is, computed from headers and configs only: shape, parameter counts (total
// and active per token), bytes by dtype, quantization per module group, memory, and bytes read
// per decoded token (the input of the decode roofline). `fp4serve inspect` prints it.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/model_config.h"
#include "formats/quant_scheme.h"

namespace fp4serve {

struct ModuleGroup {
  std::string group;   // e.g. "model.layers.*.mlp.experts.*.up_proj"
  std::string role;    // tensor_role_name
  std::string scheme;  // "NVFP4", "FP8", "BF16", ...
  std::int64_t modules = 0;
  std::int64_t params = 0;
  std::uint64_t bytes = 0;  // weight plus its scales
};

struct CheckpointSummary {
  std::filesystem::path dir;
  ModelConfig config;
  std::string quant_producer;  // "modelopt", "compressed-tensors", "none"
  std::string quant_algo;
  bool activation_scales = false;  // input scales present: W4A4 (or W8A8) capable
  std::size_t files = 0;
  std::size_t tensors = 0;
  std::uint64_t total_bytes = 0;
  std::map<std::string, std::uint64_t> bytes_by_dtype;
  std::int64_t params_total = 0;
  std::int64_t params_active = 0;  // per token: top-k routed experts; MTP and vision excluded
  std::vector<ModuleGroup> groups;
  std::vector<std::string> excluded;  // the config's ignore / exclude_modules list
  std::uint64_t resident_weight_bytes = 0;  // weights the text model touches (no MTP, vision)
  std::uint64_t weight_bytes_per_token = 0;  // read once per decoded token
  // The routed experts' share of it (top-k of each MoE layer's experts): a batch of sequences
  // reads the rest once per step and each expert any of them routes to once.
  std::uint64_t routed_expert_bytes_per_token = 0;
  std::uint64_t kv_bytes_per_token = 0;      // BF16 K and V of the full-attention layers only
  // Per sequence and fixed-size (independent of length): the fp32 state of the Gated DeltaNet
  // layers. The conv keeps its last kernel-1 inputs per channel of [q|k|v]; the recurrence one
  // key_head_dim x value_head_dim matrix per value head.
  std::uint64_t conv_state_bytes = 0;
  std::uint64_t recurrent_state_bytes = 0;
  std::vector<std::string> warnings;

  std::uint64_t linear_state_bytes() const { return conv_state_bytes + recurrent_state_bytes; }
};

// "45 linear_attention + 15 full_attention" (or "48 full_attention").
std::string layer_pattern(const ModelConfig& config);

CheckpointSummary summarize_checkpoint(const std::filesystem::path& model_dir);
nlohmann::json summary_to_json(const CheckpointSummary& summary);
std::string summary_to_text(const CheckpointSummary& summary);

}  // namespace fp4serve
