#include "synth/presets.h"

#include <gtest/gtest.h>

#include "synth/checkpoint_files.h"
#include "formats/model_config.h"
#include "util/error.h"

namespace fp4serve::synth {
namespace {

TEST(SynthPresets, EveryPresetRoundTripsThroughConfigJson) {
  for (Arch arch : {Arch::Qwen3, Arch::Qwen3Moe}) {
    for (const auto& name : preset_names(arch)) {
      const ModelConfig c = preset_config(arch, name);
      for (auto format : {WeightFormat::BF16, WeightFormat::ModelOptNvfp4, WeightFormat::CompressedTensorsNvfp4}) {
        const ModelConfig back = parse_model_config(config_json(c, format, QuantScope::All), name);
        EXPECT_EQ(back.arch, c.arch) << name;
        EXPECT_EQ(back.hidden_size, c.hidden_size) << name;
        EXPECT_EQ(back.num_hidden_layers, c.num_hidden_layers) << name;
        EXPECT_EQ(back.head_dim, c.head_dim) << name;
        EXPECT_EQ(back.num_experts, c.num_experts) << name;
        EXPECT_EQ(back.num_experts_per_tok, c.num_experts_per_tok) << name;
        EXPECT_EQ(back.moe_intermediate_size, c.moe_intermediate_size) << name;
        EXPECT_EQ(back.tie_word_embeddings, c.tie_word_embeddings) << name;
        EXPECT_EQ(back.eos_token_ids, c.eos_token_ids) << name;
      }
    }
  }
}

TEST(SynthPresets, RealShapes) {
  const ModelConfig a3b = preset_config(Arch::Qwen3Moe, "30b-a3b");
  EXPECT_EQ(a3b.hidden_size, 2048);
  EXPECT_EQ(a3b.num_hidden_layers, 48);
  EXPECT_EQ(a3b.num_experts, 128);
  EXPECT_EQ(a3b.moe_intermediate_size, 768);
  const ModelConfig big = preset_config(Arch::Qwen3Moe, "235b-a22b");
  EXPECT_EQ(big.num_hidden_layers, 94);
  EXPECT_EQ(big.num_attention_heads, 64);
  EXPECT_TRUE(preset_config(Arch::Qwen3, "0.6b").tie_word_embeddings);
}

TEST(SynthPresets, OverridesAreCheckedAndNamed) {
  ModelConfig c = preset_config(Arch::Qwen3Moe, "tiny");
  ShapeOverrides o;
  o.experts = 16;
  o.experts_per_tok = 4;
  apply_overrides(c, o);
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(c.num_experts_per_tok, 4);

  auto expect_error = [](ModelConfig cfg, ShapeOverrides ov, const std::string& flag) {
    try {
      apply_overrides(cfg, ov);
      FAIL() << "expected an error for " << flag;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  ShapeOverrides too_many;
  too_many.experts_per_tok = 99;
  expect_error(c, too_many, "--experts-per-tok");
  ShapeOverrides heads;
  heads.kv_heads = 3;
  expect_error(c, heads, "--kv-heads");
  ShapeOverrides negative;
  negative.layers = -1;
  expect_error(c, negative, "--layers");
  ShapeOverrides dense_experts;
  dense_experts.experts = 4;
  expect_error(preset_config(Arch::Qwen3, "tiny"), dense_experts, "qwen3_moe only");
  EXPECT_THROW(preset_config(Arch::Qwen3Moe, "nope"), Error);
  EXPECT_THROW(arch_from_name("qwen3_next"), Error);
}

TEST(SynthFiles, ExclusionsFollowTheRecipe) {
  const ModelConfig c = preset_config(Arch::Qwen3Moe, "tiny");
  const auto all = excluded_modules(c, QuantScope::All);
  EXPECT_EQ(all, (std::vector<std::string>{"lm_head", "model.layers.*.mlp.gate"}));
  const auto experts = excluded_modules(c, QuantScope::Experts);
  EXPECT_NE(std::find(experts.begin(), experts.end(), "model.layers.*.self_attn*"), experts.end());
  const auto hf = hf_quant_config_json(c, QuantScope::All);
  EXPECT_EQ(hf["quantization"]["quant_algo"], "NVFP4");
  EXPECT_EQ(hf["quantization"]["group_size"], 16);
}

}  // namespace
}  // namespace fp4serve::synth
