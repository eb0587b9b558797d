#pragma once
// The quantization config a checkpoint ships (ModelOpt hf_quant_config.json and/or
// config.json `quantization_config`; compressed-tensors `quantization_config`), reduced to what
// the engine needs: which modules are quantized, how, and which are left out.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fp4serve {

enum class QuantProducer { None, ModelOpt, CompressedTensors };

namespace detail {
struct PatternIndex;  // precomputed lookup structure over an ignore list (quant_config.cpp)
}

// What a module's weights are, as the config declares it.
enum class WeightFormat { Unquantized, NVFP4, FP8 };

struct ModuleQuantDecl {
  WeightFormat weight = WeightFormat::Unquantized;
  bool activations_quantized = false;  // W4A4 (NVFP4) or W8A8 (FP8) declared
  std::int64_t group_size = 0;         // 16 for NVFP4
};

struct QuantConfig {
  QuantProducer producer = QuantProducer::None;
  std::string producer_version;
  std::string quant_algo;           // ModelOpt: NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION; CT: format
  ModuleQuantDecl default_decl;     // applies to every Linear not ignored
  std::vector<std::string> ignore;  // fnmatch patterns, or "re:<regex>" (compressed-tensors)
  std::map<std::string, ModuleQuantDecl> per_module;  // MIXED_PRECISION quantized_layers
  // compressed-tensors config_groups whose targets name modules (exact names, fnmatch patterns or
  // "re:" regexes) instead of the "Linear" class; checked in order before default_decl.
  std::vector<std::pair<std::string, ModuleQuantDecl>> pattern_decls;
  std::string kv_cache_quant_algo;  // "" when none
  std::string source;               // file(s) it came from, for messages
  // Index over `ignore` built by the parsers so that matching ~100k expert modules against a few
  // hundred patterns stays fast. Used only while it still describes `ignore` exactly; after an edit
  // of `ignore` (or when null) a temporary index is built per query, which is correct but slower.
  std::shared_ptr<const detail::PatternIndex> ignore_index;

  // The config's declaration for one module (e.g. "model.layers.0.mlp.experts.3.up_proj").
  ModuleQuantDecl decl_for(std::string_view module) const;
  bool is_ignored(std::string_view module) const;
  // The first ignore pattern that matches `module`, or nullptr (for messages).
  const std::string* ignore_match(std::string_view module) const;
};

// Reads hf_quant_config.json and/or config.json's quantization_config from `model_dir`.
// Both present and disagreeing is an error. No quantization at all yields producer None.
QuantConfig load_quant_config(const std::filesystem::path& model_dir);
// The same from parsed documents (either may be null); `source` names them in errors.
// `source` is the checkpoint directory (or any label): errors name "<source>/hf_quant_config.json"
// and "<source>/config.json".
QuantConfig parse_quant_config(const nlohmann::json* hf_quant_config, const nlohmann::json* config_json,
                               std::string_view source);
// The same with each file named explicitly.
QuantConfig parse_quant_config(const nlohmann::json* hf_quant_config, std::string_view hf_quant_config_name,
                               const nlohmann::json* config_json, std::string_view config_json_name);

// Whether an ignore/exclude entry covers `module`:
//  - "re:<regex>": ECMAScript regex anchored at the start of the name (Python re.match, as
//    compressed-tensors and vLLM use it);
//  - a plain name with no wildcard: that module and everything under it ("x" covers "x.y");
//  - "x*" where x is a literal not ending in '.': ModelOpt's summarized prefix, i.e. "x" and
//    "x.<anything>" (so "layers.1*" does not cover "layers.10");
//  - any other fnmatch pattern (`*` crosses dots, `?`, `[seq]`, `[!seq]`): matches the name or one
//    of its ancestors.
// The name is tried as written and with its "model.language_model." / "language_model.model." /
// "language_model." / "model." prefix swapped for each of the others (or stripped), as vLLM does.
bool module_pattern_matches(std::string_view pattern, std::string_view module);
// The spellings of `module` that module_pattern_matches tries, the name itself first.
std::vector<std::string> module_name_variants(std::string_view module);

}  // namespace fp4serve
