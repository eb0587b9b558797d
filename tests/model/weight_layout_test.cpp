#include "model/weight_layout.h"

#include <gtest/gtest.h>

#include <set>

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

TEST(WeightLayout, HybridArchitecturesAreReportedAsNotYetSupported) {
  ModelConfig c = small_moe();
  c.arch = Arch::Qwen3Next;
  try {
    weight_layout(c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen3_next"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4serve
