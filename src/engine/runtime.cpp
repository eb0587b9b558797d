#include "engine/runtime.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "engine/generation_config.h"
#include "util/error.h"

namespace fp4serve::engine {

const tokenizer::Tokenizer& Runtime::require_tokenizer() const {
  if (!tokenizer) {
    fail(model_dir.string(), " has no tokenizer.json; give the prompt as token ids (--prompt-ids 1,2,3)");
  }
  return *tokenizer;
}

Runtime open_runtime(const std::filesystem::path& model_dir, const RuntimeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Runtime rt;
  rt.model_dir = model_dir;
  // The tokenizer needs only its own file. Read on a second thread, it fills the core that the
  // weights' index, quantization and loader steps leave idle (docs/perf.md, session 36). A
  // failure surfaces at get(), after any error of the weights themselves.
  std::future<std::optional<tokenizer::Tokenizer>> tokenizer = std::async(std::launch::async, [&model_dir] {
    std::optional<tokenizer::Tokenizer> t;
    if (std::filesystem::exists(model_dir / "tokenizer.json")) t = tokenizer::Tokenizer::from_model_dir(model_dir);
    return t;
  });
  ModelWeights weights = load_model_weights(model_dir);
  rt.warnings = weights.quantization.warnings;
  rt.warnings.insert(rt.warnings.end(), weights.warnings.begin(), weights.warnings.end());
  if (options.check_weights) {
    rt.weight_check = check_weights(weights);
    if (!rt.weight_check->ok()) {
      std::string list;
      for (const std::string& p : rt.weight_check->problems) list += "\n  " + p;
      fail(model_dir.string(), ": --check-weights found non-finite values in ", rt.weight_check->problems.size(),
           " tensor(s):", list);
    }
  }
  for (std::int64_t id : weights.config.eos_token_ids) rt.stop_tokens.push_back(static_cast<std::int32_t>(id));
  const GenerationConfig generation = read_generation_config(model_dir);
  rt.sampling_defaults = generation.sampling;
  for (std::int32_t id : generation.eos_token_ids) {
    if (std::find(rt.stop_tokens.begin(), rt.stop_tokens.end(), id) == rt.stop_tokens.end()) rt.stop_tokens.push_back(id);
  }
  rt.kernels = kernels::select_kernels(options.backends, weights.config, weights.quantization);
  rt.model = make_causal_lm(std::move(weights), rt.kernels->kernels(), options.backends.semantics);
  rt.model->set_kv_cache_dtype(options.backends.kv_cache_dtype);  // the type the attention backend was validated on
  rt.tokenizer = tokenizer.get();
  rt.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return rt;
}

}  // namespace fp4serve::engine
