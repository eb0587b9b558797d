#pragma once
// The JSON files that sit next to the weights of a Hugging Face checkpoint, as the real
// exporters write them: config.json (with quantization_config), hf_quant_config.json
// (ModelOpt), generation_config.json.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/model_config.h"

namespace fp4serve::synth {

enum class WeightFormat { BF16, ModelOptNvfp4, CompressedTensorsNvfp4 };
WeightFormat weight_format_from_name(const std::string& name);  // "nvfp4", "bf16", "compressed-tensors"
const char* weight_format_name(WeightFormat format);

// Which Linear modules get NVFP4. `All` is ModelOpt's NVFP4_DEFAULT_CFG (every Linear but the
// router and lm_head; for the hybrids also the Gated DeltaNet in_proj_a/in_proj_b/conv1d and
// shared_expert_gate, as ModelOpt's qwen3_5_moe recipes leave them); `Experts` mirrors releases
// that quantize only the routed experts (nvidia/Qwen3-235B-A22B-NVFP4, Qwen3.5-397B-A17B-NVFP4).
enum class QuantScope { All, Experts };
QuantScope quant_scope_from_name(const std::string& name);
// What the real NVFP4 release of the architecture does: Experts for the hybrids, All otherwise.
QuantScope default_quant_scope(Arch arch);

// Modules left unquantized, as exporters list them (fnmatch wildcards). PerLayer is ModelOpt's
// form, which for the hybrids' Experts scope is shaped like the Qwen3.5 NVFP4 release's `ignore`
// (one entry per layer for its shared expert, shared-expert gate and attention); Wildcards
// says the same with `layers.*` patterns, as compressed-tensors configs do (one regex each).
// Both forms leave exactly the same modules unquantized.
enum class ExcludeForm { PerLayer, Wildcards };
std::vector<std::string> excluded_modules(const ModelConfig& config, QuantScope scope,
                                          ExcludeForm form = ExcludeForm::PerLayer);

nlohmann::json config_json(const ModelConfig& config, WeightFormat format, QuantScope scope);
nlohmann::json hf_quant_config_json(const ModelConfig& config, QuantScope scope);
nlohmann::json generation_config_json(const ModelConfig& config);

}  // namespace fp4serve::synth
