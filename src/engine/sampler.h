#pragma once
// Choosing the next token from a row of logits. First the penalties over the tokens seen so far
// (vLLM's order: repetition, then frequency and presence), then: temperature 0 is greedy
// (argmax, lowest id on a tie); otherwise, in the order transformers' and vLLM's samplers apply
// them: logits / T, softmax, top-k, top-p (the smallest set of most likely tokens whose
// probability reaches p), min-p (drop tokens below min_p times the most likely one's
// probability), renormalise, draw. The draw uses a seeded 64-bit Mersenne Twister, so a seed
// reproduces a generation exactly.
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

namespace fp4serve::engine {

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;        // (0, 1]; 1 = off
  std::int64_t top_k = 0;    // 0 = off
  double min_p = 0.0;        // [0, 1]; 0 = off
  std::optional<std::uint64_t> seed;  // unset: a random seed (see Sampler::seed())
  // OpenAI semantics, over the generated tokens: logit -= presence * [count > 0] + frequency * count.
  double presence_penalty = 0.0;   // [-2, 2]; 0 = off
  double frequency_penalty = 0.0;  // [-2, 2]; 0 = off
  // HF / vLLM semantics, over prompt and generated tokens: a seen token's logit is divided by
  // the penalty when positive, multiplied when negative. (0, inf); 1 = off.
  double repetition_penalty = 1.0;
  bool has_penalties() const {
    return presence_penalty != 0.0 || frequency_penalty != 0.0 || repetition_penalty != 1.0;
  }
};

// Throws Error naming the parameter when a value is out of range.
void validate(const SamplingParams& params);

struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  std::int32_t token = 0;
  // log P(token) under the model's own distribution, log_softmax of the raw logits (before
  // penalties, temperature and filtering), as OpenAI-style "logprobs" report it.
  float logprob = 0.0f;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // The prompt, for the repetition penalty (generated tokens are recorded by sample()).
  void set_prompt(std::span<const std::int32_t> prompt);
  // `logits` must be finite (the engine checks first). Records the chosen token as generated.
  // `with_logprob`: fill SampledToken::logprob (one more pass over the vocabulary in double).
  SampledToken sample(std::span<const float> logits, bool with_logprob = true);
  std::uint64_t seed() const { return seed_; }
  const SamplingParams& params() const { return params_; }

 private:
  // logits with the penalties applied, in work_.
  std::span<const float> penalised(std::span<const float> logits);
  void note(std::int32_t token, bool generated);

  SamplingParams params_;
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::vector<std::int32_t> order_;
  std::vector<double> probs_;
  // Penalty bookkeeping, sized to the vocabulary on first use.
  std::vector<float> work_;
  std::vector<std::int32_t> generated_count_;
  std::vector<std::uint8_t> seen_;      // in the prompt or generated
  std::vector<std::int32_t> seen_ids_;  // the ids with seen_ set, in first-seen order
  std::vector<std::int32_t> prompt_;    // kept until the vocabulary size is known
};

// log(sum(exp(logits))), computed in double: log_softmax(logits)[i] = logits[i] - log_normalizer.
double log_normalizer(std::span<const float> logits);

// log_softmax(logits)[token], computed in double.
float token_logprob(std::span<const float> logits, std::int32_t token);

// The `n` most likely tokens of the raw distribution with their log-probabilities, most likely
// first (ties: lower id first), into `out`. `log_z` = log_normalizer(logits).
void top_logprobs(std::span<const float> logits, std::int64_t n, double log_z, std::vector<TokenLogprob>& out);

}  // namespace fp4serve::engine
