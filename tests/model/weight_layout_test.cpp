#include "model/weight_layout.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "common/expect_error.h"
#include "util/error.h"

namespace fp4serve {
namespace {

ModelConfig small_moe() {
  ModelConfig c;
  c.arch = Arch::Qwen3Moe;
  c.model_type = "qwen3_moe";
  c.weight_prefix = "model.";
  c.vocab_size = 100;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 16;
  c.decoder_sparse_step = 1;
  c.mlp_only_layers = {1};
  c.layer_types.assign(3, LayerType::FullAttention);
  return c;
}

const ParamSpec* find(const std::vector<ParamSpec>& layout, const std::string& module) {
  for (const auto& p : layout)
    if (p.module == module) return &p;
  return nullptr;
}

TEST(WeightLayout, Qwen3MoeNamesAndShapesFollowTransformers) {
  const auto layout = weight_layout(small_moe());
  std::set<std::string> names;
  for (const auto& p : layout) EXPECT_TRUE(names.insert(p.module).second) << "duplicate " << p.module;

  const ParamSpec* q = find(layout, "model.layers.0.self_attn.q_proj");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<std::int64_t>{64, 32}));  // heads * head_dim, hidden
  const ParamSpec* o = find(layout, "model.layers.0.self_attn.o_proj");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->shape, (std::vector<std::int64_t>{32, 64}));
  EXPECT_TRUE(o->residual_output);
  EXPECT_EQ(find(layout, "model.layers.0.self_attn.k_proj")->shape, (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(find(layout, "model.layers.0.self_attn.q_norm")->shape, (std::vector<std::int64_t>{16}));
  EXPECT_EQ(find(layout, "model.layers.0.mlp.gate")->shape, (std::vector<std::int64_t>{4, 32}));
  EXPECT_EQ(find(layout, "model.layers.2.mlp.experts.3.down_proj")->shape, (std::vector<std::int64_t>{32, 16}));
  // mlp_only_layers: layer 1 has a dense MLP of intermediate_size instead of experts.
  EXPECT_EQ(find(layout, "model.layers.1.mlp.experts.0.up_proj"), nullptr);
  EXPECT_EQ(find(layout, "model.layers.1.mlp.up_proj")->shape, (std::vector<std::int64_t>{64, 32}));
  EXPECT_NE(find(layout, "lm_head"), nullptr);
  EXPECT_EQ(layout.front().module, "model.embed_tokens");
}

TEST(WeightLayout, TiedEmbeddingsHaveNoLmHead) {
  ModelConfig c = small_moe();
  c.tie_word_embeddings = true;
  EXPECT_EQ(find(weight_layout(c), "lm_head"), nullptr);
}

TEST(WeightLayout, ParameterCountMatchesQwen3_30B_A3B) {
  ModelConfig c = small_moe();
  c.vocab_size = 151936;
  c.hidden_size = 2048;
  c.num_hidden_layers = 48;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 4;
  c.head_dim = 128;
  c.num_experts = 128;
  c.num_experts_per_tok = 8;
  c.moe_intermediate_size = 768;
  c.mlp_only_layers = {};
  c.layer_types.assign(48, LayerType::FullAttention);
  std::int64_t total = 0;
  for (const auto& p : weight_layout(c)) {
    std::int64_t n = 1;
    for (auto d : p.shape) n *= d;
    total += n;
  }
  // Qwen3-30B-A3B: 30,532,122,624 parameters.
  EXPECT_EQ(total, 30532122624);
}

ModelConfig fixture(const char* folder) { return load_model_config(std::filesystem::path(FP4SERVE_TEST_DATA) / "configs" / folder); }

using Shape = std::vector<std::int64_t>;

// Shapes of Qwen3.5-397B-A17B's BF16 release (reference notes section 6.6), read here from the
// real-shaped config.json fixture; experts per-expert, as the NVFP4 release stores them.
TEST(WeightLayout, Qwen3_5MoeFollowsTheReleaseNamesAndShapes) {
  const ModelConfig c = fixture("qwen3.5-397b-a17b");
  const auto layout = weight_layout(c);
  std::set<std::string> names;
  for (const auto& p : layout) EXPECT_TRUE(names.insert(p.tensor_name()).second) << "duplicate " << p.tensor_name();
  auto shape = [&](const std::string& module) {
    const ParamSpec* p = find(layout, module);
    EXPECT_NE(p, nullptr) << module;
    return p ? p->shape : Shape{};
  };
  const std::string l0 = "model.language_model.layers.0.", l3 = "model.language_model.layers.3.";
  EXPECT_EQ(shape("model.language_model.embed_tokens"), (Shape{248320, 4096}));
  EXPECT_EQ(shape("lm_head"), (Shape{248320, 4096}));
  EXPECT_EQ(shape("model.language_model.norm"), (Shape{4096}));
  EXPECT_EQ(shape(l0 + "linear_attn.in_proj_qkv"), (Shape{12288, 4096}));
  EXPECT_EQ(shape(l0 + "linear_attn.in_proj_z"), (Shape{8192, 4096}));
  EXPECT_EQ(shape(l0 + "linear_attn.in_proj_b"), (Shape{64, 4096}));
  EXPECT_EQ(shape(l0 + "linear_attn.in_proj_a"), (Shape{64, 4096}));
  EXPECT_EQ(shape(l0 + "linear_attn.conv1d"), (Shape{12288, 1, 4}));
  EXPECT_EQ(shape(l0 + "linear_attn.dt_bias"), (Shape{64}));
  EXPECT_EQ(shape(l0 + "linear_attn.A_log"), (Shape{64}));
  EXPECT_EQ(shape(l0 + "linear_attn.norm"), (Shape{128}));
  EXPECT_EQ(shape(l0 + "linear_attn.out_proj"), (Shape{4096, 8192}));
  EXPECT_EQ(shape(l3 + "self_attn.q_proj"), (Shape{16384, 4096}));  // query and gate per head
  EXPECT_EQ(shape(l3 + "self_attn.k_proj"), (Shape{512, 4096}));
  EXPECT_EQ(shape(l3 + "self_attn.v_proj"), (Shape{512, 4096}));
  EXPECT_EQ(shape(l3 + "self_attn.o_proj"), (Shape{4096, 8192}));
  EXPECT_EQ(shape(l3 + "self_attn.q_norm"), (Shape{256}));
  EXPECT_EQ(shape(l3 + "mlp.gate"), (Shape{512, 4096}));
  EXPECT_EQ(shape(l3 + "mlp.experts.511.gate_proj"), (Shape{1024, 4096}));
  EXPECT_EQ(shape(l3 + "mlp.experts.0.down_proj"), (Shape{4096, 1024}));
  EXPECT_EQ(shape(l3 + "mlp.shared_expert.up_proj"), (Shape{1024, 4096}));
  EXPECT_EQ(shape(l3 + "mlp.shared_expert.down_proj"), (Shape{4096, 1024}));
  EXPECT_EQ(shape(l3 + "mlp.shared_expert_gate"), (Shape{1, 4096}));
  // Layer 0 is Gated DeltaNet, layer 3 full attention: neither has the other's tensors.
  EXPECT_EQ(find(layout, l0 + "self_attn.q_proj"), nullptr);
  EXPECT_EQ(find(layout, l3 + "linear_attn.in_proj_qkv"), nullptr);
  EXPECT_EQ(find(layout, "model.language_model.layers.59.self_attn.q_proj") != nullptr, true);

  EXPECT_EQ(find(layout, l0 + "linear_attn.A_log")->tensor_name(), l0 + "linear_attn.A_log");  // a bare parameter
  EXPECT_EQ(find(layout, l0 + "linear_attn.conv1d")->tensor_name(), l0 + "linear_attn.conv1d.weight");
  EXPECT_EQ(find(layout, l0 + "linear_attn.conv1d")->kind, ParamKind::Conv1d);
  // (1 + w) norms everywhere but the Gated DeltaNet output norm.
  EXPECT_TRUE(find(layout, l0 + "input_layernorm")->zero_centered);
  EXPECT_TRUE(find(layout, l3 + "self_attn.k_norm")->zero_centered);
  EXPECT_TRUE(find(layout, "model.language_model.norm")->zero_centered);
  EXPECT_FALSE(find(layout, l0 + "linear_attn.norm")->zero_centered);
  // The NVFP4 release quantizes the routed experts and nothing else.
  for (const auto& p : layout) {
    if (p.kind != ParamKind::Linear) continue;
    EXPECT_EQ(p.release_nvfp4, p.module.find(".mlp.experts.") != std::string::npos) << p.module;
  }
}

TEST(WeightLayout, Qwen3NextUsesFusedGroupedProjections) {
  const ModelConfig c = fixture("qwen3-next-80b-a3b-instruct");
  const auto layout = weight_layout(c);
  auto shape = [&](const std::string& module) {
    const ParamSpec* p = find(layout, module);
    EXPECT_NE(p, nullptr) << module;
    return p ? p->shape : Shape{};
  };
  const std::string l0 = "model.layers.0.", l3 = "model.layers.3.";
  EXPECT_EQ(shape(l0 + "linear_attn.in_proj_qkvz"), (Shape{12288, 2048}));
  EXPECT_EQ(shape(l0 + "linear_attn.in_proj_ba"), (Shape{64, 2048}));
  EXPECT_EQ(shape(l0 + "linear_attn.conv1d"), (Shape{8192, 1, 4}));
  EXPECT_EQ(shape(l0 + "linear_attn.A_log"), (Shape{32}));
  EXPECT_EQ(shape(l0 + "linear_attn.dt_bias"), (Shape{32}));
  EXPECT_EQ(shape(l0 + "linear_attn.norm"), (Shape{128}));
  EXPECT_EQ(shape(l0 + "linear_attn.out_proj"), (Shape{2048, 4096}));
  EXPECT_EQ(find(layout, l0 + "linear_attn.in_proj_qkv"), nullptr);
  EXPECT_EQ(shape(l3 + "self_attn.q_proj"), (Shape{8192, 2048}));
  EXPECT_EQ(shape(l3 + "self_attn.k_proj"), (Shape{512, 2048}));
  EXPECT_EQ(shape(l3 + "self_attn.o_proj"), (Shape{2048, 4096}));
  EXPECT_EQ(shape(l3 + "mlp.gate"), (Shape{512, 2048}));
  EXPECT_EQ(shape(l3 + "mlp.experts.7.up_proj"), (Shape{512, 2048}));
  EXPECT_EQ(shape(l3 + "mlp.experts.7.down_proj"), (Shape{2048, 512}));
  EXPECT_EQ(shape(l3 + "mlp.shared_expert.gate_proj"), (Shape{512, 2048}));
  EXPECT_EQ(shape(l3 + "mlp.shared_expert_gate"), (Shape{1, 2048}));
}

std::int64_t total_params(const std::vector<ParamSpec>& layout) {
  std::int64_t total = 0;
  for (const auto& p : layout) {
    std::int64_t n = 1;
    for (auto d : p.shape) n *= d;
    total += n;
  }
  return total;
}

// Parameter count of a hybrid model from its config numbers (reference notes section 6),
// written out term by term, independently of the layout code.
std::int64_t hybrid_params(const ModelConfig& c, bool fused_qwen3_next) {
  const std::int64_t H = c.hidden_size, D = c.head_dim, key = c.linear_num_key_heads * c.linear_key_head_dim;
  const std::int64_t value = c.linear_num_value_heads * c.linear_value_head_dim, hv = c.linear_num_value_heads;
  const std::int64_t conv = 2 * key + value;
  const std::int64_t moe = c.num_experts * 3 * c.moe_intermediate_size * H + c.num_experts * H +
                           3 * c.shared_expert_intermediate_size * H + H;
  const std::int64_t linear_attn = (fused_qwen3_next ? (2 * key + 2 * value) * H + 2 * hv * H
                                                     : conv * H + value * H + 2 * hv * H) +
                                   conv * c.linear_conv_kernel_dim + 2 * hv + c.linear_value_head_dim + H * value;
  const std::int64_t full_attn = 2 * c.num_attention_heads * D * H + 2 * c.num_key_value_heads * D * H +
                                 H * c.num_attention_heads * D + 2 * D;
  std::int64_t full = 0;
  for (LayerType t : c.layer_types) full += t == LayerType::FullAttention;
  const std::int64_t linear = c.num_hidden_layers - full;
  return 2 * c.vocab_size * H + H + c.num_hidden_layers * (2 * H + moe) + linear * linear_attn + full * full_attn;
}

TEST(WeightLayout, HybridParameterCountsMatchTheFormula) {
  const ModelConfig q35 = fixture("qwen3.5-397b-a17b");
  const std::int64_t q35_total = total_params(weight_layout(q35));
  EXPECT_EQ(q35_total, hybrid_params(q35, false));
  EXPECT_NEAR(static_cast<double>(q35_total) / 1e9, 397.0, 1.5);  // the text model of "397B"
  const ModelConfig next = fixture("qwen3-next-80b-a3b-instruct");
  const std::int64_t next_total = total_params(weight_layout(next));
  EXPECT_EQ(next_total, hybrid_params(next, true));
  EXPECT_NEAR(static_cast<double>(next_total) / 1e9, 80.0, 1.0);
}

TEST(WeightLayout, RejectsLayerPatternsTheArchitectureCannotHave) {
  ModelConfig c = small_moe();
  c.layer_types[1] = LayerType::LinearAttention;  // qwen3_moe has no Gated DeltaNet
  testing::expect_error([&] { weight_layout(c); }, {"qwen3_moe", "linear-attention"});
  ModelConfig hybrid = fixture("qwen3-next-80b-a3b-instruct");
  hybrid.linear_num_value_heads = 0;
  testing::expect_error([&] { weight_layout(hybrid); }, {"qwen3_next", "linear_*"});
  hybrid = fixture("qwen3-next-80b-a3b-instruct");
  hybrid.layer_types.pop_back();
  testing::expect_error([&] { weight_layout(hybrid); }, {"layer_types"});
}

}  // namespace
}  // namespace fp4serve
