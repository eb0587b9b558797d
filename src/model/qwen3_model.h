#pragma once
// Qwen3-MoE (and dense Qwen3, the same model without experts), written to mirror transformers'
// modeling_qwen3_moe.py / modeling_qwen3.py. Activations are fp32 throughout; every matrix
// product goes through the KernelSet (dense GEMM, FP4 GEMM, MoE, attention), while the cheap
// element-wise parts (embedding lookup, RMSNorm, RoPE, SiLU, residual adds) are plain loops here.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "model/model_weights.h"
#include "model/rope.h"

namespace fp4serve {

// Where one sequence's keys and values live during a forward call. Per layer, a buffer of
// [capacity, num_key_value_heads, head_dim] fp32; rows [0, past) hold the earlier tokens. The
// forward writes the new tokens' rows [past, past + m) and reads rows [0, past + m).
struct KvView {
  std::int64_t past = 0;
  std::int64_t capacity = 0;
  std::vector<float*> keys;    // one per layer
  std::vector<float*> values;  // one per layer
};

// Which positions get logits: all of them (scoring a prompt, tests) or only the last (generation).
enum class LogitsFor { AllPositions, LastPosition };

class Qwen3Model {
 public:
  // `semantics` chooses how NVFP4 weights meet activations: W4A16 (default) or W4A4, which
  // needs a static input_scale on every NVFP4 matrix (an Error names the first without one).
  Qwen3Model(ModelWeights weights, kernels::KernelSet kernel_set,
             kernels::Fp4Semantics semantics = kernels::Fp4Semantics::W4A16);

  // Swaps the kernels (the registry's run-time guard may fall back to another backend). Not
  // safe while a forward() is running.
  void set_kernels(kernels::KernelSet kernel_set);
  const kernels::KernelSet& kernels() const { return kernels_; }

  const ModelConfig& config() const { return weights_.config; }
  const ModelWeights& weights() const { return weights_; }
  kernels::Fp4Semantics semantics() const { return semantics_; }
  std::int64_t vocab_size() const { return weights_.config.vocab_size; }
  // Floats of one cached token per layer, for K and for V each: num_key_value_heads * head_dim.
  std::int64_t kv_row_floats() const { return weights_.config.num_key_value_heads * weights_.config.head_dim; }

  // Runs `tokens` at positions [kv.past, kv.past + m) through the decoder, appending their keys
  // and values to `kv`, and writes logits: [m, vocab] for AllPositions, [1, vocab] for
  // LastPosition. Prefill passes many tokens, decode one; both take this same path.
  // Thread-safe for distinct KvViews (the model itself is read-only).
  void forward(std::span<const std::int32_t> tokens, const KvView& kv, std::span<float> logits,
               LogitsFor which = LogitsFor::AllPositions) const;

 private:
  struct Scratch;
  // y[m, W.n] = x[m, W.k] * W^T through the kernel for W's storage kind.
  void linear(const float* x, std::int64_t m, const kernels::WeightMatrix& w, float* y) const;
  void attention(const DecoderLayerWeights& layer, std::int64_t layer_index, const float* x, std::int64_t m,
                 const KvView& kv, Scratch& s, float* out) const;
  void dense_mlp(const MlpWeights& mlp, const float* x, std::int64_t m, Scratch& s, float* out) const;

  ModelWeights weights_;
  kernels::KernelSet kernels_;
  kernels::Fp4Semantics semantics_;
  RotaryEmbedding rope_;
};

// Qwen3MoeRMSNorm over each of `rows` rows of `dim` floats: w * (x * rsqrt(mean(x^2) + eps)).
void rms_norm(const float* x, std::int64_t rows, std::int64_t dim, const std::vector<float>& weight, double eps,
              float* out);

}  // namespace fp4serve
