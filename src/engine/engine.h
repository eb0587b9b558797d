#pragma once
// Generation for one sequence at a time (run, chat): prefill a prompt (in chunks), then decode one
// token at a time through the same CausalLM::forward and kernels, sampling each next token, until a stop token
// or the length limit. Non-finite logits fail the request with NonFiniteLogits before anything
// is sampled from them, and tell the kernel registry's guard (which may swap a backend).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/sampler.h"
#include "engine/state_pool.h"
#include "model/causal_lm.h"
#include "util/error.h"

namespace fp4serve::kernels {
class KernelSelection;
}

namespace fp4serve::engine {

struct GenerationRequest {
  std::vector<std::int32_t> prompt;
  std::int64_t max_new_tokens = 128;
  SamplingParams sampling;
  // Generation ends after emitting one of these (it is part of the result); empty = length only.
  std::vector<std::int32_t> stop_tokens;
};

struct Timings {
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  std::int64_t prefill_tokens = 0;  // prompt tokens computed (cached ones are not)
  std::int64_t decode_tokens = 0;   // one-token forward calls
  double prefill_tokens_per_second() const;  // 0 when nothing was measured
  double decode_tokens_per_second() const;
};

struct GenerationResult {
  std::vector<std::int32_t> tokens;  // generated, stop token included
  std::vector<float> logprobs;       // log P of each generated token (raw model distribution)
  FinishReason finish = FinishReason::Length;
  Timings timings;
  std::uint64_t seed = 0;                  // the sampler's seed (reproduces the run)
  std::int64_t cached_prompt_tokens = 0;   // prompt tokens whose keys/values were re-used
};

// Empty when every logit is finite; else the message a failed request carries (counts of NaN
// and Inf, the first bad token id, the position and generated-token index). Session and the
// scheduler share it so both report the same way.
std::string describe_non_finite(std::span<const float> logits, std::int64_t position, std::int64_t step);

// Thrown when a forward produces NaN or Inf logits: the request fails, no token is sampled.
class NonFiniteLogits : public Error {
 public:
  using Error::Error;
};

// Called with each generated token as soon as it is chosen (streaming).
using TokenCallback = std::function<void(std::int32_t token, float logprob)>;

// One sequence's state across requests: the tokens whose state is cached. A chat re-renders its
// whole conversation every turn; the part of the new prompt that matches the cached tokens is
// not computed again. A hybrid model's recurrent state cannot be rewound, so there only a
// prompt that extends the cached tokens exactly re-uses them; anything else starts over.
// The state lives in a private StatePool with room for the model's max_position_embeddings
// tokens (committed as used); generation stops with FinishReason::Length at that limit.
class Session {
 public:
  // `guard`, when given, is told about non-finite logits (it re-validates backends); the model's
  // kernels are refreshed if it changes them. Both must outlive the session.
  explicit Session(CausalLM& model, kernels::KernelSelection* guard = nullptr, std::int64_t prefill_chunk = 512,
                   std::int64_t block_tokens = 16);
  ~Session();

  GenerationResult generate(const GenerationRequest& request, const TokenCallback& on_token = {});

  const std::vector<std::int32_t>& cached_tokens() const { return tokens_; }
  const StatePool& pool() const { return pool_; }
  std::int64_t context_length() const { return context_; }
  void reset();

 private:
  // Runs `tokens` after the cached ones; logits of the last into logits_.
  void forward(std::span<const std::int32_t> tokens);
  void check_finite(std::int64_t position, std::int64_t step);

  CausalLM& model_;
  kernels::KernelSelection* guard_;
  std::int64_t prefill_chunk_;
  std::int64_t context_;
  StatePool pool_;
  PooledSequence seq_;
  std::vector<std::int32_t> tokens_;  // in the state, in order
  std::vector<float> logits_;
};

// One request on a fresh session.
GenerationResult generate(CausalLM& model, const GenerationRequest& request, const TokenCallback& on_token = {},
                          kernels::KernelSelection* guard = nullptr);

}  // namespace fp4serve::engine
