#pragma once
// Choosing the next token from a row of logits. Temperature 0 is greedy (argmax, lowest id on a
// tie); otherwise, in the order transformers' and vLLM's samplers apply them: logits / T,
// softmax, top-k, top-p (the smallest set of most likely tokens whose probability reaches p),
// min-p (drop tokens below min_p times the most likely one's probability), renormalise, draw.
// The draw uses a seeded 64-bit Mersenne Twister, so a seed reproduces a generation exactly.
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
};

// Throws Error naming the parameter when a value is out of range.
void validate(const SamplingParams& params);

struct SampledToken {
  std::int32_t token = 0;
  // log P(token) under the model's own distribution, log_softmax of the raw logits (before
  // temperature and filtering), as OpenAI-style "logprobs" report it.
  float logprob = 0.0f;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `logits` must be finite (the engine checks first).
  SampledToken sample(std::span<const float> logits);
  std::uint64_t seed() const { return seed_; }

 private:
  SamplingParams params_;
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::vector<std::int32_t> order_;
  std::vector<double> probs_;
};

// log_softmax(logits)[token], computed in double.
float token_logprob(std::span<const float> logits, std::int32_t token);

}  // namespace fp4serve::engine
