// The sampler: greedy, temperature, top-k, top-p, min-p, seeds, log-probabilities.
#include "engine/sampling_params.h"
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include "util/error.h"

namespace fp4serve::engine {
namespace {


// Logits whose softmax is exactly `probs` (up to the normalising constant).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(p > 0 ? static_cast<float>(std::log(p)) : -1e30f);
  return out;
}

std::map<std::int32_t, int> histogram(SamplingParams params, const std::vector<float>& logits, int draws) {
  params.seed = 1234;
  Sampler s(params);
  std::map<std::int32_t, int> h;
  for (int i = 0; i < draws; ++i) h[s.sample(logits).token] += 1;
  return h;
}

TEST(Sampler, GreedyTakesTheFirstMaximum) {
  Sampler s(params(0.0));
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f};
  const SampledToken t = s.sample(logits);
  EXPECT_EQ(t.token, 1);
  EXPECT_NEAR(t.logprob, token_logprob(logits, 1), 1e-7);
}

TEST(Sampler, LogprobIsLogSoftmaxOfRawLogits) {
  const std::vector<float> logits{1.0f, 2.0f, 3.0f};
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(token_logprob(logits, 0), 1.0 - std::log(z), 1e-6);
  EXPECT_NEAR(token_logprob(logits, 2), 3.0 - std::log(z), 1e-6);
  // Reported under the raw distribution whatever the temperature.
  Sampler s(params(5.0, 1.0, 0, 0.0, 1));
  const SampledToken t = s.sample(logits);
  EXPECT_NEAR(t.logprob, token_logprob(logits, t.token), 1e-7);
}

TEST(Sampler, SeedReproducesAndDiffers) {
  const std::vector<float> logits = logits_of({0.2, 0.2, 0.2, 0.2, 0.2});
  auto run = [&](std::uint64_t seed) {
    Sampler s(params(1.0, 1.0, 0, 0.0, seed));
    std::vector<std::int32_t> out;
    for (int i = 0; i < 40; ++i) out.push_back(s.sample(logits).token);
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
  Sampler unseeded({});
  Sampler again(params(1.0, 1.0, 0, 0.0, unseeded.seed()));
  EXPECT_EQ(unseeded.sample(logits).token, again.sample(logits).token);
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  const std::vector<double> p{0.5, 0.3, 0.15, 0.05};
  const auto h = histogram(params(1.0), logits_of(p), 20000);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double freq = h.count(static_cast<std::int32_t>(i)) ? h.at(static_cast<std::int32_t>(i)) / 20000.0 : 0.0;
    EXPECT_NEAR(freq, p[i], 0.015) << "token " << i;  // 20000 draws: sd <= 0.0036
  }
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = logits_of({0.6, 0.4});
  const auto cold = histogram(params(0.25), logits, 10000);  // p ~ 0.6^4 : 0.4^4 -> 0.835
  const auto hot = histogram(params(4.0), logits, 10000);    // -> 0.525
  EXPECT_NEAR(cold.at(0) / 10000.0, 0.835, 0.02);
  EXPECT_NEAR(hot.at(0) / 10000.0, 0.525, 0.02);
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  const auto h = histogram(params(1.0, 1.0, 2), logits_of({0.1, 0.4, 0.2, 0.3}), 5000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(1) && h.count(3));
  EXPECT_NEAR(h.at(1) / 5000.0, 0.4 / 0.7, 0.03);
  EXPECT_EQ(histogram(params(1.0, 1.0, 1), logits_of({0.1, 0.4, 0.2, 0.3}), 100).size(), 1u);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Sorted: 0.4 (id 1), 0.3 (id 3), 0.2 (id 2), 0.1 (id 0). p = 0.65 needs ids 1 and 3 (0.7).
  const auto h = histogram(params(1.0, 0.65), logits_of({0.1, 0.4, 0.2, 0.3}), 5000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(1) && h.count(3));
  // p = 0.7 is reached exactly by the same two; 0.71 needs the third.
  EXPECT_EQ(histogram(params(1.0, 0.71), logits_of({0.1, 0.4, 0.2, 0.3}), 5000).size(), 3u);
}

TEST(Sampler, TopPNucleusBeyondTheFirstSortedPrefix) {
  // 1000 tokens with weight 1000 - rank, ids scattered: p = 0.5 needs the 294 most likely, so
  // the sorted prefix has to grow past its first 64. Every draw is in that nucleus and draws
  // reach deep into it.
  const int V = 1000;
  std::vector<double> w(V);
  std::vector<std::int32_t> id_of_rank(V);
  for (int r = 0; r < V; ++r) {
    id_of_rank[static_cast<std::size_t>(r)] = (r * 7919) % V;
    w[static_cast<std::size_t>(id_of_rank[static_cast<std::size_t>(r)])] = V - r;
  }
  const double total = V * (V + 1) / 2.0;
  int nucleus = 0;
  for (double cum = 0; cum < 0.5 * total; ++nucleus) cum += V - nucleus;
  ASSERT_GT(nucleus, 256);  // 294: beyond several prefix sizes (64, 256)
  std::vector<int> rank_of(V);
  for (int r = 0; r < V; ++r) rank_of[static_cast<std::size_t>(id_of_rank[static_cast<std::size_t>(r)])] = r;
  std::vector<double> probs(w);
  for (double& x : probs) x /= total;
  const auto h = histogram(params(1.0, 0.5), logits_of(probs), 4000);
  int deepest = 0;
  for (const auto& [id, n] : h) deepest = std::max(deepest, rank_of[static_cast<std::size_t>(id)]);
  EXPECT_LT(deepest, nucleus);
  EXPECT_GT(deepest, 250);  // 4000 draws over 294 nearly equal weights reach the end
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  // min_p 0.45: keep p >= 0.45 * 0.4 = 0.18 -> ids 1, 3, 2.
  const auto h = histogram(params(1.0, 1.0, 0, 0.45), logits_of({0.1, 0.4, 0.2, 0.3}), 5000);
  EXPECT_EQ(h.size(), 3u);
  EXPECT_FALSE(h.count(0));
}

TEST(Sampler, FiltersCombine) {
  // top_k 3 -> {1, 3, 2}; top_p 0.5 of those (0.9): 0.4 + 0.3 >= 0.45 -> {1, 3}; min_p 0.8 -> {1}.
  const auto h = histogram(params(1.0, 0.5, 3, 0.8),
                           logits_of({0.1, 0.4, 0.2, 0.3}), 200);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_TRUE(h.count(1));
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler(params(-1.0)), Error);
  EXPECT_THROW(Sampler(params(1.0, 0.0)), Error);
  EXPECT_THROW(Sampler(params(1.0, 1.5)), Error);
  EXPECT_THROW(Sampler(params(1.0, 1.0, -2)), Error);
  EXPECT_THROW(Sampler(params(1.0, 1.0, 0, 2.0)), Error);
}

// ---- penalties and top logprobs ------------------------------------------------------------

std::vector<std::int32_t> greedy_run(SamplingParams p, const std::vector<float>& logits, int n,
                                     const std::vector<std::int32_t>& prompt = {}) {
  Sampler s(p);
  s.set_prompt(prompt);
  std::vector<std::int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits).token);
  return out;
}

TEST(Sampler, FrequencyPenaltyGrowsWithEachRepeat) {
  SamplingParams p = params(0.0);
  p.frequency_penalty = 0.5;
  // 2.0 vs 1.9: after one 0 it is 1.5 (< 1.9), after one 1 that is 1.4, after two 0s 1.0.
  EXPECT_EQ(greedy_run(p, {2.0f, 1.9f, 0.0f}, 5), (std::vector<std::int32_t>{0, 1, 0, 1, 0}));
}

TEST(Sampler, PresencePenaltyCountsOnce) {
  SamplingParams p = params(0.0);
  p.presence_penalty = 0.5;
  // 0 -> 1.5, 1 -> 1.4, then 0 stays at 1.5 however often it repeats.
  EXPECT_EQ(greedy_run(p, {2.0f, 1.9f, 0.0f}, 5), (std::vector<std::int32_t>{0, 1, 0, 0, 0}));
  p.presence_penalty = -0.5;  // negative: encourages repeats
  EXPECT_EQ(greedy_run(p, {1.9f, 2.0f}, 3), (std::vector<std::int32_t>{1, 1, 1}));
}

TEST(Sampler, RepetitionPenaltyCoversThePromptAndBothSigns) {
  SamplingParams p = params(0.0);
  p.repetition_penalty = 1.5;
  // Positive logit divided: 2.0 / 1.5 = 1.33 < 1.5.
  EXPECT_EQ(greedy_run(p, {2.0f, 1.5f}, 1, {0}), (std::vector<std::int32_t>{1}));
  // Negative logit multiplied: -1.0 * 1.5 = -1.5 < -1.2.
  EXPECT_EQ(greedy_run(p, {-1.0f, -1.2f}, 1, {0}), (std::vector<std::int32_t>{1}));
  // Without the prompt token seen, no penalty; generated tokens count too.
  EXPECT_EQ(greedy_run(p, {2.0f, 1.5f}, 2), (std::vector<std::int32_t>{0, 1}));
  p.repetition_penalty = 1.0;  // off
  EXPECT_EQ(greedy_run(p, {2.0f, 1.5f}, 2, {0}), (std::vector<std::int32_t>{0, 0}));
}

TEST(Sampler, PenaltiesLeaveTheReportedLogprobRaw) {
  SamplingParams p = params(0.0);
  p.frequency_penalty = 2.0;
  Sampler s(p);
  const std::vector<float> logits{2.0f, 1.9f, 0.0f};
  s.sample(logits);
  const SampledToken t = s.sample(logits);  // 1, chosen because of the penalty
  EXPECT_EQ(t.token, 1);
  EXPECT_NEAR(t.logprob, token_logprob(logits, 1), 1e-7);
}

TEST(Sampler, TopLogprobsOfTheRawDistribution) {
  const std::vector<float> logits{0.5f, 3.0f, -1.0f, 3.0f, 1.0f};
  std::vector<TokenLogprob> top;
  top_logprobs(logits, 3, log_normalizer(logits), top);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);  // tie with 3: lower id first
  EXPECT_EQ(top[1].token, 3);
  EXPECT_EQ(top[2].token, 4);
  for (const TokenLogprob& t : top) EXPECT_NEAR(t.logprob, token_logprob(logits, t.token), 1e-6);
  top_logprobs(logits, 20, log_normalizer(logits), top);  // more than the vocabulary: all of it, sorted
  ASSERT_EQ(top.size(), 5u);
  EXPECT_EQ(top.back().token, 2);
  top_logprobs(logits, 0, log_normalizer(logits), top);
  EXPECT_TRUE(top.empty());
}

TEST(Sampler, RejectsBadPenalties) {
  SamplingParams p = params(1.0);
  p.presence_penalty = 2.5;
  EXPECT_THROW(Sampler{p}, Error);
  p.presence_penalty = 0.0;
  p.frequency_penalty = -2.01;
  EXPECT_THROW(Sampler{p}, Error);
  p.frequency_penalty = 0.0;
  p.repetition_penalty = 0.0;
  EXPECT_THROW(Sampler{p}, Error);
  p.repetition_penalty = std::nan("");
  EXPECT_THROW(Sampler{p}, Error);
  p.repetition_penalty = 1.2;
  EXPECT_NO_THROW(Sampler{p});
}

}  // namespace
}  // namespace fp4serve::engine
