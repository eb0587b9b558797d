#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace fp4serve::engine {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0) || !std::isfinite(p.temperature))
    fail("--temperature must be >= 0 (0 = greedy), got ", p.temperature);
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) fail("--top-p must be in (0, 1], got ", p.top_p);
  if (p.top_k < 0) fail("--top-k must be >= 0 (0 = off), got ", p.top_k);
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) fail("--min-p must be in [0, 1], got ", p.min_p);
}

float token_logprob(std::span<const float> logits, std::int32_t token) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(token)]) - mx - std::log(sum));
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  validate(params_);
  seed_ = params_.seed ? *params_.seed : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  rng_.seed(seed_);
}

SampledToken Sampler::sample(std::span<const float> logits) {
  const auto V = static_cast<std::int32_t>(logits.size());
  if (V == 0) fail("sampler: empty logits");
  if (params_.temperature == 0.0) {
    // Greedy: the first maximum, as torch.argmax.
    const auto token = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    return {token, token_logprob(logits, token)};
  }

  // Probabilities at temperature T (unnormalised: exp((x - max) / T), in double).
  const double mx = *std::max_element(logits.begin(), logits.end());
  probs_.resize(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) probs_[i] = std::exp((logits[i] - mx) / params_.temperature);

  // Candidates, most likely first when a filter needs the order (ties: lower id first).
  order_.resize(logits.size());
  std::iota(order_.begin(), order_.end(), 0);
  auto more_likely = [&](std::int32_t a, std::int32_t b) {
    const double pa = probs_[static_cast<std::size_t>(a)], pb = probs_[static_cast<std::size_t>(b)];
    return pa > pb || (pa == pb && a < b);
  };
  std::size_t kept = order_.size();
  if (params_.top_k > 0 && params_.top_k < V) {
    kept = static_cast<std::size_t>(params_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(kept), order_.end(), more_likely);
  } else if (params_.top_p < 1.0) {
    std::sort(order_.begin(), order_.end(), more_likely);
  }
  if (params_.top_p < 1.0) {
    double total = 0.0;
    for (std::size_t i = 0; i < kept; ++i) total += probs_[static_cast<std::size_t>(order_[i])];
    double cumulative = 0.0;
    std::size_t n = 0;
    while (n < kept) {
      cumulative += probs_[static_cast<std::size_t>(order_[n++])];
      if (cumulative >= params_.top_p * total) break;  // the token that reaches p is kept
    }
    kept = n;
  }
  if (params_.min_p > 0.0) {
    // The most likely token has unnormalised probability exp(0) = 1 and survives every filter.
    const double threshold = params_.min_p;
    std::size_t n = 0;
    for (std::size_t i = 0; i < kept; ++i) {
      if (probs_[static_cast<std::size_t>(order_[i])] >= threshold) order_[n++] = order_[i];
    }
    kept = n;
  }

  double total = 0.0;
  for (std::size_t i = 0; i < kept; ++i) total += probs_[static_cast<std::size_t>(order_[i])];
  // A uniform double in [0, 1) from the top 53 bits: the same on every platform and library.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
  double cumulative = 0.0;
  std::int32_t token = order_[kept - 1];
  for (std::size_t i = 0; i < kept; ++i) {
    cumulative += probs_[static_cast<std::size_t>(order_[i])];
    if (u < cumulative) {
      token = order_[i];
      break;
    }
  }
  return {token, token_logprob(logits, token)};
}

}  // namespace fp4serve::engine
