// Loading a Qwen3.5 / Qwen3-Next checkpoint refuses tensors that do not fit the config, naming
// the tensor, and accepts the layouts real checkpoints come in (model. or model.language_model.
// prefix whatever the config's form). Each case copies a hybrid oracle fixture with one change.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/temp_dir.h"
#include "kernels/kernels.h"
#include "model/hybrid_state.h"
#include "model/model_weights.h"
#include "model/qwen3_5_model.h"
#include "model/qwen3_oracle.h"

namespace fp4serve {
namespace {

using oracle::Entry;
using testing::expect_error;
using testing::TempDir;

const std::string kQ35 = "qwen3_5_moe_bf16_fused";
const std::string kNext = "qwen3_next_bf16";
const std::string kLa = "model.language_model.layers.0.linear_attn.";

void copy(const std::string& fixture, const TempDir& dir, const oracle::Mutation& mutate) {
  oracle::copy_with(fixture, dir.path(), mutate, "oracle_hybrid");
}

TEST(Qwen3_5Load, MissingDecayParameterIsNamed) {
  TempDir dir;
  copy(kQ35, dir, [](std::vector<Entry>& e) { oracle::drop(e, kLa + "A_log"); });
  expect_error([&] { load_model_weights(dir.path()); }, {kLa + "A_log", "missing", dir.path().string()});
}

TEST(Qwen3_5Load, MisShapedConvWeightIsNamed) {
  TempDir dir;
  copy(kQ35, dir, [](std::vector<Entry>& e) {
    Entry& conv = oracle::find(e, kLa + "conv1d.weight");
    conv.decl.shape = {conv.decl.shape[0] / 2, 1, 8};
  });
  expect_error([&] { load_model_weights(dir.path()); }, {kLa + "conv1d.weight", "[64, 1, 8]", "expected [128, 1, 4]"});
}

TEST(Qwen3_5Load, FusedExpertsWithTheWrongExpertCountAreNamed) {
  TempDir dir;
  const std::string name = "model.language_model.layers.2.mlp.experts.down_proj";
  copy(kQ35, dir, [&](std::vector<Entry>& e) {
    Entry& t = oracle::find(e, name);
    t.decl.shape = {4, 128, 32};  // 8 experts of [64, 32] stored as 4 of [128, 32]
  });
  expect_error([&] { load_model_weights(dir.path()); }, {name, "[4, 128, 32]", "expected [8, 64, 32]"});
}

TEST(Qwen3_5Load, GatedNormOfTheWrongWidthIsNamed) {
  TempDir dir;
  copy(kNext, dir, [](std::vector<Entry>& e) {
    Entry& n = oracle::find(e, "model.layers.1.linear_attn.norm.weight");
    n.decl.shape = {16};
    n.data.resize(32);
  });
  expect_error([&] { load_model_weights(dir.path()); }, {"model.layers.1.linear_attn.norm.weight", "[16]", "expected [8]"});
}

TEST(Qwen3_5Load, TextOnlyPrefixLoadsWithTheMultimodalConfig) {
  // A conversion that dropped "language_model." but kept the nested config: same model.
  TempDir dir;
  copy(kQ35, dir, [](std::vector<Entry>& e) {
    for (Entry& t : e) {
      const std::string from = "model.language_model.";
      if (t.decl.name.rfind(from, 0) == 0) t.decl.name = "model." + t.decl.name.substr(from.size());
    }
  });
  ModelWeights w = load_model_weights(dir.path());
  EXPECT_EQ(w.config.weight_prefix, "model.");
  const oracle::Data data = oracle::load({kQ35, "default", "oracle_hybrid"});
  const auto model = make_qwen3_5_model(std::move(w), kernels::reference_kernels());
  hybrid_test::SequenceBuffers seq(model->state_spec(), 8);
  std::vector<float> logits(static_cast<std::size_t>(8 * data.vocab));
  const SequenceChunk chunk{{data.ids.data(), 8}, &seq.state, LogitsFor::AllPositions};
  model->forward({&chunk, 1}, logits);
  for (std::int64_t t = 0; t < 8; ++t)
    EXPECT_LE(oracle::relative_error(logits.data() + t * data.vocab, data.row(static_cast<std::size_t>(t)), data.vocab),
              1e-4);
}

TEST(Qwen3_5Load, ForwardRejectsStateThatDoesNotFitTheModel) {
  const auto model = make_qwen3_5_model(load_model_weights(oracle::root("oracle_hybrid") / kNext),
                                        kernels::reference_kernels());
  const StateSpec spec = model->state_spec();
  EXPECT_EQ(spec.linear_layers, 3);
  EXPECT_EQ(spec.attention_layers, 1);
  EXPECT_EQ(spec.conv_state_floats, 3 * (2 * 16 + 4 * 8));  // (K-1) * conv_dim
  EXPECT_EQ(spec.recurrent_state_floats, 4 * 16 * 8);        // Hv * dk * dv
  hybrid_test::SequenceBuffers seq(spec, 16);
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  const std::vector<std::int32_t> tokens = {1, 2};
  const SequenceChunk ok{tokens, &seq.state, LogitsFor::LastPosition};
  // KV blocks too few for the new tokens.
  seq.state.past = 15;
  expect_error([&] { model->forward({&ok, 1}, logits); }, {"chunk 0", "KV blocks", "17"});
  seq.state.past = 0;
  // A state with fewer linear-layer buffers than the model has linear layers.
  SequenceState short_state = seq.state;
  short_state.recurrent_state = short_state.recurrent_state.subspan(1);
  const SequenceChunk bad{tokens, &short_state, LogitsFor::LastPosition};
  expect_error([&] { model->forward({&bad, 1}, logits); }, {"chunk 0", "recurrent", "3 linear-attention layers"});
  // Token outside the vocabulary, and the same sequence twice in one call.
  const std::vector<std::int32_t> oov = {1, 300};
  const SequenceChunk out_of_vocab{oov, &seq.state, LogitsFor::LastPosition};
  expect_error([&] { model->forward({&out_of_vocab, 1}, logits); }, {"token id 300", "position 1"});
  const SequenceChunk twice[] = {ok, ok};
  std::vector<float> two(2 * logits.size());
  expect_error([&] { model->forward(twice, two); }, {"chunk 1", "repeats"});
}

TEST(Qwen3_5Load, CheckWeightsFindsNanInTheDecayAndConv) {
  TempDir dir;
  copy(kQ35, dir, [](std::vector<Entry>& e) {
    Entry& a = oracle::find(e, kLa + "A_log");  // F32 in this fixture
    const std::uint32_t nan = 0x7FC00000u;
    std::memcpy(a.data.data() + 4, &nan, 4);
    Entry& conv = oracle::find(e, "model.language_model.layers.1.linear_attn.conv1d.weight");  // BF16
    conv.data[2 * 7] = 0x80;
    conv.data[2 * 7 + 1] = 0x7F;  // +Inf
  });
  const WeightCheckReport r = check_weights(load_model_weights(dir.path()));
  ASSERT_EQ(r.problems.size(), 2u);
  EXPECT_NE(r.problems[0].find(kLa + "A_log"), std::string::npos) << r.problems[0];
  EXPECT_NE(r.problems[0].find("1 NaN"), std::string::npos) << r.problems[0];
  EXPECT_NE(r.problems[1].find("layers.1.linear_attn.conv1d.weight"), std::string::npos) << r.problems[1];
  EXPECT_NE(r.problems[1].find("1 Inf"), std::string::npos) << r.problems[1];
}

}  // namespace
}  // namespace fp4serve
