// The model against transformers, on every oracle fixture (tests/data/oracle, written by
// tools/make_oracle_fixtures.py): logits at every position, greedy tokens for 32 steps, and
// prefill-then-decode equal to all-at-once.
//
// Tolerance: every row of logits must satisfy max_j |ours_j - hf_j| <= kRelTol * max_j |hf_j|,
// with kRelTol = 1e-4. Why that is tight and still safe: both sides compute in fp32 on identical
// weights (BF16 widens exactly; NVFP4 dequantizes as e2m1 * (e4m3 * weight_scale_2) in fp32, the
// order ModelOpt uses), so they differ only in rounding order: torch's blocked fp32 GEMM sums vs
// the reference kernels' double accumulation, glibc vs SLEEF exp/cos/pow (1-2 ulp). Each op
// contributes a relative error of order sqrt(K) * 2^-24 ~ 1e-6 for K <= 128, and the few layers
// of a fixture keep that at the ~1e-6 observed (printed per fixture); 1e-4 is a 100x margin. Any
// modeling mistake moves logits by 5e-3 or more (ToleranceCatchesModelingMistakes).
//
// W4A4 fake-quantizes activations, a step function: fp32 noise of 1e-7 could push one element
// across an E2M1 / E4M3 rounding boundary and change logits by ~1e-3. Both sides run the same
// fp32 formula (vLLM's ref_nvfp4_quant_dequant) on inputs that agree to ~1e-7, and no element of
// the fixture lies that close to a boundary (observed error 4e-7), so the same bound applies; a
// faster backend whose sums differ more could hit a boundary and should be judged on tokens.
//
// Greedy: the generator accepts a fixture only when each generated token wins by >= 1e-3 of the
// row's max |logit| (10x kRelTol) and no MoE top-k choice is within 1e-4 of a tie, so tokens must
// match exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "kernels/validation.h"
#include "util/cpu_features.h"
#include "model/model_weights.h"
#include "model/qwen3_model.h"
#include "model/qwen3_oracle.h"
#include "model/sequence_kv.h"

namespace fp4serve {
namespace {

constexpr double kRelTol = 1e-4;

using test_kv::SequenceKv;

class Qwen3Oracle : public ::testing::TestWithParam<oracle::Case> {
 protected:
  void SetUp() override {
    data_ = oracle::load(GetParam());
    model_ = std::make_unique<Qwen3Model>(load_model_weights(GetParam().dir()), kernels::reference_kernels(),
                                          GetParam().semantics());
    ASSERT_EQ(model_->vocab_size(), data_.vocab);
  }
  double tolerance() const { return kRelTol; }
  oracle::Data data_;
  std::unique_ptr<Qwen3Model> model_;
};

TEST_P(Qwen3Oracle, LogitsAtEveryPositionMatchTransformers) {
  const auto T = static_cast<std::int64_t>(data_.ids.size());
  SequenceKv kv(*model_, T);
  std::vector<float> logits(static_cast<std::size_t>(T * data_.vocab));
  kv.forward(*model_, data_.ids, logits);
  double worst = 0.0;
  for (std::int64_t t = 0; t < T; ++t) {
    const double err = oracle::relative_error(logits.data() + t * data_.vocab, data_.row(static_cast<std::size_t>(t)),
                                              data_.vocab);
    worst = std::max(worst, err);
    EXPECT_LE(err, tolerance()) << "position " << t;
  }
  std::printf("[ %s ] worst relative logit error %.3g\n", GetParam().label().c_str(), worst);
}

TEST_P(Qwen3Oracle, GreedyDecodeReproducesTransformersTokens) {
  const auto P = static_cast<std::int64_t>(data_.prompt_ids.size());
  const auto steps = static_cast<std::int64_t>(data_.greedy_ids.size());
  ASSERT_GE(steps, 32);
  SequenceKv kv(*model_, P + steps, /*block_tokens=*/4);
  std::vector<float> logits(static_cast<std::size_t>(data_.vocab));
  // Prefill the prompt at once, then decode one token at a time through the same forward.
  kv.forward(*model_, data_.prompt_ids, logits, LogitsFor::LastPosition);
  for (std::int64_t i = 0; i < steps; ++i) {
    const std::int32_t next = oracle::argmax(logits.data(), data_.vocab);
    ASSERT_EQ(next, data_.greedy_ids[static_cast<std::size_t>(i)]) << "greedy step " << i;
    EXPECT_LE(oracle::relative_error(logits.data(), data_.row(static_cast<std::size_t>(P - 1 + i)), data_.vocab),
              tolerance())
        << "step " << i;
    const std::int32_t token = next;
    kv.forward(*model_, {&token, 1}, logits, LogitsFor::LastPosition);
  }
}

TEST_P(Qwen3Oracle, PrefillThenDecodeEqualsAllAtOnce) {
  const auto T = static_cast<std::int64_t>(data_.ids.size());
  const auto V = data_.vocab;
  SequenceKv all(*model_, T);
  std::vector<float> at_once(static_cast<std::size_t>(T * V));
  all.forward(*model_, data_.ids, at_once);

  // Prefill in uneven chunks (5 tokens, then 3, then one at a time), into blocks of 3 tokens.
  SequenceKv kv(*model_, T, /*block_tokens=*/3);
  std::vector<float> chunk;
  std::int64_t pos = 0;
  for (std::int64_t len : {5, 3}) {
    chunk.resize(static_cast<std::size_t>(len * V));
    kv.forward(*model_, {data_.ids.data() + pos, static_cast<std::size_t>(len)}, chunk);
    for (std::int64_t t = 0; t < len; ++t)
      EXPECT_LE(oracle::relative_error(chunk.data() + t * V, at_once.data() + (pos + t) * V, V), 1e-6) << pos + t;
    pos += len;
  }
  std::vector<float> row(static_cast<std::size_t>(V));
  for (; pos < T; ++pos) {
    kv.forward(*model_, {data_.ids.data() + pos, 1}, row, LogitsFor::LastPosition);
    EXPECT_LE(oracle::relative_error(row.data(), at_once.data() + pos * V, V), 1e-6) << pos;
  }
  // The caches hold the same keys and values.
  for (std::int64_t l = 0; l < model_->config().num_hidden_layers; ++l) {
    for (std::int64_t p = 0; p < T; ++p) {
      for (std::int64_t i = 0; i < kv.row_elements(); ++i) {
        const float k = all.key(l, p, i), v = all.value(l, p, i);
        ASSERT_NEAR(kv.key(l, p, i), k, 1e-5 * (1.0 + std::abs(k))) << "layer " << l << " key " << p;
        ASSERT_NEAR(kv.value(l, p, i), v, 1e-5 * (1.0 + std::abs(v))) << "layer " << l << " value " << p;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen3Oracle, ::testing::ValuesIn(oracle::cases()),
                         [](const ::testing::TestParamInfo<oracle::Case>& p) { return p.param.label(); });

// The tolerance is meaningful: plausible modeling mistakes move logits 10x-1000x beyond it.
double worst_error(const oracle::Case& c, const std::function<void(ModelWeights&)>& mutate,
                   kernels::Fp4Semantics semantics, const kernels::KernelSet& kernels = kernels::reference_kernels()) {
  const oracle::Data data = oracle::load(c);
  ModelWeights weights = load_model_weights(c.dir());
  mutate(weights);
  const Qwen3Model model(std::move(weights), kernels, semantics);
  const auto T = static_cast<std::int64_t>(data.ids.size());
  SequenceKv kv(model, T);
  std::vector<float> logits(static_cast<std::size_t>(T * data.vocab));
  kv.forward(model, data.ids, logits);
  double worst = 0.0;
  for (std::int64_t t = 0; t < T; ++t)
    worst = std::max(worst, oracle::relative_error(logits.data() + t * data.vocab, data.row(static_cast<std::size_t>(t)),
                                                   data.vocab));
  return worst;
}

TEST(Qwen3OracleFixtures, ToleranceCatchesModelingMistakes) {
  const oracle::Case moe{"moe_bf16_gqa2", "default"};
  const auto w4a16 = kernels::Fp4Semantics::W4A16;
  EXPECT_LE(worst_error(moe, [](ModelWeights&) {}, w4a16), kRelTol);
  // RoPE base off by 1%.
  EXPECT_GT(worst_error(moe, [](ModelWeights& w) { w.config.rope_theta *= 1.01; }, w4a16), 10 * kRelTol);
  // Renormalising the top-k router weights when the config says not to (and vice versa).
  EXPECT_GT(worst_error(moe, [](ModelWeights& w) { for (auto& l : w.layers) l.moe.norm_topk_prob = false; }, w4a16),
            10 * kRelTol);
  // (1 + w) RMSNorm gains, the Qwen3.5 convention, on the final norm.
  EXPECT_GT(worst_error(moe, [](ModelWeights& w) { for (float& g : w.norm) g += 1.0f; }, w4a16), 10 * kRelTol);
  // Ignoring yarn.
  const oracle::Case yarn{"moe_bf16_yarn_mha_sparse_step2", "default"};
  EXPECT_GT(worst_error(yarn, [](ModelWeights& w) { w.config.rope_scaling.type = "default"; }, w4a16), 10 * kRelTol);
}

TEST(Qwen3OracleFixtures, W4A4AndW4A16AreDistinguished) {
  // The W4A4 oracle is not what W4A16 computes (so the fake quantization is really tested).
  const oracle::Case c{"moe_nvfp4_modelopt", "w4a4"};
  EXPECT_GT(worst_error(c, [](ModelWeights&) {}, kernels::Fp4Semantics::W4A16), 10 * kRelTol);
  EXPECT_LE(worst_error(c, [](ModelWeights&) {}, kernels::Fp4Semantics::W4A4), kRelTol);
}

// Why auto may quantize activations to int8 for a checkpoint calibrated for 4-bit activations
// (kernels/registry.cpp): on such a checkpoint's fixture, the int8-activation backends move the
// logits several times less than the W4A4 arithmetic the checkpoint was published for, and
// within their validation tolerance.
TEST(Qwen3OracleFixtures, Int8ActivationsMoveLogitsLessThanTheCalibratedW4A4) {
  const oracle::Case c{"moe_nvfp4_modelopt", "default"};
  const auto w4a16 = kernels::Fp4Semantics::W4A16;
  const double w4a4 = worst_error(c, [](ModelWeights&) {}, kernels::Fp4Semantics::W4A4);
  int checked = 0;
  for (const char* name : {"amx-int8", "avx512-int8", "avx2-int8"}) {
    const kernels::Backend* b = kernels::find_backend(name);
    if (b == nullptr || !cpu_features().missing(b->needs).empty()) continue;
    kernels::BackendOptions o;
    o.seed = 7;
    o.fp4_gemm = o.moe = name;
    const ModelWeights probe = load_model_weights(c.dir());
    const auto selection = kernels::select_kernels(o, probe.config, probe.quantization);
    const double int8 = worst_error(c, [](ModelWeights&) {}, w4a16, selection->kernels());
    std::printf("%s: int8 activations %.3g, W4A4 %.3g of the max |logit| from the W4A16 oracle\n", name, int8, w4a4);
    EXPECT_GT(int8, kRelTol) << name << ": the int8 kernels did not run";
    EXPECT_LE(int8, kernels::validation_tolerance(kernels::Precision::Int8Activations)) << name;
    EXPECT_LT(4 * int8, w4a4) << name;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no int8-activation backend runs on this CPU";
}

TEST(Qwen3OracleFixtures, AllArePresent) {
  // Guards against a test run that silently finds no fixture.
  EXPECT_GE(oracle::cases().size(), 8u);
}

}  // namespace
}  // namespace fp4serve
