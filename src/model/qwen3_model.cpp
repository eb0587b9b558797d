// Mirrors transformers/models/qwen3_moe/modeling_qwen3_moe.py (Qwen3MoeForCausalLM) and, for
// layers without experts, modeling_qwen3.py. Class names in comments point at the Python.
#include "model/qwen3_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/weight_rows.h"
#include "util/error.h"

namespace fp4serve {

void rms_norm(const float* x, std::int64_t rows, std::int64_t dim, const std::vector<float>& weight, double eps,
              float* out) {
  // Qwen3MoeRMSNorm: variance in fp32, x * rsqrt(variance + eps), then the gain (plain w, not 1 + w).
  const auto feps = static_cast<float>(eps);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    double sum = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const auto variance = static_cast<float>(sum / static_cast<double>(dim));
    const float inv = 1.0f / std::sqrt(variance + feps);
    for (std::int64_t i = 0; i < dim; ++i) yr[i] = weight[static_cast<std::size_t>(i)] * (xr[i] * inv);
  }
}

namespace {

float silu(float v) { return v / (1.0f + std::exp(-v)); }

void add_into(float* acc, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += x[i];
}

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

}  // namespace

// Per-call buffers, sized for m tokens.
struct Qwen3Model::Scratch {
  std::vector<float> hidden, normed, branch;  // [m, hidden]
  std::vector<float> q, k, v, attn;           // attention projections
  std::vector<float> gate, up;                // dense MLP
  std::vector<float> cos, sin;                // [m, rotary_dim / 2]
};

Qwen3Model::Qwen3Model(ModelWeights weights, kernels::KernelSet kernel_set, kernels::Fp4Semantics semantics)
    : weights_(std::move(weights)), semantics_(semantics), rope_(weights_.config) {
  set_kernels(kernel_set);
  if (semantics_ == kernels::Fp4Semantics::W4A4) {
    const std::string dir = weights_.checkpoint->dir().string();
    if (weights_.nvfp4_matrices() == 0) fail(dir, ": W4A4 was requested but no weight of this checkpoint is NVFP4");
    const std::vector<std::string> missing = weights_.nvfp4_without_input_scale();
    if (!missing.empty()) {
      fail(dir, ": W4A4 needs a static input scale on every NVFP4 weight, but ", missing.size(), " have none, e.g. '",
           missing.front(), "' (a weight-only W4A16 checkpoint); run without W4A4");
    }
  }
}

void Qwen3Model::set_kernels(kernels::KernelSet kernel_set) {
  // A family the model does not use (no NVFP4 weight: fp4_gemm; dense qwen3: moe) may be null.
  const bool uses_fp4 = weights_.nvfp4_matrices() > 0;
  const bool uses_moe = std::any_of(weights_.layers.begin(), weights_.layers.end(),
                                    [](const DecoderLayerWeights& l) { return l.sparse_moe; });
  if (!kernel_set.dense_gemm || !kernel_set.attention || (uses_fp4 && !kernel_set.fp4_gemm) ||
      (uses_moe && !kernel_set.moe))
    fail("the kernel set lacks a family this model uses (dense GEMM, attention", uses_fp4 ? ", FP4 GEMM" : "",
         uses_moe ? ", MoE" : "", ")");
  kernels_ = kernel_set;
}

void Qwen3Model::linear(const float* x, std::int64_t m, const kernels::WeightMatrix& w, float* y) const {
  const kernels::GemmKernel* gemm = w.kind == SchemeKind::NVFP4 ? kernels_.fp4_gemm : kernels_.dense_gemm;
  gemm->run(x, m, w, y, semantics_);
}

// Qwen3MoeAttention.forward: q/k/v projections, per-head RMSNorm of q and k over head_dim (before
// RoPE), RoPE, cache update, causal GQA attention with scaling head_dim^-0.5, o_proj.
void Qwen3Model::attention(const DecoderLayerWeights& layer, std::int64_t layer_index, const float* x, std::int64_t m,
                           const KvView& kv, Scratch& s, float* out) const {
  const ModelConfig& c = config();
  const AttentionWeights& a = layer.self_attn;
  const std::int64_t D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const std::int64_t half = rope_.rotary_dim() / 2;
  s.q.resize(sz(m * Hq * D));
  s.k.resize(sz(m * Hkv * D));
  s.v.resize(sz(m * Hkv * D));
  s.attn.resize(sz(m * Hq * D));
  linear(x, m, a.q_proj, s.q.data());
  linear(x, m, a.k_proj, s.k.data());
  linear(x, m, a.v_proj, s.v.data());
  // q_norm / k_norm: RMSNorm with one [head_dim] gain shared by every head.
  rms_norm(s.q.data(), m * Hq, D, a.q_norm, c.rms_norm_eps, s.q.data());
  rms_norm(s.k.data(), m * Hkv, D, a.k_norm, c.rms_norm_eps, s.k.data());
  float* k_cache = kv.keys[sz(layer_index)];
  float* v_cache = kv.values[sz(layer_index)];
  for (std::int64_t t = 0; t < m; ++t) {
    const float* cos = s.cos.data() + t * half;
    const float* sin = s.sin.data() + t * half;
    rope_.apply(s.q.data() + t * Hq * D, Hq, D, cos, sin);
    rope_.apply(s.k.data() + t * Hkv * D, Hkv, D, cos, sin);
    const std::int64_t row = (kv.past + t) * Hkv * D;
    std::memcpy(k_cache + row, s.k.data() + t * Hkv * D, sz(Hkv * D) * sizeof(float));
    std::memcpy(v_cache + row, s.v.data() + t * Hkv * D, sz(Hkv * D) * sizeof(float));
  }
  kernels::AttentionArgs args;
  args.q = s.q.data();
  args.k_cache = k_cache;
  args.v_cache = v_cache;
  args.out = s.attn.data();
  args.m = m;
  args.past = kv.past;
  args.num_heads = Hq;
  args.num_kv_heads = Hkv;
  args.head_dim = D;
  args.scale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));  // self.head_dim**-0.5
  kernels_.attention->run(args);
  linear(s.attn.data(), m, a.o_proj, out);
}

// Qwen3MoeMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)) with act_fn = SiLU.
void Qwen3Model::dense_mlp(const MlpWeights& mlp, const float* x, std::int64_t m, Scratch& s, float* out) const {
  const std::int64_t inner = mlp.gate_proj.n;
  s.gate.resize(sz(m * inner));
  s.up.resize(sz(m * inner));
  linear(x, m, mlp.gate_proj, s.gate.data());
  linear(x, m, mlp.up_proj, s.up.data());
  for (std::size_t i = 0; i < s.gate.size(); ++i) s.gate[i] = silu(s.gate[i]) * s.up[i];
  linear(s.gate.data(), m, mlp.down_proj, out);
}

// Qwen3MoeForCausalLM.forward -> Qwen3MoeModel.forward.
void Qwen3Model::forward(std::span<const std::int32_t> tokens, const KvView& kv, std::span<float> logits,
                         LogitsFor which) const {
  const ModelConfig& c = config();
  const auto m = static_cast<std::int64_t>(tokens.size());
  const std::int64_t H = c.hidden_size, V = c.vocab_size;
  if (m == 0) fail("forward: no tokens given");
  if (static_cast<std::int64_t>(kv.keys.size()) != c.num_hidden_layers ||
      static_cast<std::int64_t>(kv.values.size()) != c.num_hidden_layers) {
    fail("forward: the KV cache has ", kv.keys.size(), " layers, the model ", c.num_hidden_layers);
  }
  if (kv.past < 0 || kv.past + m > kv.capacity) {
    fail("forward: ", m, " new tokens after ", kv.past, " cached ones exceed the KV cache capacity ", kv.capacity);
  }
  const std::int64_t out_rows = which == LogitsFor::AllPositions ? m : 1;
  if (static_cast<std::int64_t>(logits.size()) != out_rows * V) {
    fail("forward: the logits buffer holds ", logits.size(), " floats, expected ", out_rows, " x ", V);
  }

  Scratch s;
  s.hidden.resize(sz(m * H));
  s.normed.resize(sz(m * H));
  s.branch.resize(sz(m * H));

  // embed_tokens: one table row per token, widened to fp32.
  for (std::int64_t t = 0; t < m; ++t) {
    const std::int32_t id = tokens[sz(t)];
    if (id < 0 || id >= V) fail("token id ", id, " at position ", kv.past + t, " is outside the vocabulary [0, ", V, ")");
    kernels::dequantize_row(weights_.embed_tokens, id, s.hidden.data() + t * H);
  }

  // Qwen3MoeRotaryEmbedding: cos/sin for each new position, shared by every layer.
  const std::int64_t half = rope_.rotary_dim() / 2;
  s.cos.resize(sz(m * half));
  s.sin.resize(sz(m * half));
  for (std::int64_t t = 0; t < m; ++t) rope_.cos_sin(kv.past + t, s.cos.data() + t * half, s.sin.data() + t * half);

  // Qwen3MoeDecoderLayer.forward, pre-norm residual blocks.
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const DecoderLayerWeights& layer = weights_.layers[sz(i)];
    rms_norm(s.hidden.data(), m, H, layer.input_layernorm, c.rms_norm_eps, s.normed.data());
    attention(layer, i, s.normed.data(), m, kv, s, s.branch.data());
    add_into(s.hidden.data(), s.branch.data(), s.hidden.size());

    rms_norm(s.hidden.data(), m, H, layer.post_attention_layernorm, c.rms_norm_eps, s.normed.data());
    if (layer.sparse_moe) {
      // Qwen3MoeSparseMoeBlock: router softmax (fp32), top-k, optional renormalisation, experts.
      kernels_.moe->run(s.normed.data(), m, layer.moe, s.branch.data(), semantics_);
    } else {
      dense_mlp(layer.mlp, s.normed.data(), m, s, s.branch.data());
    }
    add_into(s.hidden.data(), s.branch.data(), s.hidden.size());
  }

  // Final norm and lm_head, only on the rows whose logits are wanted.
  const std::int64_t first = m - out_rows;
  rms_norm(s.hidden.data() + first * H, out_rows, H, weights_.norm, c.rms_norm_eps, s.normed.data());
  linear(s.normed.data(), out_rows, weights_.lm_head, logits.data());
}

}  // namespace fp4serve
