#include "synth/synth_checkpoint.h"

#include "common/temp_dir.h"
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/model_config.h"
#include "formats/quant_config.h"
#include "formats/quant_scheme.h"
#include "numerics/nvfp4.h"
#include "numerics/scalar_formats.h"
#include "synth/presets.h"
#include "synth/random_weights.h"
#include "synth/tensor_values.h"
#include "util/error.h"

namespace fp4serve::synth {
namespace {

namespace fs = std::filesystem;

class SynthCheckpoint : public ::testing::Test {
 protected:

  SynthOptions tiny(const std::string& sub, WeightFormat format = WeightFormat::ModelOptNvfp4) {
    SynthOptions o;
    o.config = preset_config(Arch::Qwen3Moe, "tiny");
    o.format = format;
    o.out_dir = dir_ / sub;
    o.progress = false;
    o.threads = 2;
    return o;
  }

  static std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    return os.str();
  }

  // Unique per run, so concurrent test runs on one machine never share files.
  fp4serve::testing::TempDir tmp_;
  const fs::path& dir_ = tmp_.path();
};

using testing::as_floats;
using testing::linear_weight;

TEST_F(SynthCheckpoint, TinyNvfp4LoadsAndResolvesAsModelOptLayout) {
  auto o = tiny("m");
  const SynthReport report = write_synthetic_checkpoint(o);
  EXPECT_EQ(report.shards, 1u);
  EXPECT_TRUE(fs::exists(o.out_dir / "model.safetensors"));
  EXPECT_TRUE(fs::exists(o.out_dir / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(o.out_dir / "hf_quant_config.json"));

  const ModelConfig config = load_model_config(o.out_dir);
  EXPECT_EQ(config.arch, Arch::Qwen3Moe);
  EXPECT_EQ(config.num_experts, o.config.num_experts);
  EXPECT_EQ(config.hidden_size, o.config.hidden_size);

  const Checkpoint ckpt = Checkpoint::open(o.out_dir);
  EXPECT_EQ(ckpt.tensors().size(), report.tensors);
  const ResolvedQuantization rq = resolve_quantization(ckpt, load_quant_config(o.out_dir));
  const LinearModule* expert = rq.find("model.layers.1.mlp.experts.7.down_proj");
  ASSERT_NE(expert, nullptr);
  EXPECT_EQ(expert->scheme.kind, SchemeKind::NVFP4);
  EXPECT_TRUE(expert->scheme.activations_quantized);
  EXPECT_EQ(expert->out_features, 64);
  EXPECT_EQ(expert->in_features, 32);
  // Router and lm_head stay BF16, as ModelOpt's default recipe leaves them.
  EXPECT_EQ(ckpt.at("model.layers.0.mlp.gate.weight").info->dtype, DType::BF16);
  EXPECT_EQ(ckpt.at("lm_head.weight").info->dtype, DType::BF16);
  // q/k/v share one weight_scale_2, as ModelOpt's fused export requires.
  EXPECT_EQ(rq.find("model.layers.0.self_attn.q_proj")->scheme.weight_scale_2,
            rq.find("model.layers.0.self_attn.v_proj")->scheme.weight_scale_2);
}

TEST_F(SynthCheckpoint, QuantizedWeightsReproduceTheGeneratedValues) {
  auto o = tiny("m");
  write_synthetic_checkpoint(o);
  const Checkpoint ckpt = Checkpoint::open(o.out_dir);
  const ResolvedQuantization rq = resolve_quantization(ckpt, load_quant_config(o.out_dir));
  const std::string module = "model.layers.0.mlp.experts.2.up_proj";
  const auto w = linear_weight(ckpt, rq, module);
  std::vector<float> expected(w.size());
  fill_normal(stream_seed(o.seed, module), 0.0f, 1.0f / std::sqrt(64.0f), expected);
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    ASSERT_TRUE(std::isfinite(w[i]));
    err += (w[i] - expected[i]) * (w[i] - expected[i]);
    ref += expected[i] * expected[i];
  }
  // NVFP4 of Gaussian-like data: relative RMS error around 10%.
  EXPECT_LT(std::sqrt(err / ref), 0.2);
  EXPECT_GT(std::sqrt(err / ref), 0.01);
}

TEST_F(SynthCheckpoint, SameSeedSameBytesOtherSeedOtherBytes) {
  auto a = tiny("a"), b = tiny("b"), c = tiny("c");
  b.threads = 1;  // thread count must not matter
  c.seed = 1;
  write_synthetic_checkpoint(a);
  write_synthetic_checkpoint(b);
  write_synthetic_checkpoint(c);
  const std::string bytes_a = read_all(a.out_dir / "model.safetensors");
  EXPECT_EQ(bytes_a, read_all(b.out_dir / "model.safetensors"));
  EXPECT_NE(bytes_a, read_all(c.out_dir / "model.safetensors"));
}

TEST_F(SynthCheckpoint, ShardsWithAnIndexLikeHuggingFace) {
  auto o = tiny("m");
  o.shard_bytes = 8 << 20;
  const SynthReport report = write_synthetic_checkpoint(o);
  EXPECT_GT(report.shards, 2u);
  ASSERT_TRUE(fs::exists(o.out_dir / "model.safetensors.index.json"));
  auto index = nlohmann::json::parse(read_all(o.out_dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<std::uint64_t>(), report.bytes);
  EXPECT_TRUE(fs::exists(o.out_dir / ("model-00001-of-0000" + std::to_string(report.shards) + ".safetensors")));
  const Checkpoint ckpt = Checkpoint::open(o.out_dir);
  EXPECT_EQ(ckpt.files().size(), report.shards);
  EXPECT_EQ(ckpt.tensors().size(), report.tensors);
  // A module's weight and its scales stay in one shard.
  const std::string m = "model.layers.1.mlp.experts.5.gate_proj";
  EXPECT_EQ(index["weight_map"][m + ".weight"], index["weight_map"][m + ".weight_scale_2"]);
}

TEST_F(SynthCheckpoint, CompressedTensorsStoresInvertedGlobalScales) {
  auto modelopt = tiny("mo");
  auto ct = tiny("ct", WeightFormat::CompressedTensorsNvfp4);
  write_synthetic_checkpoint(modelopt);
  write_synthetic_checkpoint(ct);
  EXPECT_FALSE(fs::exists(ct.out_dir / "hf_quant_config.json"));
  const Checkpoint a = Checkpoint::open(modelopt.out_dir);
  const Checkpoint b = Checkpoint::open(ct.out_dir);
  const std::string m = "model.layers.0.mlp.experts.0.down_proj";
  ASSERT_NE(b.find(m + ".weight_packed"), nullptr);
  EXPECT_EQ(b.find(m + ".weight"), nullptr);
  const float ws2 = as_floats(a.at(m + ".weight_scale_2"))[0];
  const float global = as_floats(b.at(m + ".weight_global_scale"))[0];
  EXPECT_NEAR(global, 1.0f / ws2, 1e-6f / ws2);  // 2688/amax vs amax/2688, each its own rounding
  const auto rq = resolve_quantization(b, load_quant_config(ct.out_dir));
  EXPECT_EQ(rq.find(m)->scheme.kind, SchemeKind::NVFP4);
  EXPECT_NEAR(rq.find(m)->scheme.weight_scale_2, ws2, ws2 * 1e-6);
  // Both dequantize to nearly the same weights (the formulas differ only in the last ulp of scales).
  const auto rqa = resolve_quantization(a, load_quant_config(modelopt.out_dir));
  const auto wa = linear_weight(a, rqa, m);
  const auto wb = linear_weight(b, rq, m);
  ASSERT_EQ(wa.size(), wb.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < wa.size(); ++i) differ += std::fabs(wa[i] - wb[i]) > 1e-3f * std::fabs(wa[i]) + 1e-6f;
  EXPECT_LT(differ, wa.size() / 50);
}

TEST_F(SynthCheckpoint, Bf16FormatHasNoQuantization) {
  auto o = tiny("m", WeightFormat::BF16);
  write_synthetic_checkpoint(o);
  const Checkpoint ckpt = Checkpoint::open(o.out_dir);
  for (const auto& [name, ref] : ckpt.tensors()) EXPECT_EQ(ref.info->dtype, DType::BF16) << name;
  EXPECT_EQ(load_quant_config(o.out_dir).producer, QuantProducer::None);
}

TEST_F(SynthCheckpoint, NoDataLeavesSparseHolesButValidHeaders) {
  auto o = tiny("m");
  ShapeOverrides wide;  // modules over the 64 KiB threshold
  wide.hidden = 1024;
  wide.moe_intermediate = 256;
  apply_overrides(o.config, wide);
  o.no_data = true;
  const SynthReport report = write_synthetic_checkpoint(o);
  const fs::path file = o.out_dir / "model.safetensors";
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_LT(static_cast<std::uint64_t>(st.st_blocks) * 512, report.bytes / 4) << "large tensors should be holes";
  const Checkpoint ckpt = Checkpoint::open(o.out_dir);
  EXPECT_EQ(ckpt.tensors().size(), report.tensors);
  // Per-tensor scales still carry real values, so the quantization resolves as usual.
  EXPECT_GT(as_floats(ckpt.at("model.layers.0.mlp.experts.0.up_proj.weight_scale_2"))[0], 0.0f);
  const auto rq = resolve_quantization(ckpt, load_quant_config(o.out_dir));
  EXPECT_EQ(rq.find("model.layers.0.mlp.experts.0.up_proj")->scheme.kind, SchemeKind::NVFP4);
  EXPECT_GT(rq.find("model.layers.0.mlp.experts.0.up_proj")->scheme.weight_scale_2, 0.0f);
  // Small tensors (norm gains) are written for real.
  EXPECT_GT(as_floats(ckpt.at("model.norm.weight"))[0], 0.5f);
}

TEST_F(SynthCheckpoint, RejectsBadRequestsWithTheParameterNamed) {
  auto o = tiny("m");
  o.config.vocab_size = 1000;
  try {
    write_synthetic_checkpoint(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--vocab"), std::string::npos) << e.what();
  }
  auto odd = tiny("odd");
  ShapeOverrides ov;
  ov.hidden = 72;  // not a multiple of 16
  apply_overrides(odd.config, ov);
  EXPECT_THROW(write_synthetic_checkpoint(odd), Error);

  auto existing = tiny("m2");
  write_synthetic_checkpoint(existing);
  try {
    write_synthetic_checkpoint(existing);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  existing.force = true;
  EXPECT_NO_THROW(write_synthetic_checkpoint(existing));
}

// A single-token forward pass of Qwen3-MoE (attention over one position is just o_proj(v)),
// enough to show random weights keep activations bounded through every layer.
std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& g, double eps) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double r = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = float(x[i] * r) * g[i];
  return out;
}

std::vector<float> matvec(const std::vector<float>& w, const std::vector<float>& x, std::size_t rows) {
  std::vector<float> out(rows, 0.0f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < x.size(); ++c) out[r] += w[r * x.size() + c] * x[c];
  return out;
}

float rms(const std::vector<float>& x) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  return float(std::sqrt(ss / double(x.size())));
}

TEST_F(SynthCheckpoint, ActivationsStayBoundedThroughAllLayers) {
  auto o = tiny("m");
  ShapeOverrides ov;
  ov.layers = 12;
  ov.vocab = 151936;
  apply_overrides(o.config, ov);
  write_synthetic_checkpoint(o);
  const ModelConfig c = load_model_config(o.out_dir);
  const Checkpoint ckpt = Checkpoint::open(o.out_dir);
  const auto rq = resolve_quantization(ckpt, load_quant_config(o.out_dir));
  const auto H = static_cast<std::size_t>(c.hidden_size);
  const auto embed = as_floats(ckpt.at("model.embed_tokens.weight"));
  for (std::size_t token : {0u, 12345u, 151935u}) {
    std::vector<float> x(embed.begin() + long(token * H), embed.begin() + long((token + 1) * H));
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      auto h = rms_norm(x, as_floats(ckpt.at(p + "input_layernorm.weight")), c.rms_norm_eps);
      const auto kv = static_cast<std::size_t>(c.num_key_value_heads * c.head_dim);
      auto v = matvec(linear_weight(ckpt, rq, p + "self_attn.v_proj"), h, kv);
      std::vector<float> attn;  // each q head reads its kv head's value
      const auto group = static_cast<std::size_t>(c.num_attention_heads / c.num_key_value_heads);
      const auto D = static_cast<std::size_t>(c.head_dim);
      for (std::size_t qh = 0; qh < std::size_t(c.num_attention_heads); ++qh)
        attn.insert(attn.end(), v.begin() + long(qh / group * D), v.begin() + long((qh / group + 1) * D));
      auto a = matvec(linear_weight(ckpt, rq, p + "self_attn.o_proj"), attn, H);
      for (std::size_t i = 0; i < H; ++i) x[i] += a[i];
      h = rms_norm(x, as_floats(ckpt.at(p + "post_attention_layernorm.weight")), c.rms_norm_eps);
      auto logits = matvec(linear_weight(ckpt, rq, p + "mlp.gate"), h, std::size_t(c.num_experts));
      std::vector<std::size_t> order(logits.size());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](auto i, auto j) { return logits[i] > logits[j]; });
      const auto I = static_cast<std::size_t>(c.moe_intermediate_size);
      for (std::size_t k = 0; k < std::size_t(c.num_experts_per_tok); ++k) {
        const std::string e = p + "mlp.experts." + std::to_string(order[k]) + ".";
        auto g = matvec(linear_weight(ckpt, rq, e + "gate_proj"), h, I);
        auto u = matvec(linear_weight(ckpt, rq, e + "up_proj"), h, I);
        for (std::size_t i = 0; i < I; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        auto d = matvec(linear_weight(ckpt, rq, e + "down_proj"), g, H);
        for (std::size_t i = 0; i < H; ++i) x[i] += d[i] / float(c.num_experts_per_tok);
      }
      for (float val : x) ASSERT_TRUE(std::isfinite(val)) << "layer " << l;
      EXPECT_LT(rms(x), 10.0f) << "layer " << l;
    }
    auto final_h = rms_norm(x, as_floats(ckpt.at("model.norm.weight")), c.rms_norm_eps);
    const auto lm = as_floats(ckpt.at("lm_head.weight"));
    float max_logit = 0;
    for (std::size_t r = 0; r < std::size_t(c.vocab_size); r += 997) {
      float s = 0;
      for (std::size_t i = 0; i < H; ++i) s += lm[r * H + i] * final_h[i];
      max_logit = std::max(max_logit, std::fabs(s));
    }
    EXPECT_LT(max_logit, 20.0f);
    EXPECT_GT(max_logit, 0.1f);
  }
}

}  // namespace
}  // namespace fp4serve::synth
