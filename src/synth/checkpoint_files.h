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
// router and lm_head); `Experts` mirrors releases that quantize only the routed experts.
enum class QuantScope { All, Experts };
QuantScope quant_scope_from_name(const std::string& name);

// Modules left unquantized, as exporters list them (fnmatch wildcards).
std::vector<std::string> excluded_modules(const ModelConfig& config, QuantScope scope);

nlohmann::json config_json(const ModelConfig& config, WeightFormat format, QuantScope scope);
nlohmann::json hf_quant_config_json(const ModelConfig& config, QuantScope scope);
nlohmann::json generation_config_json(const ModelConfig& config);

}  // namespace fp4serve::synth
