// Loading refuses a checkpoint whose tensors do not fit the config, naming the tensor; and
// --check-weights finds NaN / Inf in weights and scales. Each case copies an oracle fixture and
// rewrites its model.safetensors with one defect.
#include <gtest/gtest.h>

#include <bit>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "kernels/kernels.h"
#include "model/model_weights.h"
#include "model/qwen3_model.h"
#include "model/qwen3_oracle.h"
#include "numerics/scalar_formats.h"
#include "util/error.h"

namespace fp4serve {
namespace {

namespace fs = std::filesystem;
using oracle::copy_with;
using oracle::drop;
using oracle::Entry;
using oracle::find;

// The load error's message, or "" when loading succeeds.
std::string load_error(const fs::path& dir) {
  try {
    load_model_weights(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

TEST(Qwen3LoadErrors, MissingNormGainIsNamed) {
  testing::TempDir dir;
  copy_with("moe_bf16_gqa2", dir.path(), [](auto& t) { drop(t, "model.layers.1.self_attn.k_norm.weight"); });
  const std::string msg = load_error(dir.path());
  EXPECT_TRUE(Contains(msg, "'model.layers.1.self_attn.k_norm.weight' is missing"));
  EXPECT_TRUE(Contains(msg, "[16]"));
  EXPECT_TRUE(Contains(msg, dir.path().string()));
}

TEST(Qwen3LoadErrors, MissingExpertIsNamed) {
  testing::TempDir dir;
  copy_with("moe_bf16_gqa2", dir.path(), [](auto& t) { drop(t, "model.layers.0.mlp.experts.5.down_proj.weight"); });
  EXPECT_TRUE(Contains(load_error(dir.path()), "'model.layers.0.mlp.experts.5.down_proj.weight' is missing"));
}

TEST(Qwen3LoadErrors, MissingLmHeadOfUntiedModelIsNamed) {
  testing::TempDir dir;
  copy_with("moe_bf16_gqa2", dir.path(), [](auto& t) { drop(t, "lm_head.weight"); });
  EXPECT_TRUE(Contains(load_error(dir.path()), "'lm_head.weight' is missing"));
}

TEST(Qwen3LoadErrors, MisShapedProjectionIsNamed) {
  testing::TempDir dir;
  copy_with("moe_bf16_gqa2", dir.path(), [](auto& t) {
    Entry& q = find(t, "model.layers.0.self_attn.q_proj.weight");  // [64, 64] BF16
    q.decl.shape = {48, 64};
    q.data.resize(48 * 64 * 2);
  });
  const std::string msg = load_error(dir.path());
  EXPECT_TRUE(Contains(msg, "'model.layers.0.self_attn.q_proj.weight' has shape [48, 64], expected [64, 64]"));
}

TEST(Qwen3LoadErrors, MisShapedNormIsNamed) {
  testing::TempDir dir;
  copy_with("qwen3_bf16_dense", dir.path(), [](auto& t) {
    Entry& n = find(t, "model.norm.weight");
    n.decl.shape = {32, 2};
  });
  EXPECT_TRUE(Contains(load_error(dir.path()), "'model.norm.weight' has shape [32, 2], expected [64]"));
}

TEST(Qwen3LoadErrors, WrongDtypeNormIsNamed) {
  testing::TempDir dir;
  copy_with("moe_bf16_gqa2", dir.path(), [](auto& t) {
    Entry& n = find(t, "model.layers.0.input_layernorm.weight");
    n.decl.dtype = DType::I16;
  });
  const std::string msg = load_error(dir.path());
  EXPECT_TRUE(Contains(msg, "'model.layers.0.input_layernorm.weight' has dtype I16"));
}

TEST(Qwen3LoadErrors, WrongDtypeLinearIsNamed) {
  testing::TempDir dir;
  copy_with("moe_bf16_gqa2", dir.path(), [](auto& t) { find(t, "model.layers.1.mlp.gate.weight").decl.dtype = DType::I16; });
  const std::string msg = load_error(dir.path());
  EXPECT_TRUE(Contains(msg, "model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(Contains(msg, "I16"));
}

TEST(Qwen3LoadErrors, MissingNvfp4BlockScaleIsNamed) {
  testing::TempDir dir;
  copy_with("moe_nvfp4_modelopt", dir.path(),
            [](auto& t) { drop(t, "model.layers.2.mlp.experts.1.up_proj.weight_scale"); });
  EXPECT_TRUE(Contains(load_error(dir.path()), "model.layers.2.mlp.experts.1.up_proj.weight_scale"));
}

TEST(Qwen3LoadErrors, MisShapedNvfp4WeightIsNamed) {
  testing::TempDir dir;
  copy_with("moe_nvfp4_ct", dir.path(), [](auto& t) {
    // Packed [64, 32] (64 x 64 logical) -> [64, 24] with matching block scales [64, 3].
    Entry& w = find(t, "model.layers.0.self_attn.o_proj.weight_packed");
    w.decl.shape = {64, 24};
    w.data.resize(64 * 24);
    Entry& s = find(t, "model.layers.0.self_attn.o_proj.weight_scale");
    s.decl.shape = {64, 3};
    s.data.resize(64 * 3);
  });
  EXPECT_TRUE(Contains(load_error(dir.path()),
                       "'model.layers.0.self_attn.o_proj.weight_packed' has shape [64, 24] (packed NVFP4: [64, 48]), "
                       "expected [64, 64]"));
}

TEST(Qwen3LoadErrors, FixturesLoadCleanly) {
  for (const oracle::Case& c : oracle::cases()) EXPECT_EQ(load_error(c.dir()), "") << c.fixture;
}

TEST(Qwen3LoadErrors, W4A4NeedsNvfp4Weights) {
  try {
    Qwen3Model model(load_model_weights(oracle::root() / "moe_bf16_gqa2"), kernels::reference_kernels(),
                     kernels::Fp4Semantics::W4A4);
    FAIL() << "W4A4 on a BF16 checkpoint must be refused";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "no weight of this checkpoint is NVFP4"));
  }
}

TEST(Qwen3LoadErrors, W4A4NeedsInputScales) {
  testing::TempDir dir;
  copy_with("moe_nvfp4_modelopt", dir.path(), [](auto& t) { drop(t, "model.layers.0.self_attn.v_proj.input_scale"); });
  Qwen3Model w4a16(load_model_weights(dir.path()), kernels::reference_kernels());  // fine without
  try {
    Qwen3Model model(load_model_weights(dir.path()), kernels::reference_kernels(), kernels::Fp4Semantics::W4A4);
    FAIL() << "W4A4 without an input scale must be refused";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(std::string(e.what()), "'model.layers.0.self_attn.v_proj.weight'"));
  }
}

// ---- --check-weights -------------------------------------------------------------------------

TEST(Qwen3CheckWeights, CleanFixturesPass) {
  for (const oracle::Case& c : oracle::cases()) {
    const WeightCheckReport r = check_weights(load_model_weights(c.dir()), 2);
    EXPECT_TRUE(r.ok()) << c.fixture << ": " << (r.problems.empty() ? "" : r.problems.front());
    EXPECT_GT(r.values, 10000u);
  }
}

TEST(Qwen3CheckWeights, FindsNanAndInfInBf16Weights) {
  testing::TempDir dir;
  copy_with("moe_bf16_gqa2", dir.path(), [](auto& t) {
    Entry& w = find(t, "model.layers.1.mlp.experts.2.up_proj.weight");  // [32, 64] BF16
    const std::uint16_t nan = 0x7fc0, inf = 0x7f80;
    auto put = [&](std::size_t index, std::uint16_t bits) {
      w.data[2 * index] = static_cast<std::uint8_t>(bits & 0xff);
      w.data[2 * index + 1] = static_cast<std::uint8_t>(bits >> 8);
    };
    put(3 * 64 + 7, nan);
    put(5 * 64 + 1, inf);
    put(6 * 64 + 1, inf);
    Entry& g = find(t, "model.norm.weight");
    g.data[0] = 0x80, g.data[1] = 0xff;  // -inf
  });
  const WeightCheckReport r = check_weights(load_model_weights(dir.path()));
  ASSERT_EQ(r.problems.size(), 2u);
  std::string all = r.problems[0] + "\n" + r.problems[1];
  EXPECT_TRUE(Contains(all, "'model.layers.1.mlp.experts.2.up_proj.weight' (BF16) has 1 NaN and 2 Inf value(s); "
                             "the first at row 3, column 7"));
  EXPECT_TRUE(Contains(all, "'model.norm.weight'"));
}

TEST(Qwen3CheckWeights, FindsNanBlockScales) {
  testing::TempDir dir;
  copy_with("moe_nvfp4_modelopt", dir.path(), [](auto& t) {
    find(t, "model.layers.0.self_attn.k_proj.weight_scale").data[9] = 0x7f;  // E4M3 NaN
  });
  const WeightCheckReport r = check_weights(load_model_weights(dir.path()));
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_TRUE(Contains(r.problems[0], "'model.layers.0.self_attn.k_proj.weight_scale' (F8_E4M3) has 1 NaN"));
}

TEST(Qwen3CheckWeights, FindsNanFp8Weights) {
  testing::TempDir dir;
  copy_with("moe_fp8_modelopt", dir.path(), [](auto& t) {
    Entry& w = find(t, "model.layers.1.mlp.down_proj.weight");  // dense layer, [64, 96] F8_E4M3
    w.data[2 * 96 + 5] = 0xff;                                   // E4M3 NaN (negative)
  });
  const WeightCheckReport r = check_weights(load_model_weights(dir.path()));
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_TRUE(Contains(r.problems[0], "'model.layers.1.mlp.down_proj.weight' (F8_E4M3) has 1 NaN and 0 Inf value(s); "
                                      "the first at row 2, column 5"));
}

}  // namespace
}  // namespace fp4serve
