// config.json -> ModelConfig: the real-shaped fixtures in tests/data/configs and every error path.
#include "common/expect_error.h"
#include "common/temp_dir.h"
#include "formats/model_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "util/error.h"

namespace fp4serve {
namespace {

using fp4serve::testing::expect_error;

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kConfigs = fs::path(FP4SERVE_TEST_DATA) / "configs";

json read_fixture(const std::string& dir) {
  std::ifstream in(kConfigs / dir / "config.json");
  EXPECT_TRUE(in.good()) << dir;
  return json::parse(in);
}


void expect_parse_error(const json& doc, std::initializer_list<std::string> parts) {
  expect_error([&] { (void)parse_model_config(doc, "cfg/config.json"); }, parts);
}

using fp4serve::testing::TempDir;

std::size_t count_full(const ModelConfig& c) {
  std::size_t n = 0;
  for (LayerType t : c.layer_types) n += t == LayerType::FullAttention ? 1 : 0;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Fixtures

TEST(ModelConfigFixture, Qwen3_30B_A3B) {
  ModelConfig c = load_model_config(kConfigs / "qwen3-30b-a3b");
  EXPECT_EQ(c.arch, Arch::Qwen3Moe);
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_EQ(arch_name(c.arch), "qwen3_moe");
  EXPECT_EQ(c.weight_prefix, "model.");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 6144);
  EXPECT_EQ(c.num_hidden_layers, 48);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);  // != hidden / heads (64): allowed
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 1.0);
  EXPECT_EQ(c.rotary_dim(), 128);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.attn_output_gate);
  EXPECT_FALSE(c.zero_centered_norm);
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_EQ(c.shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.decoder_sparse_step, 1);
  EXPECT_TRUE(c.mlp_only_layers.empty());
  ASSERT_EQ(c.layer_types.size(), 48u);
  EXPECT_EQ(count_full(c), 48u);
  for (std::int64_t l = 0; l < 48; ++l) EXPECT_TRUE(c.is_moe_layer(l)) << l;
  EXPECT_FALSE(c.is_moe_layer(48));
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int64_t>{151645});
}

TEST(ModelConfigFixture, Qwen3_235B_A22B) {
  ModelConfig c = load_model_config(kConfigs / "qwen3-235b-a22b");
  EXPECT_EQ(c.arch, Arch::Qwen3Moe);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_hidden_layers, 94);
  EXPECT_EQ(c.num_attention_heads, 64);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.moe_intermediate_size, 1536);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.layer_types.size(), 94u);
}

TEST(ModelConfigFixture, Qwen3_8B_Dense) {
  ModelConfig c = load_model_config(kConfigs / "qwen3-8b");
  EXPECT_EQ(c.arch, Arch::Qwen3);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_FALSE(c.is_moe());
  EXPECT_EQ(c.num_experts, 0);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.num_hidden_layers, 36);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(count_full(c), 36u);
  EXPECT_FALSE(c.norm_topk_prob);
}

TEST(ModelConfigFixture, Qwen3Next_80B_A3B) {
  ModelConfig c = load_model_config(kConfigs / "qwen3-next-80b-a3b-instruct");
  EXPECT_EQ(c.arch, Arch::Qwen3Next);
  EXPECT_EQ(c.weight_prefix, "model.");
  EXPECT_TRUE(c.zero_centered_norm);
  EXPECT_TRUE(c.attn_output_gate);  // no field: always gated
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim(), 64);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.num_experts, 512);
  EXPECT_EQ(c.num_experts_per_tok, 10);
  EXPECT_EQ(c.moe_intermediate_size, 512);
  EXPECT_EQ(c.shared_expert_intermediate_size, 512);
  EXPECT_EQ(c.linear_conv_kernel_dim, 4);
  EXPECT_EQ(c.linear_key_head_dim, 128);
  EXPECT_EQ(c.linear_value_head_dim, 128);
  EXPECT_EQ(c.linear_num_key_heads, 16);
  EXPECT_EQ(c.linear_num_value_heads, 32);
  // No layer_types in the file: from full_attention_interval 4.
  ASSERT_EQ(c.layer_types.size(), 48u);
  EXPECT_EQ(c.layer_types[0], LayerType::LinearAttention);
  EXPECT_EQ(c.layer_types[2], LayerType::LinearAttention);
  EXPECT_EQ(c.layer_types[3], LayerType::FullAttention);
  EXPECT_EQ(c.layer_types[47], LayerType::FullAttention);
  EXPECT_EQ(count_full(c), 12u);
}

TEST(ModelConfigFixture, Qwen3_5_397B_A17B_NestedTextConfig) {
  ModelConfig c = load_model_config(kConfigs / "qwen3.5-397b-a17b");
  EXPECT_EQ(c.arch, Arch::Qwen3_5Moe);
  EXPECT_EQ(c.model_type, "qwen3_5_moe");
  EXPECT_EQ(c.weight_prefix, "model.language_model.");
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_hidden_layers, 60);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);  // from rope_parameters
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim(), 64);
  EXPECT_EQ(c.rope_scaling.type, "default");  // mrope with rope_type default
  EXPECT_TRUE(c.zero_centered_norm);
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_TRUE(c.norm_topk_prob);  // no field: always renormalized
  EXPECT_EQ(c.num_experts, 512);
  EXPECT_EQ(c.num_experts_per_tok, 10);
  EXPECT_EQ(c.moe_intermediate_size, 1024);
  EXPECT_EQ(c.shared_expert_intermediate_size, 1024);
  EXPECT_EQ(c.intermediate_size, 0);
  EXPECT_EQ(c.linear_num_value_heads, 64);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  ASSERT_EQ(c.layer_types.size(), 60u);
  EXPECT_EQ(count_full(c), 15u);
  EXPECT_EQ(c.layer_types[3], LayerType::FullAttention);
  EXPECT_EQ(c.layer_types[59], LayerType::FullAttention);
  for (std::int64_t l = 0; l < 60; ++l) EXPECT_TRUE(c.is_moe_layer(l));
  EXPECT_EQ(c.bos_token_id, 248044);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int64_t>{248044});
  EXPECT_FALSE(c.tie_word_embeddings);
}

// ---------------------------------------------------------------------------------------------
// Rules

TEST(ModelConfigRules, Qwen3_5TextOnlyFlatForm) {
  json doc = read_fixture("qwen3.5-397b-a17b")["text_config"];
  ModelConfig c = parse_model_config(doc, "config.json");
  EXPECT_EQ(c.arch, Arch::Qwen3_5Moe);
  EXPECT_EQ(c.model_type, "qwen3_5_moe_text");
  EXPECT_EQ(c.weight_prefix, "model.");
  EXPECT_EQ(c.num_hidden_layers, 60);
}

TEST(ModelConfigRules, Qwen3_5FlatWithoutTextConfig) {
  json doc = read_fixture("qwen3.5-397b-a17b")["text_config"];
  doc["model_type"] = "qwen3_5_moe";
  doc["architectures"] = {"Qwen3_5MoeForCausalLM"};
  ModelConfig c = parse_model_config(doc, "config.json");
  EXPECT_EQ(c.weight_prefix, "model.");
  EXPECT_EQ(c.arch, Arch::Qwen3_5Moe);
}

TEST(ModelConfigRules, Qwen3_5TokensFromTopLevelWhenTextConfigHasNone) {
  json doc = read_fixture("qwen3.5-397b-a17b");
  doc["text_config"].erase("eos_token_id");
  doc["text_config"].erase("bos_token_id");
  doc["eos_token_id"] = {248046, 248044};
  ModelConfig c = parse_model_config(doc, "config.json");
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int64_t>{248046, 248044}));
  EXPECT_EQ(c.bos_token_id, -1);
}

TEST(ModelConfigRules, HeadDimDefaultsToHiddenOverHeads) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc.erase("head_dim");
  EXPECT_EQ(parse_model_config(doc, "config.json").head_dim, 64);
  doc["head_dim"] = nullptr;  // null = unset
  EXPECT_EQ(parse_model_config(doc, "config.json").head_dim, 64);
}

TEST(ModelConfigRules, KvHeadsDefaultToHeads) {
  json doc = read_fixture("qwen3-8b");
  doc.erase("num_key_value_heads");
  EXPECT_EQ(parse_model_config(doc, "config.json").num_key_value_heads, 32);
}

TEST(ModelConfigRules, RopeParametersTransformersV5) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc.erase("rope_theta");
  doc.erase("rope_scaling");
  doc["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5000000}};
  ModelConfig c = parse_model_config(doc, "config.json");
  EXPECT_DOUBLE_EQ(c.rope_theta, 5e6);
  EXPECT_EQ(c.rope_scaling.type, "default");
  // rope_parameters wins over a stale top-level value.
  doc["rope_theta"] = 10000;
  EXPECT_DOUBLE_EQ(parse_model_config(doc, "config.json").rope_theta, 5e6);
}

TEST(ModelConfigRules, RopeThetaDefault) {
  json doc = read_fixture("qwen3-8b");
  doc.erase("rope_theta");
  EXPECT_DOUBLE_EQ(parse_model_config(doc, "config.json").rope_theta, 10000.0);
}

TEST(ModelConfigRules, PartialRotaryFactorTopLevelAndDefault) {
  json doc = read_fixture("qwen3-next-80b-a3b-instruct");
  doc["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(parse_model_config(doc, "config.json").rotary_dim(), 128);
  doc.erase("partial_rotary_factor");
  EXPECT_DOUBLE_EQ(parse_model_config(doc, "config.json").partial_rotary_factor, 0.25);
}

TEST(ModelConfigRules, YarnRopeScaling) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  ModelConfig c = parse_model_config(doc, "config.json");
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 0.0);

  // Legacy "type" key; original_max_position_embeddings defaults to max_position_embeddings.
  doc["rope_scaling"] = {{"type", "yarn"}, {"factor", 2}, {"beta_fast", 16}, {"attention_factor", 1.1}};
  c = parse_model_config(doc, "config.json");
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 1.1);
}

TEST(ModelConfigRules, YarnInRopeParameters) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc.erase("rope_theta");
  doc["rope_scaling"] = nullptr;
  doc["rope_parameters"] = {
      {"rope_type", "yarn"}, {"rope_theta", 1000000}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  ModelConfig c = parse_model_config(doc, "config.json");
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
}

TEST(ModelConfigRules, LinearRopeScaling) {
  json doc = read_fixture("qwen3-8b");
  doc["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ModelConfig c = parse_model_config(doc, "config.json");
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);
}

TEST(ModelConfigRules, EosTokenIdIntOrList) {
  json doc = read_fixture("qwen3-8b");
  doc["eos_token_id"] = {151645, 151643};
  EXPECT_EQ(parse_model_config(doc, "config.json").eos_token_ids, (std::vector<std::int64_t>{151645, 151643}));
  doc["eos_token_id"] = nullptr;
  EXPECT_TRUE(parse_model_config(doc, "config.json").eos_token_ids.empty());
}

TEST(ModelConfigRules, ExplicitLayerTypesForQwen3Next) {
  json doc = read_fixture("qwen3-next-80b-a3b-instruct");
  doc["num_hidden_layers"] = 4;
  doc["layer_types"] = {"full_attention", "linear_attention", "linear_attention", "full_attention"};
  ModelConfig c = parse_model_config(doc, "config.json");
  ASSERT_EQ(c.layer_types.size(), 4u);
  EXPECT_EQ(c.layer_types[0], LayerType::FullAttention);
  EXPECT_EQ(c.layer_types[1], LayerType::LinearAttention);
}

TEST(ModelConfigRules, FullAttentionIntervalAndDefault) {
  json doc = read_fixture("qwen3-next-80b-a3b-instruct");
  doc["num_hidden_layers"] = 6;
  doc["full_attention_interval"] = 2;
  ModelConfig c = parse_model_config(doc, "config.json");
  EXPECT_EQ(count_full(c), 3u);
  EXPECT_EQ(c.layer_types[1], LayerType::FullAttention);
  doc.erase("full_attention_interval");
  doc["num_hidden_layers"] = 8;
  c = parse_model_config(doc, "config.json");
  EXPECT_EQ(count_full(c), 2u);
  EXPECT_EQ(c.layer_types[3], LayerType::FullAttention);
  EXPECT_EQ(c.layer_types[7], LayerType::FullAttention);
}

TEST(ModelConfigRules, Qwen3MoeExplicitFullAttentionLayerTypes) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["layer_types"] = json::array();
  for (int i = 0; i < 48; ++i) doc["layer_types"].push_back("full_attention");
  EXPECT_EQ(count_full(parse_model_config(doc, "config.json")), 48u);
}

TEST(ModelConfigRules, MlpOnlyLayersAndSparseStep) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["mlp_only_layers"] = {0, 5};
  doc["decoder_sparse_step"] = 2;
  ModelConfig c = parse_model_config(doc, "config.json");
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(2));  // (2+1) % 2 != 0
  EXPECT_TRUE(c.is_moe_layer(3));
  EXPECT_FALSE(c.is_moe_layer(5));
  EXPECT_FALSE(c.is_moe_layer(-1));
}

TEST(ModelConfigRules, NormTopkProbDefaults) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc.erase("norm_topk_prob");
  EXPECT_FALSE(parse_model_config(doc, "config.json").norm_topk_prob);  // HF Qwen3MoeConfig default
  doc = read_fixture("qwen3-next-80b-a3b-instruct");
  doc.erase("norm_topk_prob");
  EXPECT_TRUE(parse_model_config(doc, "config.json").norm_topk_prob);
  doc = read_fixture("qwen3.5-397b-a17b");
  doc["text_config"]["norm_topk_prob"] = false;  // ignored: Qwen3.5 always renormalizes
  EXPECT_TRUE(parse_model_config(doc, "config.json").norm_topk_prob);
}

TEST(ModelConfigRules, AttnOutputGateField) {
  json doc = read_fixture("qwen3.5-397b-a17b");
  doc["text_config"]["attn_output_gate"] = false;
  EXPECT_FALSE(parse_model_config(doc, "config.json").attn_output_gate);
}

TEST(ModelConfigRules, TieWordEmbeddingsTopLevelWins) {
  json doc = read_fixture("qwen3.5-397b-a17b");
  doc["tie_word_embeddings"] = true;
  EXPECT_TRUE(parse_model_config(doc, "config.json").tie_word_embeddings);
  doc.erase("tie_word_embeddings");
  doc["text_config"]["tie_word_embeddings"] = true;
  EXPECT_TRUE(parse_model_config(doc, "config.json").tie_word_embeddings);
}

// ---------------------------------------------------------------------------------------------
// Errors: every message names the file and the field.

TEST(ModelConfigErrors, UnknownModelTypeListsSupported) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["model_type"] = "llama";
  expect_parse_error(doc,
                     {"cfg/config.json", "model_type", "llama", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe"});
}

TEST(ModelConfigErrors, MissingModelType) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc.erase("model_type");
  expect_parse_error(doc, {"cfg/config.json", "'model_type'", "missing"});
}

TEST(ModelConfigErrors, UnknownArchitectureListsSupported) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["architectures"] = {"LlamaForCausalLM"};
  expect_parse_error(doc, {"cfg/config.json", "architectures[0]", "LlamaForCausalLM", "Qwen3MoeForCausalLM",
                           "Qwen3_5MoeForConditionalGeneration"});
}

TEST(ModelConfigErrors, ArchitectureDisagreesWithModelType) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["architectures"] = {"Qwen3ForCausalLM"};
  expect_parse_error(doc, {"architectures[0]", "Qwen3ForCausalLM", "qwen3_moe"});
}

TEST(ModelConfigErrors, MissingRequiredField) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc.erase("hidden_size");
  expect_parse_error(doc, {"cfg/config.json", "'hidden_size'", "missing"});
  doc = read_fixture("qwen3-30b-a3b");
  doc.erase("num_experts");
  expect_parse_error(doc, {"'num_experts'", "missing"});
  doc = read_fixture("qwen3-8b");
  doc.erase("intermediate_size");
  expect_parse_error(doc, {"'intermediate_size'", "missing"});
  doc = read_fixture("qwen3-next-80b-a3b-instruct");
  doc.erase("linear_key_head_dim");
  expect_parse_error(doc, {"'linear_key_head_dim'", "missing"});
  doc = read_fixture("qwen3-next-80b-a3b-instruct");
  doc.erase("shared_expert_intermediate_size");
  expect_parse_error(doc, {"'shared_expert_intermediate_size'", "missing"});
}

TEST(ModelConfigErrors, MissingFieldInTextConfigNamesThePath) {
  json doc = read_fixture("qwen3.5-397b-a17b");
  doc["text_config"].erase("num_attention_heads");
  expect_parse_error(doc, {"cfg/config.json", "'text_config.num_attention_heads'", "missing"});
}

TEST(ModelConfigErrors, NullRequiredFieldIsMissing) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["vocab_size"] = nullptr;
  expect_parse_error(doc, {"'vocab_size'", "missing"});
}

TEST(ModelConfigErrors, WrongJsonType) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["hidden_size"] = "2048";
  expect_parse_error(doc, {"cfg/config.json", "'hidden_size'", "integer", "string"});
  doc = read_fixture("qwen3-30b-a3b");
  doc["hidden_size"] = 2048.5;
  expect_parse_error(doc, {"'hidden_size'", "integer"});
  doc = read_fixture("qwen3-30b-a3b");
  doc["vocab_size"] = json::parse("18446744073709551615");
  expect_parse_error(doc, {"'vocab_size'", "out of range"});
  doc = read_fixture("qwen3-30b-a3b");
  doc["norm_topk_prob"] = 1;
  expect_parse_error(doc, {"'norm_topk_prob'", "boolean"});
  doc = read_fixture("qwen3-30b-a3b");
  doc["rope_theta"] = "1e6";
  expect_parse_error(doc, {"'rope_theta'", "number"});
  doc = read_fixture("qwen3-30b-a3b");
  doc["rope_scaling"] = "yarn";
  expect_parse_error(doc, {"'rope_scaling'", "object"});
  doc = read_fixture("qwen3-30b-a3b");
  doc["mlp_only_layers"] = 3;
  expect_parse_error(doc, {"'mlp_only_layers'", "array"});
  doc = read_fixture("qwen3-30b-a3b");
  doc["eos_token_id"] = "151645";
  expect_parse_error(doc, {"'eos_token_id'", "integer or a list"});
  doc = read_fixture("qwen3-30b-a3b");
  doc["eos_token_id"] = {151645, "x"};
  expect_parse_error(doc, {"'eos_token_id[1]'", "integer"});
  doc = read_fixture("qwen3.5-397b-a17b");
  doc["text_config"] = {1, 2};
  expect_parse_error(doc, {"'text_config'", "object"});
  doc = read_fixture("qwen3-30b-a3b");
  doc["model_type"] = 3;
  expect_parse_error(doc, {"'model_type'", "string"});
}

TEST(ModelConfigErrors, TopLevelNotAnObject) {
  expect_parse_error(json::array(), {"cfg/config.json", "object"});
}

TEST(ModelConfigErrors, NonPositiveSizes) {
  for (const char* field : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "head_dim", "num_experts", "num_experts_per_tok",
                            "moe_intermediate_size", "max_position_embeddings", "decoder_sparse_step"}) {
    json doc = read_fixture("qwen3-30b-a3b");
    doc[field] = 0;
    expect_parse_error(doc, {"cfg/config.json", std::string("'") + field + "'", "positive"});
    doc[field] = -4;
    expect_parse_error(doc, {std::string("'") + field + "'", "positive"});
  }
  json doc = read_fixture("qwen3-next-80b-a3b-instruct");
  doc["linear_num_value_heads"] = 0;
  expect_parse_error(doc, {"'linear_num_value_heads'", "positive"});
  doc = read_fixture("qwen3-next-80b-a3b-instruct");
  doc["full_attention_interval"] = 0;
  expect_parse_error(doc, {"'full_attention_interval'", "positive"});
}

TEST(ModelConfigErrors, HeadsNotDivisibleByKvHeads) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["num_key_value_heads"] = 5;
  expect_parse_error(doc, {"cfg/config.json", "'num_key_value_heads'", "(5)", "(32)"});
}

TEST(ModelConfigErrors, HeadDimMissingAndHiddenNotDivisible) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc.erase("head_dim");
  doc["num_attention_heads"] = 48;
  doc["num_key_value_heads"] = 4;
  expect_parse_error(doc, {"'head_dim'", "missing", "2048"});
}

TEST(ModelConfigErrors, ExpertsPerTokenExceedsExperts) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["num_experts_per_tok"] = 129;
  expect_parse_error(doc, {"cfg/config.json", "'num_experts_per_tok'", "129", "128"});
}

TEST(ModelConfigErrors, LayerTypesLengthMismatch) {
  json doc = read_fixture("qwen3.5-397b-a17b");
  doc["text_config"]["layer_types"].erase(0);
  expect_parse_error(doc, {"cfg/config.json", "'text_config.layer_types'", "59", "60"});
}

TEST(ModelConfigErrors, UnknownLayerType) {
  json doc = read_fixture("qwen3.5-397b-a17b");
  doc["text_config"]["layer_types"][5] = "sliding_attention";
  expect_parse_error(doc, {"'text_config.layer_types[5]'", "sliding_attention", "full_attention"});
  doc = read_fixture("qwen3.5-397b-a17b");
  doc["text_config"]["layer_types"][5] = 1;
  expect_parse_error(doc, {"'text_config.layer_types[5]'", "string"});
}

TEST(ModelConfigErrors, LinearAttentionInNonHybrid) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["layer_types"] = json::array();
  for (int i = 0; i < 48; ++i) doc["layer_types"].push_back(i == 2 ? "linear_attention" : "full_attention");
  expect_parse_error(doc, {"'layer_types[2]'", "linear_attention", "qwen3_moe"});
}

TEST(ModelConfigErrors, MlpOnlyLayerOutOfRange) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["mlp_only_layers"] = {3, 48};
  expect_parse_error(doc, {"cfg/config.json", "'mlp_only_layers[1]'", "48"});
  doc["mlp_only_layers"] = {-1};
  expect_parse_error(doc, {"'mlp_only_layers[0]'", "-1"});
}

TEST(ModelConfigErrors, DenseLayersNeedIntermediateSize) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc.erase("intermediate_size");
  doc["mlp_only_layers"] = {0};
  expect_parse_error(doc, {"'intermediate_size'", "dense MLP"});
}

TEST(ModelConfigErrors, UnsupportedRopeScaling) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  expect_parse_error(doc, {"cfg/config.json", "'rope_scaling.rope_type'", "dynamic", "yarn"});
  doc["rope_scaling"] = {{"type", "longrope"}};
  expect_parse_error(doc, {"'rope_scaling.type'", "longrope"});
  doc = read_fixture("qwen3.5-397b-a17b");
  doc["text_config"]["rope_parameters"]["rope_type"] = "llama3";
  expect_parse_error(doc, {"'text_config.rope_parameters.rope_type'", "llama3"});
}

TEST(ModelConfigErrors, BadRopeScalingValues) {
  json doc = read_fixture("qwen3-30b-a3b");
  doc["rope_scaling"] = {{"rope_type", "yarn"}};
  expect_parse_error(doc, {"'rope_scaling.factor'", "required"});
  doc["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 0.5}};
  expect_parse_error(doc, {"'rope_scaling.factor'", ">= 1"});
  doc["rope_scaling"] = {{"rope_type", "yarn"}, {"type", "linear"}, {"factor", 2}};
  expect_parse_error(doc, {"'rope_scaling.rope_type'", "linear"});
  doc["rope_scaling"] = {{"rope_type", "linear"}, {"factor", -1}};
  expect_parse_error(doc, {"'rope_scaling.factor'", "positive"});
}

TEST(ModelConfigErrors, BadPartialRotaryFactor) {
  json doc = read_fixture("qwen3-next-80b-a3b-instruct");
  doc["partial_rotary_factor"] = 1.5;
  expect_parse_error(doc, {"'partial_rotary_factor'", "(0, 1]"});
  doc["partial_rotary_factor"] = 0.001;
  expect_parse_error(doc, {"'partial_rotary_factor'", "rotary dim"});
}

TEST(ModelConfigErrors, LinearHeadsNotDivisible) {
  json doc = read_fixture("qwen3-next-80b-a3b-instruct");
  doc["linear_num_value_heads"] = 24;
  doc["linear_num_key_heads"] = 16;
  expect_parse_error(doc, {"'linear_num_value_heads'", "linear_num_key_heads"});
}

TEST(ModelConfigErrors, TextConfigModelTypeMismatch) {
  json doc = read_fixture("qwen3.5-397b-a17b");
  doc["text_config"]["model_type"] = "qwen3_moe";
  expect_parse_error(doc, {"'text_config.model_type'", "qwen3_5_moe_text"});
}

TEST(ModelConfigErrors, SlidingWindowUnsupported) {
  json doc = read_fixture("qwen3-8b");
  doc["use_sliding_window"] = true;
  expect_parse_error(doc, {"'use_sliding_window'", "not supported"});
}

TEST(ModelConfigErrors, LoadMissingFileAndInvalidJson) {
  TempDir dir;
  expect_error([&] { (void)load_model_config(dir.path()); }, {(dir.path() / "config.json").string(), "cannot open"});
  {
    std::ofstream out(dir.path() / "config.json");
    out << "{\"model_type\": \"qwen3\",";
  }
  expect_error([&] { (void)load_model_config(dir.path()); }, {(dir.path() / "config.json").string(), "invalid JSON"});
  {
    std::ofstream out(dir.path() / "config.json");
    out << read_fixture("qwen3-8b").dump() << "\n";
  }
  EXPECT_EQ(load_model_config(dir.path()).arch, Arch::Qwen3);
  // Errors from a loaded file name its path.
  {
    json doc = read_fixture("qwen3-8b");
    doc["hidden_size"] = -1;
    std::ofstream out(dir.path() / "config.json");
    out << doc.dump();
  }
  expect_error([&] { (void)load_model_config(dir.path()); }, {(dir.path() / "config.json").string(), "'hidden_size'"});
}

TEST(ModelConfigQwen3Moe, AcceptsTransformers5NumLocalExperts) {
  json doc = json::parse(R"({"model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 32,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "num_local_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 128})");
  EXPECT_EQ(parse_model_config(doc, "cfg/config.json").num_experts, 6);
}

}  // namespace
}  // namespace fp4serve
