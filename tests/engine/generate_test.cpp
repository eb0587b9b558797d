// Generation on the transformers oracle fixtures: greedy tokens and log-probabilities, stop
// tokens, chunked prefill, prefix re-use across turns, and the NaN/Inf guard.
#include "engine/sampling_params.h"
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <optional>
#include <vector>

#include "kernels/kernels.h"
#include "model/model_weights.h"
#include "model/causal_lm.h"
#include "model/qwen3_model.h"
#include "model/qwen3_oracle.h"

namespace fp4serve::engine {
namespace {


std::unique_ptr<Qwen3Model> load_model(const oracle::Case& c, kernels::KernelSet k = kernels::reference_kernels()) {
  return std::make_unique<Qwen3Model>(load_model_weights(c.dir()), k, c.semantics());
}

GenerationRequest greedy(const oracle::Data& d) {
  GenerationRequest r;
  r.prompt = d.prompt_ids;
  r.max_new_tokens = static_cast<std::int64_t>(d.greedy_ids.size());
  r.sampling.temperature = 0.0;
  return r;
}

class EngineOracle : public ::testing::TestWithParam<oracle::Case> {};

TEST_P(EngineOracle, GreedyGenerationEqualsTransformers) {
  const oracle::Data d = oracle::load(GetParam());
  auto model = load_model(GetParam());
  std::vector<std::int32_t> streamed;
  const GenerationResult r = generate(*model, greedy(d), [&](std::int32_t t, float) { streamed.push_back(t); });
  EXPECT_EQ(r.tokens, d.greedy_ids);
  EXPECT_EQ(streamed, d.greedy_ids);
  EXPECT_EQ(r.finish, FinishReason::Length);
  EXPECT_EQ(r.timings.prefill_tokens, static_cast<std::int64_t>(d.prompt_ids.size()));
  EXPECT_EQ(r.timings.decode_tokens, static_cast<std::int64_t>(d.greedy_ids.size()) - 1);
  // Each log-probability is log_softmax of transformers' logits at that position (the logits
  // agree to 1e-4 of their scale, see tests/model/qwen3_oracle_test.cpp).
  ASSERT_EQ(r.logprobs.size(), d.greedy_ids.size());
  for (std::size_t i = 0; i < r.logprobs.size(); ++i) {
    const float* row = d.row(d.prompt_ids.size() - 1 + i);
    const float expected = token_logprob({row, static_cast<std::size_t>(d.vocab)}, d.greedy_ids[i]);
    EXPECT_NEAR(r.logprobs[i], expected, 1e-3) << "step " << i;
    EXPECT_LE(r.logprobs[i], 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineOracle, ::testing::ValuesIn(oracle::cases()),
                         [](const ::testing::TestParamInfo<oracle::Case>& p) { return p.param.label(); });

const oracle::Case kMoe{"moe_bf16_gqa2", "default"};

TEST(Engine, StopTokenEndsGenerationAndIsIncluded) {
  const oracle::Data d = oracle::load(kMoe);
  auto model = load_model(kMoe);
  GenerationRequest req = greedy(d);
  const std::int32_t stop = d.greedy_ids[6];
  req.stop_tokens = {stop};
  const GenerationResult r = generate(*model, req);
  const auto first = std::find(d.greedy_ids.begin(), d.greedy_ids.end(), stop) - d.greedy_ids.begin();
  EXPECT_EQ(r.tokens, std::vector<std::int32_t>(d.greedy_ids.begin(), d.greedy_ids.begin() + first + 1));
  EXPECT_EQ(r.finish, FinishReason::Stop);
}

TEST(Engine, ZeroNewTokensOnlyPrefills) {
  const oracle::Data d = oracle::load(kMoe);
  auto model = load_model(kMoe);
  GenerationRequest req = greedy(d);
  req.max_new_tokens = 0;
  const GenerationResult r = generate(*model, req);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(r.finish, FinishReason::Length);
}

TEST(Engine, ChunkedPrefillGivesTheSameTokens) {
  const oracle::Data d = oracle::load(kMoe);
  auto model = load_model(kMoe);
  Session session(*model, nullptr, /*prefill_chunk=*/3);
  EXPECT_EQ(session.generate(greedy(d)).tokens, d.greedy_ids);
}

TEST(Engine, SessionReusesTheCachedPrefix) {
  const oracle::Data d = oracle::load(kMoe);
  auto model = load_model(kMoe);
  Session session(*model);
  GenerationRequest first = greedy(d);
  first.max_new_tokens = 10;
  const GenerationResult a = session.generate(first);
  EXPECT_EQ(a.cached_prompt_tokens, 0);
  // The next turn's prompt extends the first prompt and its output: only the new part is run.
  GenerationRequest second = greedy(d);
  second.prompt.insert(second.prompt.end(), a.tokens.begin(), a.tokens.end());
  second.max_new_tokens = 12;
  const std::size_t cached = session.cached_tokens().size();
  EXPECT_EQ(cached, d.prompt_ids.size() + 9);  // the last generated token was never fed back
  const GenerationResult b = session.generate(second);
  EXPECT_EQ(b.cached_prompt_tokens, static_cast<std::int64_t>(cached));
  EXPECT_EQ(b.timings.prefill_tokens, 1);
  // Same tokens as transformers' continuation from there.
  EXPECT_EQ(b.tokens, std::vector<std::int32_t>(d.greedy_ids.begin() + 10, d.greedy_ids.begin() + 22));
  // A diverging prompt cuts the cache back to the common prefix.
  GenerationRequest other = greedy(d);
  other.prompt.resize(5);
  other.prompt.push_back(d.prompt_ids[5] == 0 ? 1 : 0);
  other.max_new_tokens = 1;
  const GenerationResult c = session.generate(other);
  EXPECT_EQ(c.cached_prompt_tokens, 5);
}

// A recurrent state cannot be rewound: a hybrid model re-uses its cache only when the new prompt
// extends exactly what is cached, and otherwise starts over, still giving transformers' tokens.
TEST(Engine, HybridSessionReusesOnlyAnExactlyExtendedPrefix) {
  const oracle::Case hybrid{"qwen3_5_moe_bf16_fused", "default", "oracle_hybrid"};
  const oracle::Data d = oracle::load(hybrid);
  auto model = make_causal_lm(load_model_weights(hybrid.dir()), kernels::reference_kernels());
  ASSERT_GT(model->state_spec().linear_layers, 0);
  Session session(*model);
  GenerationRequest first = greedy(d);
  first.max_new_tokens = 10;
  const GenerationResult a = session.generate(first);
  EXPECT_EQ(a.tokens, std::vector<std::int32_t>(d.greedy_ids.begin(), d.greedy_ids.begin() + 10));
  // Extending the cached tokens exactly: only the new token is run.
  GenerationRequest second = greedy(d);
  second.prompt.insert(second.prompt.end(), a.tokens.begin(), a.tokens.end());
  second.max_new_tokens = 12;
  const auto cached = static_cast<std::int64_t>(session.cached_tokens().size());
  const GenerationResult b = session.generate(second);
  EXPECT_EQ(b.cached_prompt_tokens, cached);
  EXPECT_EQ(b.timings.prefill_tokens, 1);
  EXPECT_EQ(b.tokens, std::vector<std::int32_t>(d.greedy_ids.begin() + 10, d.greedy_ids.begin() + 22));
  // A prompt that shares only a prefix starts over (a Qwen3 model would keep 5 tokens here).
  GenerationRequest again = greedy(d);
  again.max_new_tokens = 10;
  const GenerationResult c = session.generate(again);
  EXPECT_EQ(c.cached_prompt_tokens, 0);
  EXPECT_EQ(c.tokens, a.tokens);
}

TEST(Engine, SeededSamplingIsReproducible) {
  const oracle::Data d = oracle::load(kMoe);
  auto model = load_model(kMoe);
  GenerationRequest req = greedy(d);
  req.sampling = params(0.8, 0.9, 50, 0.05, 42);
  const GenerationResult a = generate(*model, req);
  const GenerationResult b = generate(*model, req);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.seed, 42u);
  EXPECT_EQ(a.tokens.size(), d.greedy_ids.size());
}

TEST(Engine, RejectsBadPrompts) {
  auto model = load_model(kMoe);
  GenerationRequest req;
  EXPECT_THROW(generate(*model, req), Error);  // empty
  req.prompt = {1, 2, 100000};
  try {
    generate(*model, req);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 100000, outside the model's vocabulary [0, 256)"), std::string::npos)
        << e.what();
  }
}

// ---- NaN/Inf guard ---------------------------------------------------------------------------

// The reference dense GEMM, except that lm_head outputs (n == vocab) turn NaN from the
// `poison_from`-th lm_head call on.
class PoisonedLmHead final : public kernels::GemmKernel {
 public:
  PoisonedLmHead(std::int64_t vocab, int poison_from) : vocab_(vocab), poison_from_(poison_from) {}
  void run(const float* x, std::int64_t m, const kernels::WeightMatrix& w, float* y,
           kernels::Fp4Semantics semantics) const override {
    kernels::reference_kernels().dense_gemm->run(x, m, w, y, semantics);
    if (w.n == vocab_ && calls_++ >= poison_from_) y[m * w.n - 3] = std::nanf("");
  }

 private:
  std::int64_t vocab_;
  int poison_from_;
  mutable int calls_ = 0;
};

TEST(Engine, NonFiniteLogitsFailTheRequestBeforeSampling) {
  const oracle::Data d = oracle::load(kMoe);
  for (int poison_from : {0, 4}) {
    PoisonedLmHead gemm(d.vocab, poison_from);
    kernels::KernelSet k = kernels::reference_kernels();
    k.dense_gemm = &gemm;
    auto model = load_model(kMoe, k);
    std::vector<std::int32_t> streamed;
    Session session(*model);
    try {
      session.generate(greedy(d), [&](std::int32_t t, float) { streamed.push_back(t); });
      FAIL() << "non-finite logits must fail the request";
    } catch (const NonFiniteLogits& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("non-finite logits"), std::string::npos) << msg;
      EXPECT_NE(msg.find("1 NaN and 0 Inf of 256, the first at token id 253"), std::string::npos) << msg;
      EXPECT_NE(msg.find("no token is sampled"), std::string::npos) << msg;
    }
    // Tokens before the bad logits were delivered; none from them.
    EXPECT_EQ(streamed, std::vector<std::int32_t>(d.greedy_ids.begin(), d.greedy_ids.begin() + poison_from));
    EXPECT_TRUE(session.cached_tokens().empty());  // the possibly poisoned cache was dropped
  }
}

TEST(Engine, SessionStateLivesInPagedBlocks) {
  const oracle::Data d = oracle::load(kMoe);
  auto model = load_model(kMoe);
  Session session(*model, nullptr, /*prefill_chunk=*/5, /*block_tokens=*/4);
  GenerationRequest req = greedy(d);
  EXPECT_EQ(session.generate(req).tokens, d.greedy_ids);
  // prompt + 31 fed-back tokens, in blocks of 4.
  const auto cached = static_cast<std::int64_t>(session.cached_tokens().size());
  EXPECT_EQ(cached, static_cast<std::int64_t>(d.prompt_ids.size() + d.greedy_ids.size()) - 1);
  EXPECT_EQ(session.pool().used_blocks(), (cached + 3) / 4);
  session.reset();
  EXPECT_EQ(session.pool().used_blocks(), 0);
}

TEST(Engine, GenerationStopsAtTheContextLength) {
  const oracle::Case yarn{"moe_bf16_yarn_mha_sparse_step2", "default"};  // max_position_embeddings 128
  const oracle::Data d = oracle::load(yarn);
  auto model = load_model(yarn);
  Session session(*model);
  GenerationRequest req = greedy(d);
  req.max_new_tokens = 1000;
  const GenerationResult r = session.generate(req);
  EXPECT_EQ(static_cast<std::int64_t>(d.prompt_ids.size() + r.tokens.size()), 129);
  EXPECT_EQ(r.finish, FinishReason::Length);
  req.prompt.assign(129, 1);
  EXPECT_THROW(session.generate(req), Error);
}

}  // namespace
}  // namespace fp4serve::engine
