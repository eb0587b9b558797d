// synth for the hybrid architectures (Qwen3.5-MoE, Qwen3-Next): exact tensor names, shapes and
// dtypes, the release's quantized/excluded split, and weights that give a sane forward pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "formats/checkpoint.h"
#include "formats/model_config.h"
#include "formats/quant_config.h"
#include "formats/quant_scheme.h"
#include "model/model_weights.h"
#include "model/weight_layout.h"
#include "synth/presets.h"
#include "synth/synth_checkpoint.h"
#include "synth/tensor_values.h"

namespace fp4serve::synth {
namespace {

namespace fs = std::filesystem;
using testing::as_floats;
using testing::linear_weight;
using Shape = std::vector<std::int64_t>;

struct Expected {
  DType dtype;
  Shape shape;
};

// Every tensor the checkpoint must hold, derived from the layout and the release split: a
// quantized Linear is ModelOpt's four tensors (or compressed-tensors' four), everything else BF16.
std::map<std::string, Expected> expected_tensors(const ModelConfig& c, WeightFormat format, QuantScope scope) {
  const QuantConfig qc = [&] {
    const nlohmann::json hf = hf_quant_config_json(c, scope);
    return parse_quant_config(&hf, "hf", nullptr, "config");
  }();
  std::map<std::string, Expected> out;
  for (const ParamSpec& p : weight_layout(c)) {
    const bool quantized = format != WeightFormat::BF16 && p.kind == ParamKind::Linear && !qc.is_ignored(p.module);
    if (!quantized) {
      out[p.tensor_name()] = {DType::BF16, p.shape};
      continue;
    }
    const std::int64_t rows = p.shape[0], cols = p.shape[1];
    if (format == WeightFormat::CompressedTensorsNvfp4) {
      out[p.module + ".weight_packed"] = {DType::U8, {rows, cols / 2}};
      out[p.module + ".weight_global_scale"] = {DType::F32, {1}};
      out[p.module + ".input_global_scale"] = {DType::F32, {1}};
    } else {
      out[p.module + ".weight"] = {DType::U8, {rows, cols / 2}};
      out[p.module + ".weight_scale_2"] = {DType::F32, {}};
      out[p.module + ".input_scale"] = {DType::F32, {}};
    }
    out[p.module + ".weight_scale"] = {DType::F8_E4M3, {rows, cols / 16}};
  }
  return out;
}

class HybridSynth : public ::testing::Test {
 protected:
  // A small vocabulary without tokenizer files keeps most writes to a few hundred KB.
  SynthOptions options(Arch arch, const std::string& sub, WeightFormat format, bool small_vocab = true) {
    SynthOptions o;
    o.config = preset_config(arch, "tiny");
    if (small_vocab) {
      ShapeOverrides v;
      v.vocab = 512;
      apply_overrides(o.config, v);
      o.with_tokenizer = false;
    }
    o.format = format;
    o.scope = default_quant_scope(arch);
    o.out_dir = tmp_ / sub;
    o.progress = false;
    o.threads = 2;
    return o;
  }

  void expect_exact_tensors(const SynthOptions& o) {
    const Checkpoint ckpt = Checkpoint::open(o.out_dir);
    const auto want = expected_tensors(o.config, o.format, o.scope);
    EXPECT_EQ(ckpt.tensors().size(), want.size());
    for (const auto& [name, e] : want) {
      const TensorRef* t = ckpt.find(name);
      ASSERT_NE(t, nullptr) << "missing " << name;
      EXPECT_EQ(t->info->dtype, e.dtype) << name;
      EXPECT_EQ(t->info->shape, e.shape) << name;
    }
    for (const auto& [name, ref] : ckpt.tensors()) EXPECT_TRUE(want.count(name)) << "unexpected " << name;
  }

  fp4serve::testing::TempDir tmp_;
};

TEST_F(HybridSynth, TinyQwen3_5IsTheNvfp4ReleaseLayout) {
  // The preset as users get it: full Qwen3 vocabulary and tokenizer files.
  const SynthOptions o = options(Arch::Qwen3_5Moe, "q35", WeightFormat::ModelOptNvfp4, false);
  write_synthetic_checkpoint(o);
  EXPECT_TRUE(fs::exists(o.out_dir / "tokenizer.json"));
  expect_exact_tensors(o);

  const ModelConfig c = load_model_config(o.out_dir);
  EXPECT_EQ(c.arch, Arch::Qwen3_5Moe);
  EXPECT_EQ(c.weight_prefix, "model.language_model.");
  EXPECT_EQ(c.layer_types, o.config.layer_types);
  EXPECT_EQ(c.rotary_dim(), 8);

  const Checkpoint ckpt = Checkpoint::open(o.out_dir);
  const QuantConfig qc = load_quant_config(o.out_dir);
  EXPECT_EQ(qc.producer, QuantProducer::ModelOpt);
  const ResolvedQuantization rq = resolve_quantization(ckpt, qc);
  const std::string l0 = "model.language_model.layers.0.", l3 = "model.language_model.layers.3.";
  EXPECT_EQ(rq.find(l0 + "mlp.experts.5.down_proj")->scheme.kind, SchemeKind::NVFP4);
  for (const std::string& m : {l0 + "linear_attn.in_proj_qkv", l0 + "linear_attn.out_proj", l3 + "self_attn.q_proj",
                              l3 + "mlp.shared_expert.up_proj", l3 + "mlp.shared_expert_gate", l3 + "mlp.gate",
                              std::string("lm_head")})
    EXPECT_EQ(rq.find(m)->scheme.kind, SchemeKind::Dense) << m;
  // Gate and up of one expert share their per-tensor scale, as ModelOpt exports them.
  EXPECT_EQ(rq.find(l0 + "mlp.experts.1.gate_proj")->scheme.weight_scale_2,
            rq.find(l0 + "mlp.experts.1.up_proj")->scheme.weight_scale_2);
  // hf_quant_config.json and config.json carry the same per-layer exclude list.
  std::ifstream hf_in(o.out_dir / "hf_quant_config.json"), cfg_in(o.out_dir / "config.json");
  const auto hf = nlohmann::json::parse(hf_in);
  const auto cfg = nlohmann::json::parse(cfg_in);
  EXPECT_EQ(hf["quantization"]["exclude_modules"], cfg["quantization_config"]["ignore"]);
  EXPECT_EQ(cfg["text_config"]["layer_types"].size(), 4u);
}

TEST_F(HybridSynth, TinyQwen3NextHasFusedProjectionsAndTheSameSplit) {
  const SynthOptions o = options(Arch::Qwen3Next, "next", WeightFormat::ModelOptNvfp4);
  write_synthetic_checkpoint(o);
  expect_exact_tensors(o);
  const Checkpoint ckpt = Checkpoint::open(o.out_dir);
  EXPECT_NE(ckpt.find("model.layers.0.linear_attn.in_proj_qkvz.weight"), nullptr);
  EXPECT_NE(ckpt.find("model.layers.0.linear_attn.in_proj_ba.weight"), nullptr);
  const ModelConfig c = load_model_config(o.out_dir);
  EXPECT_EQ(c.arch, Arch::Qwen3Next);
  EXPECT_EQ(c.layer_types, o.config.layer_types);  // from full_attention_interval
  EXPECT_NO_THROW(resolve_quantization(ckpt, load_quant_config(o.out_dir)));
}

TEST_F(HybridSynth, OtherFormatsAndScopesResolve) {
  for (Arch arch : {Arch::Qwen3_5Moe, Arch::Qwen3Next}) {
    const std::string tag(arch_name(arch));
    SynthOptions ct = options(arch, tag + "-ct", WeightFormat::CompressedTensorsNvfp4);
    SynthOptions bf16 = options(arch, tag + "-bf16", WeightFormat::BF16);
    SynthOptions all = options(arch, tag + "-all", WeightFormat::ModelOptNvfp4);
    all.scope = QuantScope::All;
    for (const SynthOptions* o : {&ct, &bf16, &all}) {
      write_synthetic_checkpoint(*o);
      expect_exact_tensors(*o);
      EXPECT_NO_THROW(resolve_quantization(Checkpoint::open(o->out_dir), load_quant_config(o->out_dir))) << o->out_dir;
    }
    // compressed-tensors' compact regexes leave the same modules unquantized as ModelOpt's list.
    const auto rq_ct = resolve_quantization(Checkpoint::open(ct.out_dir), load_quant_config(ct.out_dir));
    for (const ParamSpec& p : weight_layout(ct.config)) {
      if (p.kind != ParamKind::Linear) continue;
      EXPECT_EQ(rq_ct.find(p.module)->scheme.kind == SchemeKind::NVFP4, p.release_nvfp4) << p.module;
    }
    // --quant-scope all: every Linear but routers, gates, in_proj_a/b (ba) and lm_head.
    const auto rq = resolve_quantization(Checkpoint::open(all.out_dir), load_quant_config(all.out_dir));
    const std::string l0 = all.config.weight_prefix + "layers.0.", l3 = all.config.weight_prefix + "layers.3.";
    const std::string qkv = arch == Arch::Qwen3Next ? "linear_attn.in_proj_qkvz" : "linear_attn.in_proj_qkv";
    const std::string ba = arch == Arch::Qwen3Next ? "linear_attn.in_proj_ba" : "linear_attn.in_proj_b";
    EXPECT_EQ(rq.find(l0 + qkv)->scheme.kind, SchemeKind::NVFP4);
    EXPECT_EQ(rq.find(l0 + "linear_attn.out_proj")->scheme.kind, SchemeKind::NVFP4);
    EXPECT_EQ(rq.find(l3 + "self_attn.o_proj")->scheme.kind, SchemeKind::NVFP4);
    EXPECT_EQ(rq.find(l3 + "mlp.shared_expert.down_proj")->scheme.kind, SchemeKind::NVFP4);
    EXPECT_EQ(rq.find(l0 + ba)->scheme.kind, SchemeKind::Dense);
    EXPECT_EQ(rq.find(l0 + "mlp.shared_expert_gate")->scheme.kind, SchemeKind::Dense);
    EXPECT_EQ(rq.find(l3 + "self_attn.q_proj")->scheme.weight_scale_2, rq.find(l3 + "self_attn.v_proj")->scheme.weight_scale_2);
    if (arch == Arch::Qwen3_5Moe) {  // fused into one GEMM by serving engines: one scale
      EXPECT_EQ(rq.find(l0 + "linear_attn.in_proj_qkv")->scheme.weight_scale_2,
                rq.find(l0 + "linear_attn.in_proj_z")->scheme.weight_scale_2);
    }
  }
}

TEST_F(HybridSynth, EveryFormatLoadsInTheModelLoaderWithNothingLeftOver) {
  for (Arch arch : {Arch::Qwen3_5Moe, Arch::Qwen3Next}) {
    for (WeightFormat format : {WeightFormat::ModelOptNvfp4, WeightFormat::CompressedTensorsNvfp4, WeightFormat::BF16}) {
      for (QuantScope scope : {QuantScope::Experts, QuantScope::All}) {
        SynthOptions o = options(arch, std::string(arch_name(arch)) + "-" + weight_format_name(format) +
                                           (scope == QuantScope::All ? "-all" : "-experts"),
                                 format);
        o.scope = scope;
        write_synthetic_checkpoint(o);
        const ModelWeights w = load_model_weights(o.out_dir);
        EXPECT_EQ(w.config.arch, arch);
        for (const std::string& warning : w.warnings)
          EXPECT_EQ(warning.find("not used"), std::string::npos) << o.out_dir << ": " << warning;
      }
    }
  }
}

TEST_F(HybridSynth, LinearAttentionParametersAreInitialisedLikeTransformers) {
  const SynthOptions o = options(Arch::Qwen3_5Moe, "init", WeightFormat::BF16);
  write_synthetic_checkpoint(o);
  const Checkpoint ckpt = Checkpoint::open(o.out_dir);
  const std::string la = "model.language_model.layers.1.linear_attn.";
  for (float a : as_floats(ckpt.at(la + "A_log"))) {  // log(uniform(1, 16))
    EXPECT_GE(a, -0.01f);
    EXPECT_LE(a, std::log(16.0f) + 0.02f);
  }
  for (float d : as_floats(ckpt.at(la + "dt_bias"))) EXPECT_LT(std::fabs(d), 0.4f);
  auto mean_abs_dev = [](const std::vector<float>& v, float centre) {
    double s = 0;
    for (float x : v) s += std::fabs(x - centre);
    return s / static_cast<double>(v.size());
  };
  // Zero-centred (1 + w) norms near 0; the gated output norm near 1.
  EXPECT_LT(mean_abs_dev(as_floats(ckpt.at("model.language_model.layers.1.input_layernorm.weight")), 0.0f), 0.1);
  EXPECT_LT(mean_abs_dev(as_floats(ckpt.at("model.language_model.layers.3.self_attn.q_norm.weight")), 0.0f), 0.1);
  EXPECT_LT(mean_abs_dev(as_floats(ckpt.at("model.language_model.norm.weight")), 0.0f), 0.1);
  EXPECT_LT(mean_abs_dev(as_floats(ckpt.at(la + "norm.weight")), 1.0f), 0.1);
  // Conv taps keep unit RMS through the K-tap sum: std about 1/sqrt(K) = 0.5.
  const auto conv = as_floats(ckpt.at(la + "conv1d.weight"));
  const double conv_rms = std::sqrt(std::inner_product(conv.begin(), conv.end(), conv.begin(), 0.0) / double(conv.size()));
  EXPECT_NEAR(conv_rms, 0.5, 0.1);
}

// ---- A one-token forward pass of Qwen3.5-MoE, enough to see the random weights give finite,
// non-degenerate logits. With one token and empty state: the conv reads only its last tap,
// the delta rule's state is k (beta v)^T so o = (k . q) beta v, and attention over one position
// returns v.

std::vector<float> matvec(const std::vector<float>& w, const std::vector<float>& x, std::size_t rows) {
  std::vector<float> out(rows, 0.0f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < x.size(); ++c) out[r] += w[r * x.size() + c] * x[c];
  return out;
}

std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& g, bool one_plus, double eps = 1e-6) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double r = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = float(x[i] * r) * (one_plus ? 1.0f + g[i] : g[i]);
  return out;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

float rms(const std::vector<float>& x) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  return float(std::sqrt(ss / double(x.size())));
}

struct Forward {
  const ModelConfig& c;
  const Checkpoint& ckpt;
  const ResolvedQuantization& rq;
  std::vector<float> decays;  // exp(g) of every linear-attention head seen

  std::vector<float> W(const std::string& module, const std::vector<float>& x, std::int64_t rows) const {
    return matvec(linear_weight(ckpt, rq, module), x, static_cast<std::size_t>(rows));
  }
  std::vector<float> gain(const std::string& module) const { return as_floats(ckpt.at(module + ".weight")); }

  std::vector<float> linear_attention(const std::string& la, const std::vector<float>& h) {
    const std::int64_t hk = c.linear_num_key_heads, hv = c.linear_num_value_heads;
    const std::int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
    const std::int64_t key_dim = hk * dk, conv_dim = 2 * key_dim + hv * dv, K = c.linear_conv_kernel_dim;
    auto qkv = W(la + "in_proj_qkv", h, conv_dim);
    const auto z = W(la + "in_proj_z", h, hv * dv), b = W(la + "in_proj_b", h, hv), a = W(la + "in_proj_a", h, hv);
    const auto conv = as_floats(ckpt.at(la + "conv1d.weight"));
    for (std::int64_t ch = 0; ch < conv_dim; ++ch) qkv[ch] = silu(conv[ch * K + K - 1] * qkv[ch]);
    const auto a_log = as_floats(ckpt.at(la + "A_log")), dt_bias = as_floats(ckpt.at(la + "dt_bias"));
    const auto norm_w = gain(la + "norm");
    std::vector<float> o(static_cast<std::size_t>(hv * dv));
    for (std::int64_t head = 0; head < hv; ++head) {
      const std::int64_t kh = head / (hv / hk);
      auto l2 = [&](std::int64_t off) {
        double ss = 0;
        for (std::int64_t i = 0; i < dk; ++i) ss += double(qkv[off + i]) * qkv[off + i];
        return 1.0 / std::sqrt(ss + 1e-6);
      };
      const double qs = l2(kh * dk) / std::sqrt(double(dk)), ks = l2(key_dim + kh * dk);
      double qk = 0;
      for (std::int64_t i = 0; i < dk; ++i) qk += qkv[kh * dk + i] * qs * qkv[key_dim + kh * dk + i] * ks;
      const float beta = sigmoid(b[head]);
      decays.push_back(std::exp(-std::exp(a_log[head]) * softplus(a[head] + dt_bias[head])));
      std::vector<float> oh(static_cast<std::size_t>(dv));
      for (std::int64_t j = 0; j < dv; ++j) oh[j] = float(qk) * beta * qkv[2 * key_dim + head * dv + j];
      oh = rms_norm(oh, norm_w, false);
      for (std::int64_t j = 0; j < dv; ++j) o[head * dv + j] = oh[j] * silu(z[head * dv + j]);
    }
    return W(la + "out_proj", o, c.hidden_size);
  }

  std::vector<float> attention(const std::string& sa, const std::vector<float>& h) const {
    const std::int64_t D = c.head_dim, heads = c.num_attention_heads, group = heads / c.num_key_value_heads;
    const auto qg = W(sa + "q_proj", h, 2 * heads * D);
    const auto v = W(sa + "v_proj", h, c.num_key_value_heads * D);
    std::vector<float> out(static_cast<std::size_t>(heads * D));
    for (std::int64_t head = 0; head < heads; ++head)
      for (std::int64_t j = 0; j < D; ++j)
        out[head * D + j] = v[head / group * D + j] * sigmoid(qg[head * 2 * D + D + j]);
    return W(sa + "o_proj", out, c.hidden_size);
  }

  std::vector<float> moe(const std::string& mlp, const std::vector<float>& h) const {
    auto logits = W(mlp + "gate", h, c.num_experts);
    const float top = *std::max_element(logits.begin(), logits.end());
    for (float& l : logits) l = std::exp(l - top);
    std::vector<std::size_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](auto i, auto j) { return logits[i] > logits[j]; });
    float chosen = 0;
    for (std::int64_t k = 0; k < c.num_experts_per_tok; ++k) chosen += logits[order[k]];
    auto swiglu = [&](const std::string& p, std::int64_t inner) {
      auto g = W(p + "gate_proj", h, inner);
      const auto u = W(p + "up_proj", h, inner);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
      return W(p + "down_proj", g, c.hidden_size);
    };
    std::vector<float> out(static_cast<std::size_t>(c.hidden_size), 0.0f);
    for (std::int64_t k = 0; k < c.num_experts_per_tok; ++k) {
      const auto d = swiglu(mlp + "experts." + std::to_string(order[k]) + ".", c.moe_intermediate_size);
      for (std::size_t i = 0; i < out.size(); ++i) out[i] += logits[order[k]] / chosen * d[i];
    }
    const auto shared = swiglu(mlp + "shared_expert.", c.shared_expert_intermediate_size);
    const float gate = sigmoid(W(mlp + "shared_expert_gate", h, 1)[0]);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += gate * shared[i];
    return out;
  }
};

TEST_F(HybridSynth, RandomQwen3_5GivesFiniteNonDegenerateLogits) {
  SynthOptions o = options(Arch::Qwen3_5Moe, "fwd", WeightFormat::ModelOptNvfp4);
  ShapeOverrides deeper;  // 12 layers: 9 Gated DeltaNet, 3 full attention
  deeper.layers = 12;
  deeper.vocab = 4096;
  apply_overrides(o.config, deeper);
  write_synthetic_checkpoint(o);
  const ModelConfig c = load_model_config(o.out_dir);
  const Checkpoint ckpt = Checkpoint::open(o.out_dir);
  const auto rq = resolve_quantization(ckpt, load_quant_config(o.out_dir));
  Forward f{c, ckpt, rq, {}};
  const auto H = static_cast<std::size_t>(c.hidden_size);
  const auto embed = as_floats(ckpt.at(c.weight_prefix + "embed_tokens.weight"));
  for (std::size_t token : {0u, 1234u, 4095u}) {
    std::vector<float> x(embed.begin() + long(token * H), embed.begin() + long((token + 1) * H));
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = c.weight_prefix + "layers." + std::to_string(l) + ".";
      auto h = rms_norm(x, f.gain(p + "input_layernorm"), true);
      const auto mixed = c.layer_types[l] == LayerType::LinearAttention ? f.linear_attention(p + "linear_attn.", h)
                                                                         : f.attention(p + "self_attn.", h);
      for (std::size_t i = 0; i < H; ++i) x[i] += mixed[i];
      h = rms_norm(x, f.gain(p + "post_attention_layernorm"), true);
      const auto m = f.moe(p + "mlp.", h);
      for (std::size_t i = 0; i < H; ++i) x[i] += m[i];
      for (float v : x) ASSERT_TRUE(std::isfinite(v)) << "layer " << l;
      EXPECT_LT(rms(x), 10.0f) << "layer " << l;
    }
    const auto logits = matvec(as_floats(ckpt.at("lm_head.weight")), rms_norm(x, f.gain(c.weight_prefix + "norm"), true),
                               static_cast<std::size_t>(c.vocab_size));
    float lo = logits[0], hi = logits[0];
    for (float v : logits) {
      ASSERT_TRUE(std::isfinite(v));
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_LT(std::max(std::fabs(lo), std::fabs(hi)), 30.0f) << "token " << token;
    EXPECT_GT(hi - lo, 1.0f) << "token " << token;  // the model prefers some tokens
  }
  // Decays exp(g) spread inside (0, 1): neither frozen state nor instant forgetting everywhere.
  const float mean_decay = std::accumulate(f.decays.begin(), f.decays.end(), 0.0f) / float(f.decays.size());
  for (float d : f.decays) EXPECT_TRUE(d > 0.0f && d < 1.0f) << d;
  EXPECT_GT(mean_decay, 0.01f);
  EXPECT_LT(mean_decay, 0.9f);
}

}  // namespace
}  // namespace fp4serve::synth
