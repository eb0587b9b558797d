#include "synth/presets.h"

#include <gtest/gtest.h>

#include "synth/checkpoint_files.h"
#include "formats/model_config.h"
#include "formats/quant_config.h"
#include "model/weight_layout.h"
#include "util/error.h"

#include <algorithm>
#include <filesystem>

namespace fp4serve::synth {
namespace {

TEST(SynthPresets, EveryPresetRoundTripsThroughConfigJson) {
  for (Arch arch : {Arch::Qwen3, Arch::Qwen3Moe, Arch::Qwen3Next, Arch::Qwen3_5Moe}) {
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
        EXPECT_EQ(back.vocab_size, c.vocab_size) << name;
        EXPECT_EQ(back.weight_prefix, c.weight_prefix) << name;
        EXPECT_EQ(back.layer_types, c.layer_types) << name;
        EXPECT_EQ(back.shared_expert_intermediate_size, c.shared_expert_intermediate_size) << name;
        EXPECT_EQ(back.linear_num_key_heads, c.linear_num_key_heads) << name;
        EXPECT_EQ(back.linear_num_value_heads, c.linear_num_value_heads) << name;
        EXPECT_EQ(back.linear_key_head_dim, c.linear_key_head_dim) << name;
        EXPECT_EQ(back.linear_value_head_dim, c.linear_value_head_dim) << name;
        EXPECT_EQ(back.linear_conv_kernel_dim, c.linear_conv_kernel_dim) << name;
        EXPECT_EQ(back.rotary_dim(), c.rotary_dim()) << name;
        EXPECT_EQ(back.rope_theta, c.rope_theta) << name;
        EXPECT_EQ(back.attn_output_gate, c.attn_output_gate) << name;
        EXPECT_EQ(back.zero_centered_norm, c.zero_centered_norm) << name;
        EXPECT_EQ(back.norm_topk_prob, c.norm_topk_prob) << name;
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
  expect_error(preset_config(Arch::Qwen3, "tiny"), dense_experts, "MoE architectures only");
  ShapeOverrides shared;
  shared.shared_intermediate = 64;
  expect_error(c, shared, "qwen3_next and qwen3_5_moe only");
  ShapeOverrides odd_rotary;  // 0.25 * 20 = 5 rotary dims
  odd_rotary.head_dim = 20;
  expect_error(preset_config(Arch::Qwen3_5Moe, "tiny"), odd_rotary, "--head-dim");
  EXPECT_THROW(preset_config(Arch::Qwen3Moe, "nope"), Error);
  try {
    arch_from_name("llama");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen3_5_moe"), std::string::npos) << e.what();
  }
  EXPECT_EQ(arch_from_name("qwen3_next"), Arch::Qwen3Next);
  EXPECT_EQ(arch_from_name("qwen3_5_moe"), Arch::Qwen3_5Moe);
}

ModelConfig fixture(const char* folder) {
  return load_model_config(std::filesystem::path(FP4SERVE_TEST_DATA) / "configs" / folder);
}

// The real-shape presets agree with the real-shaped config.json fixtures on every shape field.
void expect_same_shape(const ModelConfig& preset, const ModelConfig& real) {
  EXPECT_EQ(preset.arch, real.arch);
  EXPECT_EQ(preset.weight_prefix, real.weight_prefix);
  EXPECT_EQ(preset.vocab_size, real.vocab_size);
  EXPECT_EQ(preset.hidden_size, real.hidden_size);
  EXPECT_EQ(preset.num_hidden_layers, real.num_hidden_layers);
  EXPECT_EQ(preset.num_attention_heads, real.num_attention_heads);
  EXPECT_EQ(preset.num_key_value_heads, real.num_key_value_heads);
  EXPECT_EQ(preset.head_dim, real.head_dim);
  EXPECT_EQ(preset.rotary_dim(), real.rotary_dim());
  EXPECT_EQ(preset.num_experts, real.num_experts);
  EXPECT_EQ(preset.num_experts_per_tok, real.num_experts_per_tok);
  EXPECT_EQ(preset.moe_intermediate_size, real.moe_intermediate_size);
  EXPECT_EQ(preset.shared_expert_intermediate_size, real.shared_expert_intermediate_size);
  EXPECT_EQ(preset.layer_types, real.layer_types);
  EXPECT_EQ(preset.linear_num_key_heads, real.linear_num_key_heads);
  EXPECT_EQ(preset.linear_num_value_heads, real.linear_num_value_heads);
  EXPECT_EQ(preset.linear_key_head_dim, real.linear_key_head_dim);
  EXPECT_EQ(preset.linear_value_head_dim, real.linear_value_head_dim);
  EXPECT_EQ(preset.linear_conv_kernel_dim, real.linear_conv_kernel_dim);
  EXPECT_EQ(preset.max_position_embeddings, real.max_position_embeddings);
  EXPECT_EQ(preset.tie_word_embeddings, real.tie_word_embeddings);
}

TEST(SynthPresets, HybridRealShapesMatchTheReleaseConfigs) {
  expect_same_shape(preset_config(Arch::Qwen3_5Moe, "397b-a17b"), fixture("qwen3.5-397b-a17b"));
  expect_same_shape(preset_config(Arch::Qwen3Next, "80b-a3b"), fixture("qwen3-next-80b-a3b-instruct"));
}

TEST(SynthPresets, HybridTinyHasOneFullAttentionLayerAfterThreeLinear) {
  for (Arch arch : {Arch::Qwen3Next, Arch::Qwen3_5Moe}) {
    const ModelConfig c = preset_config(arch, "tiny");
    EXPECT_EQ(c.layer_types, (std::vector<LayerType>{LayerType::LinearAttention, LayerType::LinearAttention,
                                                     LayerType::LinearAttention, LayerType::FullAttention}));
    EXPECT_EQ(c.rotary_dim(), c.head_dim / 4);
    EXPECT_GT(c.shared_expert_intermediate_size, 0);
    EXPECT_GE(c.vocab_size, 151669);  // the Qwen3 tokenizer synth ships
  }
  ModelConfig c = preset_config(Arch::Qwen3_5Moe, "tiny");
  ShapeOverrides o;
  o.layers = 6;
  o.full_attention_interval = 2;
  apply_overrides(c, o);
  EXPECT_EQ(c.layer_types, (std::vector<LayerType>{LayerType::LinearAttention, LayerType::FullAttention,
                                                   LayerType::LinearAttention, LayerType::FullAttention,
                                                   LayerType::LinearAttention, LayerType::FullAttention}));
  EXPECT_EQ(full_attention_interval(c), 2);
  // --layers alone keeps the preset's interval.
  ModelConfig d = preset_config(Arch::Qwen3Next, "tiny");
  ShapeOverrides layers;
  layers.layers = 8;
  apply_overrides(d, layers);
  EXPECT_EQ(full_attention_interval(d), 4);
  EXPECT_EQ(d.layer_types[7], LayerType::FullAttention);
}

TEST(SynthFiles, Qwen3_5ConfigJsonIsNestedLikeTheRelease) {
  const ModelConfig c = preset_config(Arch::Qwen3_5Moe, "397b-a17b");
  const auto j = config_json(c, WeightFormat::ModelOptNvfp4, QuantScope::Experts);
  EXPECT_EQ(j["model_type"], "qwen3_5_moe");
  EXPECT_EQ(j["architectures"][0], "Qwen3_5MoeForConditionalGeneration");
  const auto& t = j["text_config"];
  EXPECT_EQ(t["model_type"], "qwen3_5_moe_text");
  ASSERT_EQ(t["layer_types"].size(), 60u);
  EXPECT_EQ(t["layer_types"][3], "full_attention");
  EXPECT_EQ(t["layer_types"][58], "linear_attention");
  EXPECT_EQ(t["rope_parameters"]["partial_rotary_factor"], 0.25);
  EXPECT_EQ(t["rope_parameters"]["mrope_section"], nlohmann::json::array({11, 11, 10}));
  EXPECT_FALSE(t.contains("intermediate_size"));  // no dense MLP in Qwen3.5-MoE
  EXPECT_FALSE(j.contains("num_experts"));        // the text model's fields stay under text_config
  // Qwen3-Next: flat, the pattern from full_attention_interval.
  const auto n = config_json(preset_config(Arch::Qwen3Next, "80b-a3b"), WeightFormat::BF16, QuantScope::All);
  EXPECT_EQ(n["model_type"], "qwen3_next");
  EXPECT_EQ(n["full_attention_interval"], 4);
  EXPECT_FALSE(n.contains("layer_types"));
  EXPECT_EQ(n["partial_rotary_factor"], 0.25);
  EXPECT_FALSE(n.contains("quantization_config"));
}

bool excluded(const std::vector<std::string>& patterns, const std::string& module) {
  for (const auto& p : patterns)
    if (module_pattern_matches(p, module)) return true;
  return false;
}

TEST(SynthFiles, HybridExpertScopeIsTheReleaseSplit) {
  for (Arch arch : {Arch::Qwen3Next, Arch::Qwen3_5Moe}) {
    EXPECT_EQ(default_quant_scope(arch), QuantScope::Experts);
    const ModelConfig c = preset_config(arch, "tiny");
    const auto patterns = excluded_modules(c, QuantScope::Experts);
    for (const ParamSpec& p : weight_layout(c)) {
      if (p.kind != ParamKind::Linear) continue;
      EXPECT_EQ(!excluded(patterns, p.module), p.release_nvfp4) << p.module;
    }
  }
  // The real list's shape: one entry per layer for shared expert, its gate and the attention.
  const auto real = excluded_modules(preset_config(Arch::Qwen3_5Moe, "397b-a17b"), QuantScope::Experts);
  auto has = [&](const std::string& e) { return std::find(real.begin(), real.end(), e) != real.end(); };
  EXPECT_TRUE(has("lm_head"));
  EXPECT_TRUE(has("model.language_model.layers.0.linear_attn*"));
  EXPECT_TRUE(has("model.language_model.layers.3.self_attn*"));
  EXPECT_TRUE(has("model.language_model.layers.59.mlp.shared_expert_gate"));
  EXPECT_FALSE(has("model.language_model.layers.3.linear_attn*"));
  EXPECT_EQ(default_quant_scope(Arch::Qwen3Moe), QuantScope::All);
}

TEST(SynthFiles, HybridAllScopeKeepsTheRecipesExclusions) {
  for (Arch arch : {Arch::Qwen3Next, Arch::Qwen3_5Moe}) {
    const ModelConfig c = preset_config(arch, "tiny");
    const auto patterns = excluded_modules(c, QuantScope::All);
    for (const ParamSpec& p : weight_layout(c)) {
      if (p.kind != ParamKind::Linear) continue;
      const bool must_stay = p.module == "lm_head" || p.module.ends_with(".mlp.gate") ||
                             p.module.ends_with("shared_expert_gate") || p.module.ends_with("in_proj_a") ||
                             p.module.ends_with("in_proj_b") || p.module.ends_with("in_proj_ba");
      EXPECT_EQ(excluded(patterns, p.module), must_stay) << p.module;
    }
  }
}

TEST(SynthFiles, ExpertScopeOfAnMoeModelWithDenseLayersKeepsItsExperts) {
  ModelConfig c = preset_config(Arch::Qwen3Moe, "tiny");
  ShapeOverrides twelve;
  twelve.layers = 12;
  apply_overrides(c, twelve);
  c.mlp_only_layers = {1};
  const auto patterns = excluded_modules(c, QuantScope::Experts);
  EXPECT_TRUE(excluded(patterns, "model.layers.1.mlp.up_proj"));
  EXPECT_FALSE(excluded(patterns, "model.layers.0.mlp.experts.3.up_proj"));
  EXPECT_FALSE(excluded(patterns, "model.layers.11.mlp.experts.3.up_proj"));  // not layer 1's pattern
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
