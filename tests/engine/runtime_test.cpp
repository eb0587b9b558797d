// open_runtime: a checkpoint directory to a ready model with validated kernels, tokenizer,
// stop tokens and the optional NaN/Inf scan; end to end on the oracle fixtures, including text.
#include "engine/runtime.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "engine/engine.h"
#include "model/qwen3_oracle.h"

namespace fp4serve::engine {
namespace {

// The scalar reference kernels: fp32 throughout, as the oracle comparison assumes (the `auto`
// choice may pick a backend that rounds activations to BF16; see docs/model.md).
RuntimeOptions reference_options(kernels::Fp4Semantics semantics = kernels::Fp4Semantics::W4A16) {
  RuntimeOptions o;
  o.backends.dense = o.backends.fp4_gemm = o.backends.moe = o.backends.attention = "reference";
  o.backends.semantics = semantics;
  o.backends.seed = 1;
  return o;
}

class RuntimeOracle : public ::testing::TestWithParam<oracle::Case> {};

TEST_P(RuntimeOracle, GeneratesTransformersGreedyText) {
  const oracle::Data d = oracle::load(GetParam());
  Runtime rt = open_runtime(GetParam().dir(), reference_options(GetParam().semantics()));
  ASSERT_TRUE(rt.tokenizer.has_value());
  // The prompt text encodes to the oracle's prompt ids (one byte per token).
  const nlohmann::json doc = oracle::read_json(GetParam().dir() / "oracle.json");
  const auto ids = rt.tokenizer->encode(doc.at("prompt_text").get<std::string>());
  ASSERT_EQ(std::vector<std::int32_t>(ids.begin(), ids.end()), d.prompt_ids);

  GenerationRequest req;
  req.prompt = d.prompt_ids;
  req.max_new_tokens = static_cast<std::int64_t>(d.greedy_ids.size());
  req.sampling.temperature = 0.0;
  req.stop_tokens = rt.stop_tokens;
  const GenerationResult r = generate(*rt.model, req, {}, rt.kernels.get());
  EXPECT_EQ(r.tokens, d.greedy_ids);
  const std::vector<tokenizer::TokenId> out(r.tokens.begin(), r.tokens.end());
  EXPECT_EQ(rt.tokenizer->decode(out, true), d.greedy_text);
  EXPECT_GT(rt.load_seconds, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RuntimeOracle, ::testing::ValuesIn(oracle::cases()),
                         [](const ::testing::TestParamInfo<oracle::Case>& p) { return p.param.label(); });

// --kv-cache-dtype reaches the three places that must agree: the attention backend's validation,
// the model (what forward writes) and the pool a Session makes from the model's spec (a pool of
// another type would make forward refuse the state).
TEST(Runtime, KvCacheDtypeReachesValidationModelAndPool) {
  const oracle::Case c = oracle::cases().front();
  RuntimeOptions o = reference_options(c.semantics());
  Runtime f32 = open_runtime(c.dir(), o);
  o.backends.kv_cache_dtype = DType::F16;
  Runtime f16 = open_runtime(c.dir(), o);
  EXPECT_EQ(f16.model->kv_cache_dtype(), DType::F16);
  EXPECT_EQ(f16.kernels->report().kv_cache_dtype, "f16");
  for (const auto& fam : f16.kernels->report().families) {
    if (fam.family != kernels::OpFamily::Attention) continue;
    ASSERT_FALSE(fam.shapes.empty());
    for (const std::string& shape : fam.shapes) EXPECT_NE(shape.find("f16 KV cache"), std::string::npos) << shape;
  }
  Session f32_session(*f32.model), f16_session(*f16.model);
  EXPECT_EQ(2 * f16_session.pool().block_bytes(), f32_session.pool().block_bytes());
  GenerationRequest req;
  req.prompt = oracle::load(c).prompt_ids;
  req.max_new_tokens = 4;
  req.sampling.temperature = 0.0;
  EXPECT_EQ(f16_session.generate(req).tokens.size(), 4u);
}

TEST(Runtime, StopTokensComeFromConfigAndGenerationConfig) {
  testing::TempDir dir;
  oracle::copy_with("moe_bf16_gqa2", dir.path(), [](auto&) {});
  {
    std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [7, 9], "do_sample": true})";
  }
  const Runtime rt = open_runtime(dir.path(), reference_options());
  EXPECT_EQ(rt.stop_tokens, (std::vector<std::int32_t>{7, 9}));
}

TEST(Runtime, WithoutTokenizerIdsStillWork) {
  testing::TempDir dir;
  oracle::copy_with("qwen3_bf16_dense", dir.path(), [](auto&) {});
  std::filesystem::remove(dir / "tokenizer.json");
  const Runtime rt = open_runtime(dir.path(), reference_options());
  EXPECT_FALSE(rt.tokenizer.has_value());
  try {
    rt.require_tokenizer();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--prompt-ids"), std::string::npos) << e.what();
  }
  const oracle::Data d = oracle::load({"qwen3_bf16_dense", "default"});
  GenerationRequest req;
  req.prompt = d.prompt_ids;
  req.max_new_tokens = 4;
  req.sampling.temperature = 0.0;
  EXPECT_EQ(generate(*rt.model, req).tokens,
            std::vector<std::int32_t>(d.greedy_ids.begin(), d.greedy_ids.begin() + 4));
}

TEST(Runtime, ABrokenTokenizerIsNamedAfterAnyErrorOfTheWeights) {
  // The tokenizer loads on its own thread beside the weights; its error still reaches the caller,
  // and a broken checkpoint is reported as such whatever the tokenizer thread found.
  testing::TempDir dir;
  oracle::copy_with("qwen3_bf16_dense", dir.path(), [](auto&) {});
  std::ofstream(dir / "tokenizer.json") << "not json";
  try {
    open_runtime(dir.path(), reference_options());
    FAIL() << "a broken tokenizer.json must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "tokenizer.json").string() + ": not valid JSON"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(dir / "model.safetensors");
  try {
    open_runtime(dir.path(), reference_options());
    FAIL() << "a checkpoint without its weights must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is missing"), std::string::npos) << e.what();  // the weights' own error
    EXPECT_EQ(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(Runtime, CheckWeightsRefusesNonFiniteWeights) {
  RuntimeOptions o = reference_options();
  o.check_weights = true;
  const Runtime clean = open_runtime(oracle::root() / "moe_nvfp4_ct", o);
  ASSERT_TRUE(clean.weight_check.has_value());
  EXPECT_TRUE(clean.weight_check->ok());

  testing::TempDir dir;
  oracle::copy_with("moe_nvfp4_ct", dir.path(), [](auto& t) {
    oracle::find(t, "model.layers.1.mlp.experts.0.down_proj.weight_scale").data[0] = 0xff;  // E4M3 NaN
  });
  try {
    open_runtime(dir.path(), o);
    FAIL() << "a NaN block scale must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers.1.mlp.experts.0.down_proj.weight_scale'"), std::string::npos)
        << e.what();
  }
  // Without the scan the same checkpoint loads (the NaN would surface as non-finite logits).
  EXPECT_NO_THROW(open_runtime(dir.path(), reference_options()));
}

}  // namespace
}  // namespace fp4serve::engine
