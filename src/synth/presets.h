#pragma once
// Model shapes `synth` can write: small ones that run in tests, and the real published shapes
// (random weights) for benchmarks and for seeing what serving them takes.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/model_config.h"

namespace fp4serve::synth {

// Names of the presets of one architecture ("tiny", "30b-a3b", ...).
std::vector<std::string> preset_names(Arch arch);
// Throws Error naming the preset and listing the valid ones when unknown.
ModelConfig preset_config(Arch arch, std::string_view preset);
// "qwen3_moe" -> Arch::Qwen3Moe; Error listing the supported ones otherwise.
Arch arch_from_name(std::string_view name);

// Command-line overrides applied on top of a preset; unset fields keep the preset's value.
struct ShapeOverrides {
  std::optional<std::int64_t> hidden, layers, heads, kv_heads, head_dim, intermediate;
  std::optional<std::int64_t> experts, experts_per_tok, moe_intermediate, vocab;
  // Hybrids (qwen3_next, qwen3_5_moe) only.
  std::optional<std::int64_t> shared_intermediate, full_attention_interval;
};
void apply_overrides(ModelConfig& config, const ShapeOverrides& overrides);

// Hybrid layer pattern as transformers derives it: layer i is full attention iff (i+1) % interval == 0.
std::vector<LayerType> hybrid_layer_types(std::int64_t layers, std::int64_t full_attention_interval);
// The interval that produces `config.layer_types`, or 0 when the pattern is not of that form.
std::int64_t full_attention_interval(const ModelConfig& config);

}  // namespace fp4serve::synth
