#pragma once
// Everything a command needs to generate from a checkpoint directory, loaded in one place:
// the weights, the kernels the registry chose and validated for them, the model, the tokenizer
// and chat template when the directory has them, and the stop tokens. `run`, `chat` (and later
// the server) start from here.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/generation_config.h"
#include "kernels/registry.h"
#include "model/model_weights.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"

namespace fp4serve::engine {

struct RuntimeOptions {
  kernels::BackendOptions backends;  // semantics: W4A16 (default) or W4A4
  bool check_weights = false;        // scan weights and scales for NaN/Inf (an Error when found)
};

struct Runtime {
  std::filesystem::path model_dir;
  std::unique_ptr<kernels::KernelSelection> kernels;
  std::unique_ptr<CausalLM> model;  // the class for the checkpoint's model_type
  std::optional<tokenizer::Tokenizer> tokenizer;  // absent without tokenizer.json
  std::vector<std::int32_t> stop_tokens;          // config.json and generation_config.json eos ids
  SamplingDefaults sampling_defaults;             // generation_config.json's recommended sampling
  std::vector<std::string> warnings;              // quantization and weight-loading notes
  std::optional<WeightCheckReport> weight_check;  // with check_weights
  double load_seconds = 0.0;                      // weights, kernel selection, tokenizer

  // The tokenizer, or an Error saying why text needs one (use --prompt-ids).
  const tokenizer::Tokenizer& require_tokenizer() const;
};

Runtime open_runtime(const std::filesystem::path& model_dir, const RuntimeOptions& options);

}  // namespace fp4serve::engine
