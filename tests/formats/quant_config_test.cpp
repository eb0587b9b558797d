// Quantization configs (ModelOpt hf_quant_config.json / quantization_config, compressed-tensors):
// parsing, per-module declarations, ignore-pattern matching, and every error path.
#include "common/expect_error.h"
#include "common/temp_dir.h"
#include "formats/quant_config.h"

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

json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}


// parse_quant_config with the files named "ckpt/hf_quant_config.json" and "ckpt/config.json".
QuantConfig parse(const json* hf, const json* cfg) {
  return parse_quant_config(hf, cfg, "ckpt");
}

void expect_parse_error(const json* hf, const json* cfg, std::initializer_list<std::string> parts) {
  expect_error([&] { (void)parse(hf, cfg); }, parts);
}

json modelopt_hf(const std::string& algo, json exclude = json::array({"lm_head"})) {
  return {{"producer", {{"name", "modelopt"}, {"version", "0.31.0"}}},
          {"quantization",
           {{"quant_algo", algo}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16}, {"exclude_modules", exclude}}}};
}

json with_quant(json qcfg) {
  return {{"model_type", "qwen3_moe"}, {"quantization_config", std::move(qcfg)}};
}

json modelopt_flat(const std::string& algo, json ignore = json::array({"lm_head"})) {
  return with_quant(
      {{"quant_method", "modelopt"},
       {"quant_algo", algo},
       {"ignore", ignore},
       {"producer", {{"name", "modelopt"}, {"version", "0.31.0"}}},
       {"config_groups",
        {{"group_0",
          {{"weights", {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}}}, {"targets", {"Linear"}}}}}}});
}

json ct_nvfp4(bool w4a4, json ignore = json::array({"lm_head", "re:.*mlp.gate$"})) {
  json group = {{"format", "nvfp4-pack-quantized"},
                {"targets", {"Linear"}},
                {"weights",
                 {{"num_bits", 4},
                  {"type", "float"},
                  {"strategy", "tensor_group"},
                  {"group_size", 16},
                  {"symmetric", true},
                  {"dynamic", false}}},
                {"input_activations", nullptr}};
  if (w4a4) {
    group["input_activations"] = {
        {"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", 16}, {"dynamic", "local"}};
  }
  return with_quant({{"quant_method", "compressed-tensors"},
                     {"format", "nvfp4-pack-quantized"},
                     {"config_groups", {{"group_0", group}}},
                     {"ignore", ignore},
                     {"kv_cache_scheme", nullptr},
                     {"version", "0.12.2"}});
}

using fp4serve::testing::TempDir;

// ---------------------------------------------------------------------------------------------
// Pattern matching

TEST(QuantConfigPattern, PlainNameCoversModuleAndSubtree) {
  EXPECT_TRUE(module_pattern_matches("lm_head", "lm_head"));
  EXPECT_TRUE(module_pattern_matches("model.layers.0.mlp", "model.layers.0.mlp.experts.1.up_proj"));
  EXPECT_FALSE(module_pattern_matches("lm_head", "lm_head2"));
  EXPECT_FALSE(module_pattern_matches("model.layers.0.mlp.gate", "model.layers.0.mlp.gate_proj"));
}

TEST(QuantConfigPattern, PrefixStarIsModuleOrSubtree) {
  // ModelOpt's summarized "x*" means x and x.<anything>, not x<anything>.
  EXPECT_TRUE(module_pattern_matches("model.layers.1*", "model.layers.1"));
  EXPECT_TRUE(module_pattern_matches("model.layers.1*", "model.layers.1.self_attn.q_proj"));
  EXPECT_FALSE(module_pattern_matches("model.layers.1*", "model.layers.10.self_attn.q_proj"));
  EXPECT_TRUE(module_pattern_matches("model.layers.0.mlp.shared_expert*", "model.layers.0.mlp.shared_expert.up_proj"));
  EXPECT_FALSE(module_pattern_matches("model.layers.0.mlp.shared_expert*", "model.layers.0.mlp.shared_expert_gate"));
  // "x.*" is an ordinary glob: children only.
  EXPECT_TRUE(module_pattern_matches("model.layers.0.mlp.*", "model.layers.0.mlp.gate"));
  EXPECT_FALSE(module_pattern_matches("model.layers.0.mlp.*", "model.layers.0.mlp"));
}

TEST(QuantConfigPattern, Globs) {
  EXPECT_TRUE(module_pattern_matches("model.layers.*.mlp.gate", "model.layers.17.mlp.gate"));
  EXPECT_FALSE(module_pattern_matches("model.layers.*.mlp.gate", "model.layers.17.mlp.gate_proj"));
  EXPECT_TRUE(module_pattern_matches("*.mlp.shared_expert.*", "model.layers.3.mlp.shared_expert.down_proj"));
  EXPECT_FALSE(module_pattern_matches("*.mlp.shared_expert.*", "model.layers.3.mlp.shared_expert_gate"));
  EXPECT_TRUE(module_pattern_matches("*lm_head*", "lm_head"));
  EXPECT_TRUE(module_pattern_matches("*router*", "model.layers.0.mlp.router.proj"));
  EXPECT_TRUE(module_pattern_matches("model.layers.?.mlp.gate", "model.layers.7.mlp.gate"));
  EXPECT_FALSE(module_pattern_matches("model.layers.?.mlp.gate", "model.layers.17.mlp.gate"));
  EXPECT_TRUE(module_pattern_matches("model.layers.[0-3].mlp.gate", "model.layers.2.mlp.gate"));
  EXPECT_FALSE(module_pattern_matches("model.layers.[0-3].mlp.gate", "model.layers.4.mlp.gate"));
  EXPECT_TRUE(module_pattern_matches("model.layers.[!0].mlp.gate", "model.layers.4.mlp.gate"));
  EXPECT_FALSE(module_pattern_matches("model.layers.[!0].mlp.gate", "model.layers.0.mlp.gate"));
  // A glob also covers the subtree of what it matches.
  EXPECT_TRUE(module_pattern_matches("*.self_attn", "model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(module_pattern_matches("", "lm_head"));
}

TEST(QuantConfigPattern, PrefixSpellings) {
  // The checkpoint says model.language_model.*, the pattern model.* (or the reverse).
  EXPECT_TRUE(module_pattern_matches("model.layers.0.mlp.gate", "model.language_model.layers.0.mlp.gate"));
  EXPECT_TRUE(module_pattern_matches("model.language_model.layers.*.mlp.gate", "model.layers.5.mlp.gate"));
  EXPECT_TRUE(module_pattern_matches("language_model.model.layers.0.self_attn*",
                                     "model.language_model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(
      module_pattern_matches("language_model.layers.0.self_attn", "model.language_model.layers.0.self_attn.k_proj"));
  EXPECT_TRUE(module_pattern_matches("layers.0.mlp.gate", "model.layers.0.mlp.gate"));
  EXPECT_TRUE(module_pattern_matches("model.lm_head", "lm_head"));
  EXPECT_FALSE(module_pattern_matches("model.layers.1.mlp.gate", "model.language_model.layers.0.mlp.gate"));
  std::vector<std::string> v = module_name_variants("model.language_model.layers.0.mlp.gate");
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0], "model.language_model.layers.0.mlp.gate");
  EXPECT_NE(std::find(v.begin(), v.end(), "model.layers.0.mlp.gate"), v.end());
  EXPECT_NE(std::find(v.begin(), v.end(), "layers.0.mlp.gate"), v.end());
  EXPECT_NE(std::find(v.begin(), v.end(), "language_model.model.layers.0.mlp.gate"), v.end());
}

TEST(QuantConfigPattern, Regex) {
  EXPECT_TRUE(module_pattern_matches("re:.*mlp.gate$", "model.layers.0.mlp.gate"));
  EXPECT_FALSE(module_pattern_matches("re:.*mlp.gate$", "model.layers.0.mlp.gate_proj"));
  // Anchored at the start like Python's re.match, not required to match in full.
  EXPECT_TRUE(module_pattern_matches("re:model\\.layers\\.0\\.", "model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(module_pattern_matches("re:layers\\.0\\.self", "xmodel.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(module_pattern_matches("re:.*self_attn.(q|k|v)_proj", "model.layers.3.self_attn.k_proj"));
  expect_error([] { (void)module_pattern_matches("re:([", "x"); }, {"re:(["});
}

TEST(QuantConfigPattern, FirstMatchingPatternAndEditsAfterParsing) {
  json hf = {{"quantization",
              {{"quant_algo", "NVFP4"},
               {"exclude_modules", {"*.self_attn.*", "model.layers.0.self_attn*", "lm_head", "model.layers.1*"}}}}};
  QuantConfig qc = parse_quant_config(&hf, nullptr, "ckpt");
  ASSERT_NE(qc.ignore_match("model.layers.0.self_attn.q_proj"), nullptr);
  EXPECT_EQ(*qc.ignore_match("model.layers.0.self_attn.q_proj"), "*.self_attn.*");  // list order
  EXPECT_EQ(*qc.ignore_match("model.layers.1.mlp.experts.0.up_proj"), "model.layers.1*");
  EXPECT_EQ(qc.ignore_match("model.layers.10.mlp.experts.0.up_proj"), nullptr);
  // Edits to `ignore` after parsing are honoured (the prebuilt index is bypassed).
  qc.ignore.push_back("model.layers.10.mlp");
  EXPECT_TRUE(qc.is_ignored("model.layers.10.mlp.experts.0.up_proj"));
  qc.ignore.clear();
  EXPECT_FALSE(qc.is_ignored("lm_head"));
  QuantConfig by_hand;
  by_hand.producer = QuantProducer::ModelOpt;
  by_hand.default_decl.weight = WeightFormat::NVFP4;
  by_hand.ignore = {"lm_head"};
  EXPECT_TRUE(by_hand.is_ignored("lm_head"));
  EXPECT_EQ(by_hand.decl_for("model.layers.0.mlp.down_proj").weight, WeightFormat::NVFP4);
}

// ---------------------------------------------------------------------------------------------
// ModelOpt

TEST(QuantConfigModelOpt, Qwen3_30B_FixtureBothFilesAgree) {
  QuantConfig qc = load_quant_config(kConfigs / "qwen3-30b-a3b-nvfp4-modelopt");
  EXPECT_EQ(qc.producer, QuantProducer::ModelOpt);
  EXPECT_EQ(qc.producer_version, "0.29.0");
  EXPECT_EQ(qc.quant_algo, "NVFP4");
  EXPECT_EQ(qc.default_decl.weight, WeightFormat::NVFP4);
  EXPECT_TRUE(qc.default_decl.activations_quantized);
  EXPECT_EQ(qc.default_decl.group_size, 16);
  EXPECT_EQ(qc.ignore.size(), 49u);
  EXPECT_EQ(qc.kv_cache_quant_algo, "");
  EXPECT_NE(qc.source.find("hf_quant_config.json"), std::string::npos);
  EXPECT_NE(qc.source.find("config.json"), std::string::npos);
  EXPECT_EQ(qc.decl_for("model.layers.0.mlp.experts.5.gate_proj").weight, WeightFormat::NVFP4);
  EXPECT_EQ(qc.decl_for("model.layers.0.self_attn.q_proj").weight, WeightFormat::NVFP4);
  EXPECT_EQ(qc.decl_for("model.layers.47.mlp.gate").weight, WeightFormat::Unquantized);
  EXPECT_TRUE(qc.is_ignored("lm_head"));
  EXPECT_TRUE(qc.is_ignored("model.layers.12.mlp.gate"));
  EXPECT_FALSE(qc.is_ignored("model.layers.12.mlp.experts.0.gate_proj"));
  ASSERT_NE(qc.ignore_match("model.layers.12.mlp.gate"), nullptr);
  EXPECT_EQ(*qc.ignore_match("model.layers.12.mlp.gate"), "model.layers.12.mlp.gate");
}

TEST(QuantConfigModelOpt, Qwen3_5_V1FixtureRoutedExpertsOnly) {
  QuantConfig qc = load_quant_config(kConfigs / "qwen3.5-397b-a17b-nvfp4-modelopt");
  EXPECT_EQ(qc.quant_algo, "NVFP4");
  EXPECT_EQ(qc.producer_version, "0.42.0");
  const std::string L = "model.language_model.layers.";
  EXPECT_EQ(qc.decl_for(L + "0.mlp.experts.511.down_proj").weight, WeightFormat::NVFP4);
  EXPECT_EQ(qc.decl_for(L + "59.mlp.experts.0.gate_proj").weight, WeightFormat::NVFP4);
  EXPECT_TRUE(qc.is_ignored(L + "0.mlp.shared_expert.gate_proj"));
  EXPECT_TRUE(qc.is_ignored(L + "0.mlp.shared_expert_gate"));
  EXPECT_TRUE(qc.is_ignored(L + "0.mlp.gate"));
  EXPECT_TRUE(qc.is_ignored(L + "0.linear_attn.in_proj_qkv"));
  EXPECT_TRUE(qc.is_ignored(L + "3.self_attn.q_proj"));
  EXPECT_TRUE(qc.is_ignored("lm_head"));
  EXPECT_TRUE(qc.is_ignored("mtp.layers.0.mlp.experts.0.gate_proj"));
  EXPECT_TRUE(qc.is_ignored("model.visual.blocks.0.attn.qkv"));
  // Community conversions without the language_model prefix resolve the same way.
  EXPECT_TRUE(qc.is_ignored("model.layers.0.linear_attn.out_proj"));
  EXPECT_FALSE(qc.is_ignored("model.layers.0.mlp.experts.3.up_proj"));
}

TEST(QuantConfigModelOpt, MixedPrecisionFixture) {
  QuantConfig qc = load_quant_config(kConfigs / "qwen3.5-397b-a17b-mixed-modelopt");
  EXPECT_EQ(qc.quant_algo, "MIXED_PRECISION");
  EXPECT_EQ(qc.kv_cache_quant_algo, "FP8");
  EXPECT_EQ(qc.default_decl.weight, WeightFormat::Unquantized);
  EXPECT_FALSE(qc.per_module.empty());
  const std::string L = "model.language_model.layers.";
  // The experts entry is the parent module: every expert projection under it is NVFP4.
  ModuleQuantDecl e = qc.decl_for(L + "0.mlp.experts.17.gate_proj");
  EXPECT_EQ(e.weight, WeightFormat::NVFP4);
  EXPECT_TRUE(e.activations_quantized);
  EXPECT_EQ(e.group_size, 16);
  EXPECT_EQ(qc.decl_for(L + "3.self_attn.q_proj").weight, WeightFormat::FP8);
  EXPECT_EQ(qc.decl_for(L + "0.linear_attn.in_proj_qkv").weight, WeightFormat::FP8);
  EXPECT_EQ(qc.decl_for(L + "0.mlp.shared_expert.down_proj").weight, WeightFormat::FP8);
  EXPECT_EQ(qc.decl_for(L + "0.mlp.gate").weight, WeightFormat::Unquantized);
  EXPECT_EQ(qc.decl_for(L + "0.linear_attn.in_proj_a").weight, WeightFormat::Unquantized);
  EXPECT_EQ(qc.decl_for("lm_head").weight, WeightFormat::Unquantized);
  // Not listed anywhere: unquantized.
  EXPECT_EQ(qc.decl_for(L + "0.linear_attn.conv1d").weight, WeightFormat::Unquantized);
}

TEST(QuantConfigModelOpt, MixedPrecisionPerModuleKeysAndW4A16) {
  json hf = {{"producer", {{"name", "modelopt"}}},
             {"quantization",
              {{"quant_algo", "MIXED_PRECISION"},
               {"quantized_layers",
                {{"model.layers.0.mlp.experts.0.up_proj", {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}}},
                 {"model.layers.0.self_attn.o_proj", {{"quant_algo", "fp8"}}}}}}}};
  QuantConfig qc = parse(&hf, nullptr);
  ModuleQuantDecl d = qc.decl_for("model.layers.0.mlp.experts.0.up_proj");
  EXPECT_EQ(d.weight, WeightFormat::NVFP4);
  EXPECT_FALSE(d.activations_quantized);
  EXPECT_EQ(qc.decl_for("model.layers.0.self_attn.o_proj").weight, WeightFormat::FP8);
  EXPECT_EQ(qc.decl_for("model.language_model.layers.0.self_attn.o_proj").weight, WeightFormat::FP8);
  EXPECT_EQ(qc.decl_for("model.layers.0.mlp.experts.1.up_proj").weight, WeightFormat::Unquantized);
}

TEST(QuantConfigModelOpt, AlgoMapping) {
  json hf = modelopt_hf("W4A16_NVFP4");
  QuantConfig qc = parse(&hf, nullptr);
  EXPECT_EQ(qc.default_decl.weight, WeightFormat::NVFP4);
  EXPECT_FALSE(qc.default_decl.activations_quantized);
  EXPECT_EQ(qc.source, "ckpt/hf_quant_config.json");

  hf = modelopt_hf("FP8");
  qc = parse(&hf, nullptr);
  EXPECT_EQ(qc.default_decl.weight, WeightFormat::FP8);
  EXPECT_TRUE(qc.default_decl.activations_quantized);

  hf = modelopt_hf("nvfp4");  // ModelOpt may emit lowercase
  qc = parse(&hf, nullptr);
  EXPECT_EQ(qc.quant_algo, "NVFP4");
  EXPECT_TRUE(qc.default_decl.activations_quantized);

  hf = modelopt_hf("NVFP4");
  hf["quantization"]["group_size"] = nullptr;
  EXPECT_EQ(parse(&hf, nullptr).default_decl.group_size, 16);
}

TEST(QuantConfigModelOpt, FlatConfigJsonOnly) {
  json cfg = modelopt_flat("NVFP4", {"lm_head", "model.layers.*.mlp.gate"});
  cfg["quantization_config"]["kv_cache_scheme"] = {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}};
  QuantConfig qc = parse(nullptr, &cfg);
  EXPECT_EQ(qc.producer, QuantProducer::ModelOpt);
  EXPECT_EQ(qc.source, "ckpt/config.json");
  EXPECT_EQ(qc.kv_cache_quant_algo, "FP8");
  EXPECT_EQ(qc.producer_version, "0.31.0");
  EXPECT_TRUE(qc.is_ignored("model.layers.3.mlp.gate"));
  EXPECT_EQ(qc.decl_for("model.layers.3.mlp.experts.0.down_proj").weight, WeightFormat::NVFP4);
}

TEST(QuantConfigModelOpt, NestedQuantizationInsideQuantizationConfig) {
  json cfg = with_quant({{"quant_method", "modelopt"}, {"quantization", modelopt_hf("W4A16_NVFP4")["quantization"]}});
  QuantConfig qc = parse(nullptr, &cfg);
  EXPECT_EQ(qc.quant_algo, "W4A16_NVFP4");
  EXPECT_TRUE(qc.is_ignored("lm_head"));
}

TEST(QuantConfigModelOpt, BothFilesAgreeInAnyOrder) {
  json hf = modelopt_hf("NVFP4", {"lm_head", "model.layers.*.mlp.gate"});
  json cfg = modelopt_flat("NVFP4", {"model.layers.*.mlp.gate", "lm_head"});
  QuantConfig qc = parse(&hf, &cfg);
  EXPECT_EQ(qc.quant_algo, "NVFP4");
  EXPECT_EQ(qc.source, "ckpt/hf_quant_config.json and ckpt/config.json");
}

TEST(QuantConfigModelOpt, ConfigJsonWithoutQuantizationIsNone) {
  json cfg = {{"model_type", "qwen3_moe"}};
  QuantConfig qc = parse(nullptr, &cfg);
  EXPECT_EQ(qc.producer, QuantProducer::None);
  EXPECT_EQ(qc.decl_for("model.layers.0.mlp.experts.0.up_proj").weight, WeightFormat::Unquantized);
  EXPECT_EQ(parse(nullptr, nullptr).producer, QuantProducer::None);
  cfg["quantization_config"] = nullptr;
  EXPECT_EQ(parse(nullptr, &cfg).producer, QuantProducer::None);
}

TEST(QuantConfigModelOpt, LoadPlainModelDirIsNone) {
  EXPECT_EQ(load_quant_config(kConfigs / "qwen3-30b-a3b").producer, QuantProducer::None);
  TempDir empty;
  EXPECT_EQ(load_quant_config(empty.path()).producer, QuantProducer::None);
}

// ---------------------------------------------------------------------------------------------
// compressed-tensors

TEST(QuantConfigCompressedTensors, Nvfp4FixtureW4A4) {
  QuantConfig qc = load_quant_config(kConfigs / "qwen3-30b-a3b-nvfp4-ct");
  EXPECT_EQ(qc.producer, QuantProducer::CompressedTensors);
  EXPECT_EQ(qc.producer_version, "0.12.2");
  EXPECT_EQ(qc.quant_algo, "nvfp4-pack-quantized");
  EXPECT_EQ(qc.default_decl.weight, WeightFormat::NVFP4);
  EXPECT_TRUE(qc.default_decl.activations_quantized);
  EXPECT_EQ(qc.default_decl.group_size, 16);
  EXPECT_TRUE(qc.is_ignored("lm_head"));
  EXPECT_TRUE(qc.is_ignored("model.layers.9.mlp.gate"));
  EXPECT_FALSE(qc.is_ignored("model.layers.9.mlp.experts.0.gate_proj"));
  EXPECT_EQ(qc.decl_for("model.layers.9.self_attn.o_proj").weight, WeightFormat::NVFP4);
}

TEST(QuantConfigCompressedTensors, Nvfp4A16WithoutInputActivations) {
  json cfg = ct_nvfp4(false);
  QuantConfig qc = parse(nullptr, &cfg);
  EXPECT_EQ(qc.default_decl.weight, WeightFormat::NVFP4);
  EXPECT_FALSE(qc.default_decl.activations_quantized);
}

TEST(QuantConfigCompressedTensors, Fp8Fixture) {
  QuantConfig qc = load_quant_config(kConfigs / "qwen3-8b-fp8-ct");
  EXPECT_EQ(qc.quant_algo, "float-quantized");
  EXPECT_EQ(qc.default_decl.weight, WeightFormat::FP8);
  EXPECT_TRUE(qc.default_decl.activations_quantized);
  EXPECT_TRUE(qc.is_ignored("lm_head"));
  EXPECT_EQ(qc.decl_for("model.layers.0.mlp.down_proj").weight, WeightFormat::FP8);
}

TEST(QuantConfigCompressedTensors, TargetsByNameOrRegex) {
  json cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"]["group_0"]["targets"] = {"re:.*mlp.experts.*"};
  QuantConfig qc = parse(nullptr, &cfg);
  EXPECT_EQ(qc.default_decl.weight, WeightFormat::Unquantized);
  ASSERT_EQ(qc.pattern_decls.size(), 1u);
  EXPECT_EQ(qc.decl_for("model.layers.0.mlp.experts.3.down_proj").weight, WeightFormat::NVFP4);
  EXPECT_EQ(qc.decl_for("model.layers.0.self_attn.q_proj").weight, WeightFormat::Unquantized);
}

TEST(QuantConfigCompressedTensors, DenseGroupAndKvScheme) {
  json cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"]["group_1"] = {{"format", "dense"}, {"targets", {"re:.*self_attn.*"}}};
  cfg["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}};
  QuantConfig qc = parse(nullptr, &cfg);
  EXPECT_EQ(qc.kv_cache_quant_algo, "FP8");
  EXPECT_TRUE(qc.pattern_decls.empty());
}

TEST(QuantConfigCompressedTensors, FormatFromGlobalWhenGroupHasNone) {
  json cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"]["group_0"].erase("format");
  EXPECT_EQ(parse(nullptr, &cfg).default_decl.weight, WeightFormat::NVFP4);
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(QuantConfigErrors, UnsupportedQuantAlgoListsSupported) {
  json hf = modelopt_hf("NVFP4_AWQ");
  expect_parse_error(
      &hf, nullptr,
      {"ckpt/hf_quant_config.json", "quantization.quant_algo", "NVFP4_AWQ", "W4A16_NVFP4", "MIXED_PRECISION"});
  json cfg = modelopt_flat("INT4_AWQ");
  expect_parse_error(nullptr, &cfg, {"ckpt/config.json", "quantization_config.quant_algo", "INT4_AWQ"});
}

TEST(QuantConfigErrors, MissingQuantAlgo) {
  json hf = modelopt_hf("NVFP4");
  hf["quantization"]["quant_algo"] = nullptr;
  expect_parse_error(&hf, nullptr, {"ckpt/hf_quant_config.json", "quantization.quant_algo", "missing"});
}

TEST(QuantConfigErrors, UnsupportedQuantMethod) {
  json cfg = with_quant({{"quant_method", "gptq"}, {"bits", 4}});
  expect_parse_error(
      nullptr, &cfg,
      {"ckpt/config.json", "quantization_config.quant_method", "gptq", "modelopt", "compressed-tensors"});
  cfg = with_quant({{"bits", 4}});
  expect_parse_error(nullptr, &cfg, {"quantization_config.quant_method", "missing"});
}

TEST(QuantConfigErrors, BadGroupSize) {
  json hf = modelopt_hf("NVFP4");
  hf["quantization"]["group_size"] = 32;
  expect_parse_error(&hf, nullptr, {"ckpt/hf_quant_config.json", "quantization.group_size", "32"});
  hf["quantization"]["group_size"] = "sixteen";
  expect_parse_error(&hf, nullptr, {"quantization.group_size", "integer"});
}

TEST(QuantConfigErrors, MixedPrecisionWithoutLayers) {
  json hf = modelopt_hf("MIXED_PRECISION");
  expect_parse_error(&hf, nullptr, {"ckpt/hf_quant_config.json", "quantization.quantized_layers", "MIXED_PRECISION"});
}

TEST(QuantConfigErrors, MixedPrecisionBadEntry) {
  json hf = modelopt_hf("MIXED_PRECISION");
  hf["quantization"]["quantized_layers"] = {{"model.layers.0.mlp.down_proj", {{"quant_algo", "INT8"}}}};
  expect_parse_error(&hf, nullptr, {"quantization.quantized_layers.model.layers.0.mlp.down_proj.quant_algo", "INT8"});
  hf["quantization"]["quantized_layers"] = {{"model.layers.0.mlp.down_proj", "FP8"}};
  expect_parse_error(&hf, nullptr, {"model.layers.0.mlp.down_proj", "object"});
  hf["quantization"]["quantized_layers"] = {{"model.layers.0.mlp.down_proj", {{"group_size", 16}}}};
  expect_parse_error(&hf, nullptr, {"down_proj.quant_algo", "missing"});
}

TEST(QuantConfigErrors, HfQuantConfigShape) {
  json hf = {{"producer", {{"name", "modelopt"}}}};
  expect_parse_error(&hf, nullptr, {"ckpt/hf_quant_config.json", "'quantization'", "missing"});
  hf = modelopt_hf("NVFP4");
  hf["producer"]["name"] = "someone-else";
  expect_parse_error(&hf, nullptr, {"producer.name", "someone-else"});
  hf = json::array();
  expect_parse_error(&hf, nullptr, {"ckpt/hf_quant_config.json", "object"});
}

TEST(QuantConfigErrors, WrongTypes) {
  json hf = modelopt_hf("NVFP4");
  hf["quantization"]["exclude_modules"] = "lm_head";
  expect_parse_error(&hf, nullptr, {"quantization.exclude_modules", "list"});
  hf["quantization"]["exclude_modules"] = {"lm_head", 3};
  expect_parse_error(&hf, nullptr, {"quantization.exclude_modules[1]", "string"});
  hf = modelopt_hf("NVFP4");
  hf["quantization"]["quant_algo"] = 4;
  expect_parse_error(&hf, nullptr, {"quantization.quant_algo", "string"});
  json cfg = with_quant("modelopt");
  expect_parse_error(nullptr, &cfg, {"ckpt/config.json", "'quantization_config'", "object"});
}

TEST(QuantConfigErrors, InvalidRegexInIgnore) {
  json cfg = ct_nvfp4(true, {"lm_head", "re:model.layers.(["});
  expect_parse_error(nullptr, &cfg, {"ckpt/config.json", "quantization_config.ignore[1]", "re:model.layers.(["});
}

TEST(QuantConfigErrors, BothFilesDisagreeOnAlgo) {
  json hf = modelopt_hf("NVFP4");
  json cfg = modelopt_flat("W4A16_NVFP4");
  expect_parse_error(&hf, &cfg,
                     {"ckpt/hf_quant_config.json", "ckpt/config.json", "NVFP4", "W4A16_NVFP4", "contradict"});
}

TEST(QuantConfigErrors, BothFilesDisagreeOnExcludes) {
  json hf = modelopt_hf("NVFP4", {"lm_head", "model.layers.*.mlp.gate"});
  json cfg = modelopt_flat("NVFP4", {"lm_head"});
  expect_parse_error(&hf, &cfg,
                     {"ckpt/hf_quant_config.json", "ckpt/config.json", "model.layers.*.mlp.gate", "contradict"});
  hf = modelopt_hf("NVFP4", {"lm_head"});
  cfg = modelopt_flat("NVFP4", {"lm_head", "*.self_attn*"});
  expect_parse_error(&hf, &cfg, {"ckpt/hf_quant_config.json", "ckpt/config.json", "*.self_attn*", "contradict"});
}

TEST(QuantConfigErrors, BothFilesDisagreeOnMixedLayers) {
  json hf = modelopt_hf("MIXED_PRECISION");
  hf["quantization"]["quantized_layers"] = {{"model.layers.0.mlp.down_proj", {{"quant_algo", "FP8"}}}};
  json cfg = modelopt_flat("MIXED_PRECISION");
  cfg["quantization_config"]["quantized_layers"] = {{"model.layers.0.mlp.down_proj", {{"quant_algo", "NVFP4"}}}};
  expect_parse_error(&hf, &cfg, {"ckpt/hf_quant_config.json", "ckpt/config.json", "model.layers.0.mlp.down_proj"});
}

TEST(QuantConfigErrors, BothFilesDifferentProducers) {
  json hf = modelopt_hf("NVFP4");
  json cfg = ct_nvfp4(true);
  expect_parse_error(&hf, &cfg, {"ckpt/hf_quant_config.json", "ckpt/config.json", "compressed-tensors"});
}

TEST(QuantConfigErrors, CompressedTensorsUnsupportedFormat) {
  json cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"]["group_0"]["format"] = "pack-quantized";
  expect_parse_error(nullptr, &cfg,
                     {"ckpt/config.json", "quantization_config.config_groups.group_0.format", "pack-quantized",
                      "nvfp4-pack-quantized", "float-quantized"});
}

TEST(QuantConfigErrors, CompressedTensorsFp8PerChannel) {
  json cfg = read_json_file(kConfigs / "qwen3-8b-fp8-ct" / "config.json");
  cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "channel";
  expect_parse_error(nullptr, &cfg,
                     {"ckpt/config.json", "quantization_config.config_groups.group_0.weights.strategy", "channel"});
}

TEST(QuantConfigErrors, CompressedTensorsBadGroups) {
  json cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"] = json::object();
  expect_parse_error(nullptr, &cfg, {"quantization_config.config_groups", "non-empty"});
  cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"]["group_1"] = cfg["quantization_config"]["config_groups"]["group_0"];
  expect_parse_error(nullptr, &cfg, {"quantization_config.config_groups.group_1.targets", "Linear"});
  cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 8;
  expect_parse_error(nullptr, &cfg, {"config_groups.group_0.weights.num_bits", "4"});
  cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 32;
  expect_parse_error(nullptr, &cfg, {"config_groups.group_0.weights.group_size", "32"});
  cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"]["group_0"]["targets"] = json::array();
  expect_parse_error(nullptr, &cfg, {"config_groups.group_0.targets", "non-empty"});
  cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"]["group_0"].erase("format");
  cfg["quantization_config"]["format"] = "mixed-precision";
  expect_parse_error(nullptr, &cfg, {"config_groups.group_0.format", "missing"});
  cfg = ct_nvfp4(true);
  cfg["quantization_config"]["config_groups"]["group_0"].erase("weights");
  expect_parse_error(nullptr, &cfg, {"config_groups.group_0.weights", "required"});
}

TEST(QuantConfigErrors, LoadInvalidJsonNamesFile) {
  TempDir dir;
  dir.write("hf_quant_config.json", "{\"quantization\": ");
  expect_error([&] { (void)load_quant_config(dir.path()); },
               {(dir.path() / "hf_quant_config.json").string(), "invalid JSON"});
  dir.write("hf_quant_config.json", modelopt_hf("NVFP4").dump());
  dir.write("config.json", "[1,");
  expect_error([&] { (void)load_quant_config(dir.path()); }, {(dir.path() / "config.json").string(), "invalid JSON"});
  dir.write("config.json", modelopt_flat("FP8").dump());
  expect_error([&] { (void)load_quant_config(dir.path()); },
               {(dir.path() / "hf_quant_config.json").string(), (dir.path() / "config.json").string(), "FP8"});
}

}  // namespace
}  // namespace fp4serve
