#include "model/tensor_roles.h"

#include <gtest/gtest.h>

namespace fp4serve {
namespace {

TEST(TensorRoles, ClassifiesQwen3MoeNames) {
  EXPECT_EQ(classify_tensor("model.embed_tokens.weight").role, TensorRole::Embedding);
  EXPECT_EQ(classify_tensor("lm_head.weight").role, TensorRole::LmHead);
  EXPECT_EQ(classify_tensor("model.norm.weight").role, TensorRole::Norm);
  EXPECT_EQ(classify_tensor("model.layers.3.input_layernorm.weight").role, TensorRole::Norm);
  EXPECT_EQ(classify_tensor("model.layers.3.self_attn.q_norm.weight").role, TensorRole::Norm);
  EXPECT_EQ(classify_tensor("model.layers.3.self_attn.q_proj.weight").role, TensorRole::Attention);
  EXPECT_EQ(classify_tensor("model.layers.3.mlp.gate.weight").role, TensorRole::Router);
  EXPECT_EQ(classify_tensor("model.layers.3.mlp.gate_proj.weight").role, TensorRole::DenseMlp);
  auto expert = classify_tensor("model.layers.12.mlp.experts.101.down_proj.weight_scale");
  EXPECT_EQ(expert.role, TensorRole::RoutedExpert);
  EXPECT_EQ(expert.layer, 12);
  EXPECT_EQ(expert.expert, 101);
  EXPECT_EQ(expert.group, "model.layers.*.mlp.experts.*.down_proj.weight_scale");
}

TEST(TensorRoles, ClassifiesHybridAndMultimodalNames) {
  EXPECT_EQ(classify_tensor("model.language_model.layers.0.linear_attn.in_proj_qkv.weight").role,
            TensorRole::LinearAttention);
  EXPECT_EQ(classify_tensor("model.language_model.layers.0.linear_attn.norm.weight").role,
            TensorRole::LinearAttention);
  EXPECT_EQ(classify_tensor("model.language_model.layers.0.mlp.shared_expert.up_proj.weight").role,
            TensorRole::SharedExpert);
  EXPECT_EQ(classify_tensor("model.language_model.layers.0.mlp.shared_expert_gate.weight").role,
            TensorRole::SharedExpert);
  auto fused = classify_tensor("model.language_model.layers.7.mlp.experts.gate_up_proj");
  EXPECT_EQ(fused.role, TensorRole::RoutedExpert);
  EXPECT_EQ(fused.layer, 7);
  EXPECT_EQ(fused.expert, -1);
  EXPECT_EQ(classify_tensor("mtp.layers.0.mlp.experts.3.up_proj.weight").role, TensorRole::Mtp);
  EXPECT_EQ(classify_tensor("model.visual.blocks.0.attn.qkv.weight").role, TensorRole::Vision);
}

TEST(TensorRoles, RecognisesQuantMetadata) {
  EXPECT_TRUE(is_quant_metadata_tensor("a.weight_scale"));
  EXPECT_TRUE(is_quant_metadata_tensor("a.weight_scale_2"));
  EXPECT_TRUE(is_quant_metadata_tensor("a.input_global_scale"));
  EXPECT_TRUE(is_quant_metadata_tensor("a.experts.gate_up_proj_weight_scale"));
  EXPECT_FALSE(is_quant_metadata_tensor("a.weight"));
  EXPECT_FALSE(is_quant_metadata_tensor("a.weight_packed"));
}

}  // namespace
}  // namespace fp4serve
