// resolve_quantization: the config checked against tiny checkpoints written with SafetensorsWriter.
#include "common/expect_error.h"
#include "common/temp_dir.h"
#include "formats/quant_scheme.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/safetensors_writer.h"
#include "util/error.h"

namespace fp4serve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kConfigs = fs::path(FP4SERVE_TEST_DATA) / "configs";

using fp4serve::testing::TempDir;

struct Tensor {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;  // empty: zeros
};

std::vector<std::uint8_t> f32(float v) {
  auto u = std::bit_cast<std::uint32_t>(v);
  return {static_cast<std::uint8_t>(u), static_cast<std::uint8_t>(u >> 8), static_cast<std::uint8_t>(u >> 16),
          static_cast<std::uint8_t>(u >> 24)};
}
// Exact for values whose low 16 mantissa bits are zero (the test values are).
std::vector<std::uint8_t> bf16(float v) {
  auto u = std::bit_cast<std::uint32_t>(v);
  return {static_cast<std::uint8_t>(u >> 16), static_cast<std::uint8_t>(u >> 24)};
}

// A checkpoint of the given tensors, built tensor by tensor.
class Builder {
 public:
  Builder& add(Tensor t) {
    tensors_.push_back(std::move(t));
    return *this;
  }
  Builder& dense(const std::string& module, std::int64_t out, std::int64_t in, DType dtype = DType::BF16) {
    return add({module + ".weight", dtype, {out, in}, {}});
  }
  Builder& norm(const std::string& module, std::int64_t n) { return add({module + ".weight", DType::BF16, {n}, {}}); }
  // ModelOpt NVFP4: weight U8 [out, in/2], weight_scale F8 [out, in/16], weight_scale_2 [], input_scale [].
  Builder& nvfp4(const std::string& module, std::int64_t out, std::int64_t in, float ws2,
                 std::optional<float> input_scale = std::nullopt, bool ws2_bf16 = false) {
    add({module + ".weight", DType::U8, {out, in / 2}, {}});
    add({module + ".weight_scale", DType::F8_E4M3, {out, in / 16}, {}});
    if (ws2_bf16) {
      add({module + ".weight_scale_2", DType::BF16, {}, bf16(ws2)});
    } else {
      add({module + ".weight_scale_2", DType::F32, {}, f32(ws2)});
    }
    if (input_scale) add({module + ".input_scale", DType::F32, {}, f32(*input_scale)});
    return *this;
  }
  // compressed-tensors NVFP4: weight_packed, weight_scale, weight_global_scale [1], input_global_scale [1].
  Builder& ct_nvfp4(const std::string& module, std::int64_t out, std::int64_t in, float wgs,
                    std::optional<float> igs = std::nullopt) {
    add({module + ".weight_packed", DType::U8, {out, in / 2}, {}});
    add({module + ".weight_scale", DType::F8_E4M3, {out, in / 16}, {}});
    add({module + ".weight_global_scale", DType::F32, {1}, f32(wgs)});
    if (igs) add({module + ".input_global_scale", DType::F32, {1}, f32(*igs)});
    return *this;
  }
  // FP8: weight F8 [out, in], weight_scale scalar, optional input_scale.
  Builder& fp8(const std::string& module, std::int64_t out, std::int64_t in, float ws,
               std::optional<float> input_scale = std::nullopt, std::vector<std::int64_t> scale_shape = {}) {
    add({module + ".weight", DType::F8_E4M3, {out, in}, {}});
    add({module + ".weight_scale", DType::F32, scale_shape, f32(ws)});
    if (input_scale) add({module + ".input_scale", DType::F32, {}, f32(*input_scale)});
    return *this;
  }
  // Drops a tensor (to build "missing" cases).
  Builder& drop(const std::string& name) {
    std::erase_if(tensors_, [&](const Tensor& t) { return t.name == name; });
    return *this;
  }
  // Replaces a tensor's dtype/shape (bytes re-sized to zeros unless given).
  Builder& replace(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
                   std::vector<std::uint8_t> bytes = {}) {
    for (Tensor& t : tensors_) {
      if (t.name == name) {
        t.dtype = dtype;
        t.shape = std::move(shape);
        t.bytes = std::move(bytes);
      }
    }
    return *this;
  }

  Checkpoint write(const fs::path& dir) const {
    std::vector<TensorDecl> decls;
    for (const Tensor& t : tensors_) decls.push_back({t.name, t.dtype, t.shape});
    SafetensorsWriter w(dir / "model.safetensors", decls);
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      std::uint64_t n = tensor_nbytes(decls[i]);
      std::vector<std::uint8_t> bytes = tensors_[i].bytes;
      bytes.resize(n, 0);
      w.write(bytes);
    }
    w.finish();
    return Checkpoint::open(dir);
  }

 private:
  std::vector<Tensor> tensors_;
};

QuantConfig modelopt(const std::string& algo, json exclude = json::array({"lm_head", "model.layers.*.mlp.gate"})) {
  json hf = {
      {"producer", {{"name", "modelopt"}, {"version", "0.31.0"}}},
      {"quantization",
       {{"quant_algo", algo}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16}, {"exclude_modules", exclude}}}};
  return parse_quant_config(&hf, nullptr, "ckpt");
}

QuantConfig mixed(json layers, json exclude = json::array({"lm_head"})) {
  json hf = {{"producer", {{"name", "modelopt"}}},
             {"quantization",
              {{"quant_algo", "MIXED_PRECISION"}, {"exclude_modules", exclude}, {"quantized_layers", layers}}}};
  return parse_quant_config(&hf, nullptr, "ckpt");
}

QuantConfig ct(bool w4a4, json ignore = json::array({"lm_head", "re:.*mlp.gate$"})) {
  json group = {{"format", "nvfp4-pack-quantized"},
                {"targets", {"Linear"}},
                {"weights", {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}}}};
  if (w4a4) group["input_activations"] = {{"num_bits", 4}, {"type", "float"}, {"dynamic", "local"}};
  json cfg = {{"quantization_config",
               {{"quant_method", "compressed-tensors"}, {"config_groups", {{"group_0", group}}}, {"ignore", ignore}}}};
  return parse_quant_config(nullptr, &cfg, "ckpt");
}

QuantConfig ct_fp8() {
  json group = {{"format", "float-quantized"},
                {"targets", {"Linear"}},
                {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}},
                {"input_activations", {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}}};
  json cfg = {
      {"quantization_config",
       {{"quant_method", "compressed-tensors"}, {"config_groups", {{"group_0", group}}}, {"ignore", {"lm_head"}}}}};
  return parse_quant_config(nullptr, &cfg, "ckpt");
}

void expect_resolve_error(const Builder& b, const QuantConfig& qc, std::initializer_list<std::string> parts) {
  TempDir dir;
  Checkpoint ck = b.write(dir.path());
  fp4serve::testing::expect_error([&] { (void)resolve_quantization(ck, qc); }, parts);
}

bool has_warning(const ResolvedQuantization& r, const std::string& part) {
  for (const std::string& w : r.warnings) {
    if (w.find(part) != std::string::npos) return true;
  }
  return false;
}

std::string all_warnings(const ResolvedQuantization& r) {
  std::string s;
  for (const std::string& w : r.warnings) s += w + "\n";
  return s;
}

const std::string E0 = "model.layers.0.mlp.experts.0";
const std::string E1 = "model.layers.0.mlp.experts.1";
const std::string ATTN = "model.layers.0.self_attn";

// A Qwen3-MoE-shaped layer: BF16 attention/router/embeddings, NVFP4 experts.
Builder qwen3_moe_layer(std::optional<float> input_scale = 0.25f) {
  Builder b;
  b.dense("model.embed_tokens", 64, 32)
      .norm("model.layers.0.input_layernorm", 32)
      .dense(ATTN + ".q_proj", 64, 32)
      .dense(ATTN + ".k_proj", 16, 32)
      .dense(ATTN + ".v_proj", 16, 32)
      .dense(ATTN + ".o_proj", 32, 64)
      .norm(ATTN + ".q_norm", 16)
      .dense("model.layers.0.mlp.gate", 4, 32)
      .nvfp4(E0 + ".gate_proj", 16, 32, 0.5f, input_scale)
      .nvfp4(E0 + ".up_proj", 16, 32, 0.5f, input_scale)
      .nvfp4(E0 + ".down_proj", 32, 16, 0.125f, input_scale)
      .norm("model.norm", 32)
      .dense("lm_head", 64, 32);
  return b;
}

// ---------------------------------------------------------------------------------------------

TEST(QuantSchemeResolve, ModelOptNvfp4W4A4) {
  TempDir dir;
  Checkpoint ck = qwen3_moe_layer().write(dir.path());
  QuantConfig qc = modelopt("NVFP4", {"lm_head", "model.layers.*.mlp.gate", "model.layers.*.self_attn*"});
  ResolvedQuantization r = resolve_quantization(ck, qc);
  EXPECT_EQ(r.config.quant_algo, "NVFP4");
  // Every 2-D weight: embed, 4 attention, router, 3 experts, lm_head.
  ASSERT_EQ(r.modules.size(), 10u);
  for (std::size_t i = 1; i < r.modules.size(); ++i) EXPECT_LT(r.modules[i - 1].name, r.modules[i].name);

  const LinearModule* up = r.find(E0 + ".up_proj");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->scheme.kind, SchemeKind::NVFP4);
  EXPECT_EQ(scheme_kind_name(up->scheme.kind), "nvfp4");
  EXPECT_EQ(up->scheme.storage, DType::U8);
  EXPECT_EQ(up->out_features, 16);
  EXPECT_EQ(up->in_features, 32);
  EXPECT_FLOAT_EQ(up->scheme.weight_scale_2, 0.5f);
  EXPECT_FLOAT_EQ(up->scheme.input_scale, 0.25f);
  EXPECT_TRUE(up->scheme.activations_quantized);
  EXPECT_FALSE(up->scheme.scale_stored_bf16);
  EXPECT_EQ(up->scheme.weight, E0 + ".up_proj.weight");
  EXPECT_EQ(up->scheme.block_scale, E0 + ".up_proj.weight_scale");
  EXPECT_EQ(up->fused_experts, 0);
  const LinearModule* down = r.find(E0 + ".down_proj");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->out_features, 32);
  EXPECT_EQ(down->in_features, 16);
  EXPECT_FLOAT_EQ(down->scheme.weight_scale_2, 0.125f);

  const LinearModule* q = r.find(ATTN + ".q_proj");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->scheme.kind, SchemeKind::Dense);
  EXPECT_EQ(q->scheme.storage, DType::BF16);
  EXPECT_EQ(q->scheme.weight, ATTN + ".q_proj.weight");
  EXPECT_TRUE(q->scheme.block_scale.empty());
  EXPECT_EQ(r.find("model.embed_tokens")->scheme.kind, SchemeKind::Dense);
  EXPECT_EQ(r.find("lm_head")->scheme.kind, SchemeKind::Dense);
  EXPECT_EQ(r.find("model.norm"), nullptr);  // 1-D
  EXPECT_EQ(r.find("nope"), nullptr);

  EXPECT_TRUE(has_warning(r, "W4A4")) << all_warnings(r);
  EXPECT_TRUE(has_warning(r, "4 self-attention")) << all_warnings(r);
  EXPECT_FALSE(has_warning(r, "differing weight_scale_2")) << all_warnings(r);
}

TEST(QuantSchemeResolve, ModelOptW4A16NoInputScale) {
  TempDir dir;
  Checkpoint ck = qwen3_moe_layer(std::nullopt).write(dir.path());
  ResolvedQuantization r =
      resolve_quantization(ck, modelopt("W4A16_NVFP4", {"lm_head", "*.mlp.gate", "model.layers.0.self_attn*"}));
  const LinearModule* up = r.find(E0 + ".up_proj");
  ASSERT_NE(up, nullptr);
  EXPECT_FALSE(up->scheme.activations_quantized);
  EXPECT_EQ(up->scheme.input_scale, 0.0f);
  EXPECT_TRUE(has_warning(r, "W4A16 checkpoint")) << all_warnings(r);
}

TEST(QuantSchemeResolve, DeclaredW4A4ButNoInputScales) {
  TempDir dir;
  Checkpoint ck = qwen3_moe_layer(std::nullopt).write(dir.path());
  ResolvedQuantization r =
      resolve_quantization(ck, modelopt("NVFP4", {"lm_head", "*.mlp.gate", "model.layers.0.self_attn*"}));
  EXPECT_TRUE(has_warning(r, "can only run W4A16")) << all_warnings(r);
  EXPECT_TRUE(has_warning(r, "ckpt/hf_quant_config.json")) << all_warnings(r);
}

TEST(QuantSchemeResolve, DeclaredW4A16ButInputScalesPresent) {
  TempDir dir;
  Checkpoint ck = qwen3_moe_layer(0.25f).write(dir.path());
  ResolvedQuantization r =
      resolve_quantization(ck, modelopt("W4A16_NVFP4", {"lm_head", "*.mlp.gate", "model.layers.0.self_attn*"}));
  EXPECT_TRUE(has_warning(r, "weight-only NVFP4 (W4A16)")) << all_warnings(r);
  EXPECT_TRUE(r.find(E0 + ".up_proj")->scheme.activations_quantized);
}

TEST(QuantSchemeResolve, CompressedTensorsGlobalScalesInverted) {
  TempDir dir;
  Builder b;
  b.dense("model.embed_tokens", 64, 32)
      .dense("model.layers.0.mlp.gate", 4, 32)
      .ct_nvfp4(E0 + ".gate_proj", 16, 32, 2.0f, 4.0f)
      .ct_nvfp4(ATTN + ".q_proj", 16, 32, 8.0f, 4.0f)
      .dense("lm_head", 64, 32);
  Checkpoint ck = b.write(dir.path());
  ResolvedQuantization r = resolve_quantization(ck, ct(true));
  const LinearModule* g = r.find(E0 + ".gate_proj");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->scheme.kind, SchemeKind::NVFP4);
  EXPECT_FLOAT_EQ(g->scheme.weight_scale_2, 0.5f);  // 1 / weight_global_scale
  EXPECT_FLOAT_EQ(g->scheme.input_scale, 0.25f);    // 1 / input_global_scale
  EXPECT_TRUE(g->scheme.activations_quantized);
  EXPECT_EQ(g->scheme.weight, E0 + ".gate_proj.weight_packed");
  EXPECT_EQ(g->in_features, 32);
  EXPECT_FLOAT_EQ(r.find(ATTN + ".q_proj")->scheme.weight_scale_2, 0.125f);
  EXPECT_EQ(r.find("model.layers.0.mlp.gate")->scheme.kind, SchemeKind::Dense);
}

TEST(QuantSchemeResolve, CompressedTensorsW4A16) {
  TempDir dir;
  Builder b;
  b.ct_nvfp4(E0 + ".gate_proj", 16, 32, 2.0f).dense("lm_head", 64, 32);
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), ct(false));
  EXPECT_FALSE(r.find(E0 + ".gate_proj")->scheme.activations_quantized);
  EXPECT_TRUE(has_warning(r, "W4A16 checkpoint")) << all_warnings(r);
}

TEST(QuantSchemeResolve, Bf16WeightScale2LoadsWithWarning) {
  TempDir dir;
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.0078125f, std::nullopt, /*ws2_bf16=*/true);
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), modelopt("W4A16_NVFP4"));
  const LinearModule* g = r.find(E0 + ".gate_proj");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->scheme.scale_stored_bf16);
  EXPECT_FLOAT_EQ(g->scheme.weight_scale_2, 0.0078125f);
  EXPECT_TRUE(has_warning(r, "BF16")) << all_warnings(r);
  EXPECT_TRUE(has_warning(r, E0 + ".gate_proj")) << all_warnings(r);
}

TEST(QuantSchemeResolve, ScalarShapeOneAccepted) {
  TempDir dir;
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f, 0.25f).replace(E0 + ".gate_proj.weight_scale_2", DType::F32, {1}, f32(0.5f));
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), modelopt("NVFP4"));
  EXPECT_FLOAT_EQ(r.find(E0 + ".gate_proj")->scheme.weight_scale_2, 0.5f);
}

TEST(QuantSchemeResolve, MixedPrecisionFp8AndNvfp4) {
  TempDir dir;
  Builder b;
  b.fp8(ATTN + ".q_proj", 64, 32, 0.03125f, 0.0625f)
      .fp8(ATTN + ".o_proj", 32, 64, 0.5f, std::nullopt, {1})
      .nvfp4(E0 + ".gate_proj", 16, 32, 0.5f)
      .dense("model.layers.0.mlp.gate", 4, 32)
      .dense("lm_head", 64, 32);
  QuantConfig qc = mixed({{ATTN + ".q_proj", {{"quant_algo", "FP8"}}},
                          {ATTN + ".o_proj", {{"quant_algo", "FP8"}}},
                          {"model.layers.0.mlp.experts", {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}}}});
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), qc);
  const LinearModule* q = r.find(ATTN + ".q_proj");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->scheme.kind, SchemeKind::FP8);
  EXPECT_EQ(scheme_kind_name(q->scheme.kind), "fp8");
  EXPECT_EQ(q->scheme.storage, DType::F8_E4M3);
  EXPECT_FLOAT_EQ(q->scheme.weight_scale_2, 0.03125f);
  EXPECT_FLOAT_EQ(q->scheme.input_scale, 0.0625f);
  EXPECT_TRUE(q->scheme.activations_quantized);
  EXPECT_EQ(q->out_features, 64);
  EXPECT_EQ(q->in_features, 32);
  EXPECT_FALSE(r.find(ATTN + ".o_proj")->scheme.activations_quantized);
  EXPECT_EQ(r.find(E0 + ".gate_proj")->scheme.kind, SchemeKind::NVFP4);
  EXPECT_EQ(r.find("model.layers.0.mlp.gate")->scheme.kind, SchemeKind::Dense);
}

TEST(QuantSchemeResolve, CompressedTensorsFp8) {
  TempDir dir;
  Builder b;
  b.fp8("model.layers.0.mlp.down_proj", 32, 64, 0.25f, 0.5f, {1})
      .replace("model.layers.0.mlp.down_proj.input_scale", DType::F32, {1}, f32(0.5f))
      .dense("lm_head", 64, 32);
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), ct_fp8());
  const LinearModule* d = r.find("model.layers.0.mlp.down_proj");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->scheme.kind, SchemeKind::FP8);
  EXPECT_FLOAT_EQ(d->scheme.weight_scale_2, 0.25f);
  EXPECT_FLOAT_EQ(d->scheme.input_scale, 0.5f);
}

TEST(QuantSchemeResolve, UnquantizedCheckpointWithoutConfig) {
  TempDir dir;
  Builder b;
  b.dense("model.embed_tokens", 64, 32)
      .dense(ATTN + ".q_proj", 64, 32, DType::F16)
      .dense("lm_head", 64, 32, DType::F32);
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), QuantConfig{});
  ASSERT_EQ(r.modules.size(), 3u);
  EXPECT_EQ(r.find(ATTN + ".q_proj")->scheme.storage, DType::F16);
  EXPECT_EQ(r.find("lm_head")->scheme.storage, DType::F32);
  EXPECT_TRUE(r.warnings.empty()) << all_warnings(r);
}

TEST(QuantSchemeResolve, ConventionallyUnquantizedModulesMayStayBf16) {
  // A blanket NVFP4 declaration with no exclude list: router, embeddings, lm_head, conv1d-adjacent
  // linear-attention a/b projections and the shared-expert gate stay BF16 without an error.
  TempDir dir;
  Builder b;
  b.dense("model.embed_tokens", 64, 32)
      .dense("model.layers.0.mlp.gate", 4, 32)
      .dense("model.layers.0.mlp.shared_expert_gate", 1, 32)
      .dense("model.layers.0.linear_attn.in_proj_ba", 8, 32)
      .add({"model.layers.0.linear_attn.conv1d.weight", DType::BF16, {16, 1, 4}, {}})
      .nvfp4(E0 + ".gate_proj", 16, 32, 0.5f)
      .dense("mtp.layers.0.mlp.experts.0.gate_proj", 16, 32)
      .dense("lm_head", 64, 32);
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), modelopt("W4A16_NVFP4", json::array()));
  EXPECT_EQ(r.find("model.layers.0.mlp.gate")->scheme.kind, SchemeKind::Dense);
  EXPECT_EQ(r.find("model.layers.0.linear_attn.conv1d"), nullptr);  // 3-D, not a linear
  EXPECT_TRUE(has_warning(r, "quantizers never touch")) << all_warnings(r);
}

TEST(QuantSchemeResolve, FusedBf16ExpertsRecordedAsOneModule) {
  TempDir dir;
  const std::string X = "model.language_model.layers.0.mlp.experts";
  Builder b;
  b.add({X + ".gate_up_proj", DType::BF16, {4, 16, 32}, {}})
      .add({X + ".down_proj", DType::BF16, {4, 32, 8}, {}})
      .dense("model.language_model.layers.0.mlp.gate", 4, 32);
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), QuantConfig{});
  const LinearModule* gu = r.find(X + ".gate_up_proj");
  ASSERT_NE(gu, nullptr);
  EXPECT_EQ(gu->fused_experts, 4);
  EXPECT_EQ(gu->out_features, 16);
  EXPECT_EQ(gu->in_features, 32);
  EXPECT_EQ(gu->scheme.kind, SchemeKind::Dense);
  EXPECT_EQ(gu->scheme.weight, X + ".gate_up_proj");
  const LinearModule* dn = r.find(X + ".down_proj");
  ASSERT_NE(dn, nullptr);
  EXPECT_EQ(dn->fused_experts, 4);
  EXPECT_EQ(dn->out_features, 32);
  EXPECT_EQ(dn->in_features, 8);
  EXPECT_TRUE(has_warning(r, "fused 3-D expert")) << all_warnings(r);
}

TEST(QuantSchemeResolve, FusedExpertsWithWeightSuffix) {
  TempDir dir;
  const std::string X = "model.layers.0.mlp.experts";
  Builder b;
  b.add({X + ".gate_up_proj.weight", DType::BF16, {4, 16, 32}, {}});
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), QuantConfig{});
  const LinearModule* gu = r.find(X + ".gate_up_proj");
  ASSERT_NE(gu, nullptr);
  EXPECT_EQ(gu->fused_experts, 4);
  EXPECT_EQ(gu->scheme.weight, X + ".gate_up_proj.weight");
}

TEST(QuantSchemeResolve, DifferingSiblingGlobalScalesAreInformational) {
  TempDir dir;
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f)
      .nvfp4(E0 + ".up_proj", 16, 32, 0.25f)
      .nvfp4(E1 + ".gate_proj", 16, 32, 0.5f)
      .nvfp4(E1 + ".up_proj", 16, 32, 0.5f)
      .nvfp4(ATTN + ".q_proj", 16, 32, 1.0f)
      .nvfp4(ATTN + ".k_proj", 16, 32, 1.0f)
      .nvfp4(ATTN + ".v_proj", 16, 32, 2.0f);
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), modelopt("W4A16_NVFP4"));
  EXPECT_TRUE(has_warning(r, "2 q/k/v or gate/up group(s) have differing weight_scale_2")) << all_warnings(r);
  EXPECT_TRUE(has_warning(r, E0 + ": gate_proj=0.5 up_proj=0.25")) << all_warnings(r);
}

TEST(QuantSchemeResolve, KvCacheScalesAreAllowed) {
  TempDir dir;
  Builder b;
  b.nvfp4(ATTN + ".k_proj", 16, 32, 1.0f)
      .add({ATTN + ".k_proj.k_scale", DType::F32, {}, f32(1.0f)})
      .add({"model.layers.1.self_attn.k_scale", DType::F32, {}, f32(1.0f)});  // compressed-tensors style
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), modelopt("W4A16_NVFP4"));
  EXPECT_TRUE(has_warning(r, "KV-cache scales")) << all_warnings(r);
}

TEST(QuantSchemeResolve, Qwen3_5FixtureConfigAgainstPrefixedNames) {
  // The V1 ModelOpt config (model.language_model.* names, routed experts only).
  QuantConfig qc = load_quant_config(kConfigs / "qwen3.5-397b-a17b-nvfp4-modelopt");
  const std::string L = "model.language_model.layers.";
  TempDir dir;
  Builder b;
  b.dense("model.language_model.embed_tokens", 64, 32)
      .dense(L + "0.linear_attn.in_proj_qkv", 48, 32)
      .dense(L + "0.linear_attn.in_proj_z", 16, 32)
      .dense(L + "0.linear_attn.in_proj_b", 4, 32)
      .dense(L + "0.linear_attn.out_proj", 32, 16)
      .dense(L + "3.self_attn.q_proj", 64, 32)
      .dense(L + "0.mlp.gate", 8, 32)
      .dense(L + "0.mlp.shared_expert.gate_proj", 16, 32)
      .dense(L + "0.mlp.shared_expert_gate", 1, 32)
      .nvfp4(L + "0.mlp.experts.0.gate_proj", 16, 32, 0.5f, 0.25f)
      .nvfp4(L + "0.mlp.experts.0.up_proj", 16, 32, 0.5f, 0.25f)
      .nvfp4(L + "0.mlp.experts.0.down_proj", 32, 16, 0.5f, 0.25f)
      .dense("mtp.layers.0.mlp.experts.0.gate_proj", 16, 32)
      .dense("model.visual.blocks.0.attn.qkv", 48, 32)
      .dense("lm_head", 64, 32);
  ResolvedQuantization r = resolve_quantization(b.write(dir.path()), qc);
  EXPECT_EQ(r.find(L + "0.mlp.experts.0.down_proj")->scheme.kind, SchemeKind::NVFP4);
  EXPECT_EQ(r.find(L + "0.linear_attn.in_proj_qkv")->scheme.kind, SchemeKind::Dense);
  EXPECT_TRUE(has_warning(r, "1 self-attention, 3 linear-attention, 1 shared-expert")) << all_warnings(r);
  EXPECT_TRUE(has_warning(r, "W4A4 checkpoint: 3 of 3")) << all_warnings(r);
}

// ---------------------------------------------------------------------------------------------
// Contradictions and malformed tensors: the error names the tensor.

TEST(QuantSchemeErrors, ConfigSaysNvfp4ButWeightIsBf16) {
  Builder b = qwen3_moe_layer();
  expect_resolve_error(b, modelopt("NVFP4"),
                       {ATTN + ".k_proj.weight", "ckpt/hf_quant_config.json", "NVFP4", "BF16", "ignore"});
}

TEST(QuantSchemeErrors, ConfigSaysFp8ButWeightIsBf16) {
  Builder b;
  b.dense(ATTN + ".q_proj", 64, 32);
  expect_resolve_error(b, ct_fp8(), {ATTN + ".q_proj.weight", "ckpt/config.json", "FP8"});
}

TEST(QuantSchemeErrors, IgnoredModuleWithNvfp4Tensors) {
  Builder b;
  b.nvfp4(ATTN + ".q_proj", 16, 32, 0.5f);
  expect_resolve_error(b, modelopt("NVFP4", {"lm_head", "model.layers.*.self_attn*"}),
                       {ATTN + ".q_proj.weight", "excluded", "model.layers.*.self_attn*", "ckpt/hf_quant_config.json"});
}

TEST(QuantSchemeErrors, IgnoredModuleWithFp8Tensors) {
  Builder b;
  b.fp8("lm_head", 64, 32, 0.5f);
  expect_resolve_error(b, ct_fp8(), {"lm_head.weight", "excluded", "'lm_head'"});
}

TEST(QuantSchemeErrors, MixedPrecisionUndeclaredNvfp4) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f);
  expect_resolve_error(b, mixed({{ATTN + ".q_proj", {{"quant_algo", "FP8"}}}}),
                       {E0 + ".gate_proj.weight", "U8", "unquantized"});
}

TEST(QuantSchemeErrors, Nvfp4WeightButConfigSaysFp8) {
  Builder b;
  b.nvfp4(ATTN + ".q_proj", 16, 32, 0.5f);
  expect_resolve_error(b, mixed({{ATTN + ".q_proj", {{"quant_algo", "FP8"}}}}), {ATTN + ".q_proj.weight", "FP8"});
}

TEST(QuantSchemeErrors, Fp8WeightButConfigSaysNvfp4) {
  Builder b;
  b.fp8(ATTN + ".q_proj", 16, 32, 0.5f);
  expect_resolve_error(b, modelopt("NVFP4"), {ATTN + ".q_proj.weight", "F8_E4M3", "NVFP4"});
}

TEST(QuantSchemeErrors, U8WeightWithoutConfig) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f);
  expect_resolve_error(b, QuantConfig{}, {E0 + ".gate_proj.weight", "no quantization config"});
}

TEST(QuantSchemeErrors, Fp8WeightWithoutConfig) {
  Builder b;
  b.fp8(ATTN + ".q_proj", 16, 32, 0.5f);
  expect_resolve_error(b, QuantConfig{}, {ATTN + ".q_proj.weight", "no quantization config"});
}

TEST(QuantSchemeErrors, MissingWeightScale) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).drop(E0 + ".gate_proj.weight_scale");
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.weight_scale", "missing"});
}

TEST(QuantSchemeErrors, WeightScaleWrongShape) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).replace(E0 + ".gate_proj.weight_scale", DType::F8_E4M3, {16, 4});
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.weight_scale", "[16, 4]", "[16, 2]"});
}

TEST(QuantSchemeErrors, WeightScaleWrongDtype) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).replace(E0 + ".gate_proj.weight_scale", DType::BF16, {16, 2});
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.weight_scale", "F8_E4M3", "BF16"});
  Builder swizzled;
  swizzled.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).replace(E0 + ".gate_proj.weight_scale", DType::U8, {32});
  expect_resolve_error(swizzled, modelopt("NVFP4"), {E0 + ".gate_proj.weight_scale", "swizzled"});
}

TEST(QuantSchemeErrors, MissingWeightScale2) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).drop(E0 + ".gate_proj.weight_scale_2");
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.weight_scale_2", "missing"});
  Builder c;
  c.ct_nvfp4(E0 + ".gate_proj", 16, 32, 2.0f).drop(E0 + ".gate_proj.weight_global_scale");
  expect_resolve_error(c, ct(false), {E0 + ".gate_proj.weight_global_scale", "missing"});
}

TEST(QuantSchemeErrors, GlobalScaleNotScalar) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).replace(E0 + ".gate_proj.weight_scale_2", DType::F32, {2});
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.weight_scale_2", "scalar", "[2]"});
}

TEST(QuantSchemeErrors, GlobalScaleWrongDtype) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).replace(E0 + ".gate_proj.weight_scale_2", DType::F16, {});
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.weight_scale_2", "F32 or BF16", "F16"});
  Builder c;
  c.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f, 0.25f).replace(E0 + ".gate_proj.input_scale", DType::F64, {});
  expect_resolve_error(c, modelopt("NVFP4"), {E0 + ".gate_proj.input_scale", "F32 or BF16"});
}

TEST(QuantSchemeErrors, GlobalScaleNotPositive) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, -0.5f);
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.weight_scale_2", "positive"});
  Builder c;
  c.ct_nvfp4(E0 + ".gate_proj", 16, 32, 0.0f);
  expect_resolve_error(c, ct(false), {E0 + ".gate_proj.weight_global_scale", "positive"});
}

// `inspect` resolves headers only: scale values are neither read nor validated, only their
// shapes and dtypes, so a cold 17 GB checkpoint costs no seek per module.
TEST(QuantSchemeResolve, SkippingScaleValuesChecksOnlyHeaders) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, -0.5f);  // a value Read rejects
  TempDir dir;
  Checkpoint ck = b.write(dir.path());
  const ResolvedQuantization r = resolve_quantization(ck, modelopt("NVFP4"), ScaleValues::Skip);
  const LinearModule* m = r.find(E0 + ".gate_proj");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->scheme.kind, SchemeKind::NVFP4);
  EXPECT_EQ(m->scheme.weight_scale_2, 1.0f);
  Builder c;
  c.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).replace(E0 + ".gate_proj.weight_scale_2", DType::F16, {});
  TempDir dir2;
  Checkpoint ck2 = c.write(dir2.path());
  fp4serve::testing::expect_error([&] { (void)resolve_quantization(ck2, modelopt("NVFP4"), ScaleValues::Skip); },
                                  {E0 + ".gate_proj.weight_scale_2", "F32 or BF16"});
}

TEST(QuantSchemeErrors, ScaleTensorWithoutWeight) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).drop(E0 + ".gate_proj.weight");
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.weight_scale", "without a weight"});
  Builder c;
  c.add({E0 + ".up_proj.input_scale", DType::F32, {}, f32(1.0f)});
  expect_resolve_error(c, modelopt("NVFP4"), {E0 + ".up_proj.input_scale", "without a weight"});
}

TEST(QuantSchemeErrors, InputFeaturesNotMultipleOf16) {
  Builder b;
  b.add({E0 + ".gate_proj.weight", DType::U8, {16, 4}, {}})
      .add({E0 + ".gate_proj.weight_scale", DType::F8_E4M3, {16, 1}, {}})
      .add({E0 + ".gate_proj.weight_scale_2", DType::F32, {}, f32(1.0f)});
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.weight", "8 input features", "16"});
}

TEST(QuantSchemeErrors, ScalesOnBf16Weight) {
  Builder b;
  b.dense(ATTN + ".q_proj", 64, 32).add({ATTN + ".q_proj.weight_scale", DType::F8_E4M3, {64, 2}, {}});
  expect_resolve_error(b, modelopt("NVFP4", {"lm_head", "*self_attn*"}), {ATTN + ".q_proj.weight_scale", "BF16"});
}

TEST(QuantSchemeErrors, WeightAndWeightPackedBoth) {
  Builder b;
  b.ct_nvfp4(E0 + ".gate_proj", 16, 32, 2.0f).add({E0 + ".gate_proj.weight", DType::U8, {16, 16}, {}});
  expect_resolve_error(b, ct(false), {E0 + ".gate_proj.weight_packed", E0 + ".gate_proj.weight"});
}

TEST(QuantSchemeErrors, MixedModelOptAndCompressedTensorsNames) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).add({E0 + ".gate_proj.weight_global_scale", DType::F32, {1}, f32(2.0f)});
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.weight_global_scale", "compressed-tensors"});
  Builder c;
  c.ct_nvfp4(E0 + ".gate_proj", 16, 32, 2.0f).add({E0 + ".gate_proj.input_scale", DType::F32, {}, f32(2.0f)});
  expect_resolve_error(c, ct(true), {E0 + ".gate_proj.input_scale", "ModelOpt"});
}

TEST(QuantSchemeErrors, Fp8PerChannelOrBlockScale) {
  Builder b;
  b.fp8(ATTN + ".q_proj", 64, 32, 0.5f).replace(ATTN + ".q_proj.weight_scale", DType::F32, {64, 1});
  expect_resolve_error(b, ct_fp8(), {ATTN + ".q_proj.weight_scale", "per-channel"});
  Builder c;
  c.fp8(ATTN + ".q_proj", 256, 256, 0.5f).replace(ATTN + ".q_proj.weight_scale", DType::F32, {2, 2});
  expect_resolve_error(c, ct_fp8(), {ATTN + ".q_proj.weight_scale", "block-wise"});
  Builder d;
  d.fp8(ATTN + ".q_proj", 64, 32, 0.5f).drop(ATTN + ".q_proj.weight_scale");
  expect_resolve_error(d, ct_fp8(), {ATTN + ".q_proj.weight_scale", "missing"});
  Builder e;
  e.fp8(ATTN + ".q_proj", 64, 32, 0.5f).add({ATTN + ".q_proj.weight_scale_2", DType::F32, {}, f32(1.0f)});
  expect_resolve_error(e, ct_fp8(), {ATTN + ".q_proj.weight_scale_2", "FP8"});
}

TEST(QuantSchemeErrors, AwqPreQuantScale) {
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f).add({E0 + ".gate_proj.pre_quant_scale", DType::BF16, {32}, {}});
  expect_resolve_error(b, modelopt("NVFP4"), {E0 + ".gate_proj.pre_quant_scale", "AWQ"});
}

TEST(QuantSchemeErrors, QuantizedFusedExperts) {
  const std::string X = "model.language_model.layers.0.mlp.experts";
  Builder b;
  b.add({X + ".gate_up_proj", DType::U8, {4, 16, 16}, {}});
  expect_resolve_error(b, modelopt("NVFP4"), {X + ".gate_up_proj", "fused"});
  Builder c;
  c.add({X + ".gate_up_proj", DType::BF16, {4, 16, 32}, {}})
      .add({X + ".gate_up_proj_weight_scale", DType::F8_E4M3, {4, 16, 2}, {}});
  expect_resolve_error(c, modelopt("NVFP4"), {X + ".gate_up_proj_weight_scale", "fused"});
}

TEST(QuantSchemeErrors, FusedBf16ExpertsButConfigSaysNvfp4) {
  const std::string X = "model.layers.0.mlp.experts";
  Builder b;
  b.add({X + ".gate_up_proj", DType::BF16, {4, 16, 32}, {}});
  expect_resolve_error(b, modelopt("NVFP4"), {X + ".gate_up_proj", "NVFP4", "BF16"});
}

TEST(QuantSchemeErrors, UnsupportedWeightDtypes) {
  Builder b;
  b.add({E0 + ".gate_proj.weight_packed", DType::I32, {16, 4}, {}});
  expect_resolve_error(b, ct(false), {E0 + ".gate_proj.weight_packed", "I32"});
  Builder c;
  c.add({E0 + ".gate_proj.weight_packed", DType::BF16, {16, 32}, {}});
  expect_resolve_error(c, ct(false), {E0 + ".gate_proj.weight_packed", "U8"});
  Builder d;
  d.add({E0 + ".gate_proj.weight", DType::F8_E5M2, {16, 32}, {}});
  expect_resolve_error(d, modelopt("NVFP4"), {E0 + ".gate_proj.weight", "F8_E5M2"});
}

TEST(QuantSchemeErrors, ScalesOnNon2DWeight) {
  Builder b;
  b.add({"model.layers.0.linear_attn.conv1d.weight", DType::BF16, {16, 1, 4}, {}})
      .add({"model.layers.0.linear_attn.conv1d.weight_scale", DType::F32, {}, f32(1.0f)});
  expect_resolve_error(b, modelopt("NVFP4"), {"model.layers.0.linear_attn.conv1d.weight_scale", "2-D"});
}

TEST(QuantSchemeErrors, MessageNamesCheckpointDir) {
  TempDir dir;
  Builder b;
  b.nvfp4(E0 + ".gate_proj", 16, 32, 0.5f);
  Checkpoint ck = b.write(dir.path());
  try {
    (void)resolve_quantization(ck, QuantConfig{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path().string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4serve
