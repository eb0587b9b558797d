// make_causal_lm: the model class for a checkpoint's model_type.
#include "model/causal_lm.h"

#include "kernels/kv_cache.h"
#include "model/model_weights.h"
#include "model/qwen3_5_model.h"
#include "model/qwen3_model.h"
#include "util/error.h"

namespace fp4serve {

void CausalLM::set_kv_cache_dtype(DType dtype) {
  if (!kernels::kv_dtype_supported(dtype))
    fail("--kv-cache-dtype: ", dtype_name(dtype), " is not supported (f32, f16, bf16)");
  kv_cache_dtype_ = dtype;
}

void CausalLM::check_kv_dtype(const SequenceState& state, std::size_t chunk) const {
  if (state.kv_dtype != kv_cache_dtype_)
    fail("forward: chunk ", chunk, ": the state's KV cache holds ", kernels::kv_dtype_name(state.kv_dtype), ", the model writes ",
         kernels::kv_dtype_name(kv_cache_dtype_));
}

std::unique_ptr<CausalLM> make_causal_lm(ModelWeights weights, kernels::KernelSet kernel_set,
                                         kernels::Fp4Semantics semantics) {
  const std::string type = weights.config.model_type;
  if (type == "qwen3" || type == "qwen3_moe")
    return std::make_unique<Qwen3Model>(std::move(weights), kernel_set, semantics);
  // By arch: ModelOpt exports Qwen3.5 with the text model's type, qwen3_5_moe_text.
  if (weights.config.arch == Arch::Qwen3Next || weights.config.arch == Arch::Qwen3_5Moe)
    return make_qwen3_5_model(std::move(weights), kernel_set, semantics);
  fail("model_type '", type, "' has no model implementation (supported: qwen3, qwen3_moe, qwen3_next, qwen3_5_moe)");
}

}  // namespace fp4serve
