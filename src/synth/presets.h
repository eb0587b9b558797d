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
};
void apply_overrides(ModelConfig& config, const ShapeOverrides& overrides);

}  // namespace fp4serve::synth
