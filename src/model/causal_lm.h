#pragma once
// What the engine sees of a model: a causal LM that runs the new tokens of several sequences in
// one pass. Every Linear sees the rows of all sequences at once (decoding N sequences is a GEMM
// with M = N, so each weight is read once per step for all of them); attention and the
// recurrent ops of linear-attention layers run per sequence against that sequence's own state.
//
// The per-sequence state is owned by the engine (engine/state_pool.h) and handed to forward()
// as views; the model says how much it needs through StateSpec:
//   - full-attention layers: keys and values in fixed-size blocks of `block_tokens` tokens
//     (paged, so sequences of any length share one memory budget), in the element type the
//     model was given (set_kv_cache_dtype: F32 by default, F16 or BF16 for half the bytes);
//   - linear-attention (Gated DeltaNet) layers: a conv state and a recurrent state of fixed
//     size per layer, zero for a new sequence.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "formats/model_config.h"
#include "kernels/kernels.h"
#include "kernels/kv_cache.h"

namespace fp4serve {

struct ModelWeights;

struct StateSpec {
  std::int64_t attention_layers = 0;        // layers with a KV cache
  std::int64_t kv_row_elements = 0;         // one token of one layer: num_key_value_heads * head_dim (K; V again)
  DType kv_dtype = DType::F32;              // the cache's element type (kernels/kv_cache.h)
  std::int64_t linear_layers = 0;           // Gated DeltaNet layers
  std::int64_t conv_state_floats = 0;       // per linear layer
  std::int64_t recurrent_state_floats = 0;  // per linear layer

  // Elements of one KV block: for each attention layer, K then V, each [num_key_value_heads,
  // block_tokens, head_dim] (kernels/kernels.h, AttentionArgs).
  std::int64_t kv_block_elements(std::int64_t block_tokens) const {
    return attention_layers * 2 * block_tokens * kv_row_elements;
  }
  std::int64_t kv_block_bytes(std::int64_t block_tokens) const {
    return kv_block_elements(block_tokens) * static_cast<std::int64_t>(kernels::kv_element_bytes(kv_dtype));
  }
  // Floats of a sequence's fixed-size (length-independent) state.
  std::int64_t fixed_state_floats() const { return linear_layers * (conv_state_floats + recurrent_state_floats); }
};

// One sequence's state as forward() reads and writes it.
struct SequenceState {
  std::int64_t past = 0;  // tokens already processed; the new ones sit at positions [past, past + m)
  // KV blocks covering at least past + m tokens. Block b holds positions [b*B, (b+1)*B) with
  // B = block_tokens; attention layer l's keys start at element 2*l*B*kv_row_elements of
  // blocks[b] and its values at element (2*l + 1)*B*kv_row_elements, elements of kv_dtype
  // (which must be the model's kv_cache_dtype()), KV head by KV head (kernels/kernels.h).
  std::span<std::byte* const> kv_blocks;
  DType kv_dtype = DType::F32;
  std::int64_t block_tokens = 0;
  std::span<float* const> conv_state;       // one per linear layer
  std::span<float* const> recurrent_state;  // one per linear layer
};

// Which rows of a chunk get logits.
enum class LogitsFor { None, AllPositions, LastPosition };

struct SequenceChunk {
  std::span<const std::int32_t> tokens;  // m >= 1 new tokens
  const SequenceState* state = nullptr;
  LogitsFor logits = LogitsFor::LastPosition;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const ModelWeights& weights() const = 0;
  virtual StateSpec state_spec() const = 0;
  std::int64_t vocab_size() const { return config().vocab_size; }

  // The KV cache's element type (--kv-cache-dtype): F32 (default), F16 or BF16, reported by
  // state_spec(). Set it before any state is made from the spec; an Error for another type.
  void set_kv_cache_dtype(DType dtype);
  DType kv_cache_dtype() const { return kv_cache_dtype_; }

  // Swaps the kernels (the registry's run-time guard may fall back). Not while forward() runs.
  virtual void set_kernels(kernels::KernelSet kernel_set) = 0;
  virtual const kernels::KernelSet& kernels() const = 0;
  virtual kernels::Fp4Semantics semantics() const = 0;

  // Runs each chunk's tokens after its state's `past` ones, writing their keys/values and
  // recurrent state, and writes logits rows chunk after chunk: m rows for AllPositions, 1 for
  // LastPosition, none for None. `logits` must hold exactly that many rows of vocab_size().
  // Does not advance `past` (the engine does, once the step succeeded). Chunks must belong to
  // distinct sequences. An Error names the chunk and the problem (token id, state size).
  virtual void forward(std::span<const SequenceChunk> chunks, std::span<float> logits) const = 0;

 protected:
  // An Error naming chunk `chunk` of a forward when its state's cache holds another element type
  // than the model writes. Builds no message otherwise (forward runs it every step).
  void check_kv_dtype(const SequenceState& state, std::size_t chunk) const;

 private:
  DType kv_cache_dtype_ = DType::F32;
};

// The model class for the checkpoint's architecture (qwen3, qwen3_moe, qwen3_next, qwen3_5_moe).
// W4A4 needs a static input_scale on every NVFP4 weight (an Error names the first without one).
std::unique_ptr<CausalLM> make_causal_lm(ModelWeights weights, kernels::KernelSet kernel_set,
                                         kernels::Fp4Semantics semantics = kernels::Fp4Semantics::W4A16);

}  // namespace fp4serve
