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
  if (!(p.presence_penalty >= -2.0 && p.presence_penalty <= 2.0))
    fail("--presence-penalty must be in [-2, 2], got ", p.presence_penalty);
  if (!(p.frequency_penalty >= -2.0 && p.frequency_penalty <= 2.0))
    fail("--frequency-penalty must be in [-2, 2], got ", p.frequency_penalty);
  if (!(p.repetition_penalty > 0.0) || !std::isfinite(p.repetition_penalty))
    fail("--repetition-penalty must be > 0 (1 = off), got ", p.repetition_penalty);
}

double log_normalizer(std::span<const float> logits) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return mx + std::log(sum);
}

float token_logprob(std::span<const float> logits, std::int32_t token) {
  return static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(token)]) - log_normalizer(logits));
}

void top_logprobs(std::span<const float> logits, std::int64_t n, double log_z, std::vector<TokenLogprob>& out) {
  out.clear();
  n = std::min<std::int64_t>(n, static_cast<std::int64_t>(logits.size()));
  if (n <= 0) return;
  // A running list of the n best (small n, at most 20 from the API): insertion keeps it sorted.
  auto better = [](const TokenLogprob& a, const TokenLogprob& b) {
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
  };
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const TokenLogprob cand{static_cast<std::int32_t>(i), logits[i]};  // raw logit, converted below
    if (static_cast<std::int64_t>(out.size()) == n && !better(cand, out.back())) continue;
    if (static_cast<std::int64_t>(out.size()) == n) out.pop_back();
    out.insert(std::upper_bound(out.begin(), out.end(), cand, better), cand);
  }
  for (TokenLogprob& t : out) t.logprob = static_cast<float>(static_cast<double>(t.logprob) - log_z);
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  validate(params_);
  seed_ = params_.seed ? *params_.seed : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  rng_.seed(seed_);
}

void Sampler::set_prompt(std::span<const std::int32_t> prompt) {
  if (params_.repetition_penalty == 1.0) return;  // only the repetition penalty looks at the prompt
  if (seen_.empty()) {
    prompt_.assign(prompt.begin(), prompt.end());
  } else {
    for (std::int32_t t : prompt) note(t, false);
  }
}

void Sampler::note(std::int32_t token, bool generated) {
  if (token < 0 || static_cast<std::size_t>(token) >= seen_.size()) return;
  const auto i = static_cast<std::size_t>(token);
  if (!seen_[i]) {
    seen_[i] = 1;
    seen_ids_.push_back(token);
  }
  if (generated) generated_count_[i] += 1;
}

std::span<const float> Sampler::penalised(std::span<const float> logits) {
  if (seen_.size() != logits.size()) {
    // First call: size the bookkeeping to the vocabulary, then count the prompt.
    seen_.assign(logits.size(), 0);
    generated_count_.assign(logits.size(), 0);
    seen_ids_.clear();
    for (std::int32_t t : prompt_) note(t, false);
    prompt_.clear();
  }
  work_.assign(logits.begin(), logits.end());
  const auto rep = static_cast<float>(params_.repetition_penalty);
  for (std::int32_t t : seen_ids_) {
    float& x = work_[static_cast<std::size_t>(t)];
    if (rep != 1.0f) x = x > 0.0f ? x / rep : x * rep;
    const std::int32_t count = generated_count_[static_cast<std::size_t>(t)];
    if (count > 0) {
      x -= static_cast<float>(params_.frequency_penalty * count + params_.presence_penalty);
    }
  }
  return work_;
}

SampledToken Sampler::sample(std::span<const float> raw, bool with_logprob) {
  const auto V = static_cast<std::int32_t>(raw.size());
  if (V == 0) fail("sampler: empty logits");
  const bool penalties = params_.has_penalties();
  const std::span<const float> logits = penalties ? penalised(raw) : raw;
  auto chosen = [&](std::int32_t token) {
    if (penalties) note(token, true);
    return SampledToken{token, with_logprob ? token_logprob(raw, token) : 0.0f};
  };
  if (params_.temperature == 0.0) {
    // Greedy: the first maximum, as torch.argmax.
    return chosen(static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
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
  auto sort_prefix = [&](std::size_t k) {
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k), order_.end(), more_likely);
  };
  auto mass = [&](std::size_t from, std::size_t to) {
    double sum = 0.0;
    for (std::size_t i = from; i < to; ++i) sum += probs_[static_cast<std::size_t>(order_[i])];
    return sum;
  };
  std::size_t kept = order_.size();
  double nucleus_total = 0.0;  // the mass top_p is a fraction of: the top_k candidates, or everything
  if (params_.top_k > 0 && params_.top_k < V) {
    kept = static_cast<std::size_t>(params_.top_k);
    sort_prefix(kept);
    nucleus_total = mass(0, kept);
  } else if (params_.top_p < 1.0) {
    // Only the most likely tokens up to mass p need an order: sort a prefix, growing it until it
    // holds that mass (a peaked distribution stops at the first 64 instead of sorting the whole
    // vocabulary every token). The prefix is the same as a full sort's.
    std::size_t k = std::min<std::size_t>(64, order_.size());
    for (;;) {
      sort_prefix(k);
      const double head = mass(0, k);
      nucleus_total = head + mass(k, order_.size());
      if (head >= params_.top_p * nucleus_total || k == order_.size()) break;
      k = std::min(order_.size(), 4 * k);
    }
  }
  if (params_.top_p < 1.0) {
    double cumulative = 0.0;
    std::size_t n = 0;
    while (n < kept) {
      cumulative += probs_[static_cast<std::size_t>(order_[n++])];
      if (cumulative >= params_.top_p * nucleus_total) break;  // the token that reaches p is kept
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
  return chosen(token);
}

}  // namespace fp4serve::engine
