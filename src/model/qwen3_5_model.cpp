// Mirrors Qwen3_5MoeForCausalLM.forward -> Qwen3_5MoeTextModel.forward -> Qwen3_5MoeDecoderLayer
// (and the Qwen3Next* classes, which compute the same thing from a different checkpoint layout).
#include "model/qwen3_5_model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/weight_rows.h"
#include "model/hybrid_layers.h"
#include "model/hybrid_ops.h"
#include "model/rms_norm.h"
#include "model/rope.h"
#include "model/workspace_pool.h"
#include "util/error.h"

namespace fp4serve {

namespace {

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

std::int64_t rows_for(const SequenceChunk& c) {
  const auto m = static_cast<std::int64_t>(c.tokens.size());
  return c.logits == LogitsFor::AllPositions ? m : c.logits == LogitsFor::LastPosition ? 1 : 0;
}

// Scratch for one forward call (see model/workspace_pool.h).
struct Workspace {
  std::vector<hybrid::SequenceRows> seqs;
  std::vector<float> hidden, normed, branch;  // [rows, hidden]
  std::vector<float> cos, sin;                // [rows, rotary_dim / 2]
  std::vector<float> mlp_gate, mlp_up;        // SwiGLU [rows, intermediate]
  std::vector<float> shared, shared_gate;     // shared expert output and its gate
  std::vector<float> wanted;                  // rows that get logits
  hybrid::LayerWorkspace layer;
};

class Qwen3_5Model final : public CausalLM {
 public:
  Qwen3_5Model(ModelWeights weights, kernels::KernelSet kernel_set, kernels::Fp4Semantics semantics)
      : weights_(std::move(weights)), semantics_(semantics), rope_(weights_.config) {
    const ModelConfig& c = weights_.config;
    if (c.arch != Arch::Qwen3Next && c.arch != Arch::Qwen3_5Moe)
      fail("the Qwen3.5 model runs qwen3_next and qwen3_5_moe checkpoints, not '", c.model_type, "'");
    for (const DecoderLayerWeights& l : weights_.layers) {
      (l.type == LayerType::LinearAttention ? linear_layers_ : attention_layers_) += 1;
      uses_moe_ = uses_moe_ || l.sparse_moe;
    }
    set_kernels(kernel_set);
    if (semantics_ == kernels::Fp4Semantics::W4A4) {
      const std::string dir = weights_.checkpoint->dir().string();
      if (weights_.nvfp4_matrices() == 0) fail(dir, ": W4A4 was requested but no weight of this checkpoint is NVFP4");
      const std::vector<std::string> missing = weights_.nvfp4_without_input_scale();
      if (!missing.empty())
        fail(dir, ": W4A4 needs a static input scale on every NVFP4 weight, but ", missing.size(), " have none, e.g. '",
             missing.front(), "' (a weight-only W4A16 checkpoint); run without W4A4");
    }
  }

  const ModelConfig& config() const override { return weights_.config; }
  const ModelWeights& weights() const override { return weights_; }
  const kernels::KernelSet& kernels() const override { return ctx_.kernels; }
  kernels::Fp4Semantics semantics() const override { return semantics_; }

  StateSpec state_spec() const override {
    const ModelConfig& c = weights_.config;
    StateSpec s;
    s.attention_layers = attention_layers_;
    s.kv_row_elements = c.num_key_value_heads * c.head_dim;
    s.kv_dtype = kv_cache_dtype();
    s.linear_layers = linear_layers_;
    const std::int64_t conv_dim =
        2 * c.linear_num_key_heads * c.linear_key_head_dim + c.linear_num_value_heads * c.linear_value_head_dim;
    s.conv_state_floats = linear_layers_ > 0 ? (c.linear_conv_kernel_dim - 1) * conv_dim : 0;
    s.recurrent_state_floats =
        linear_layers_ > 0 ? c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim : 0;
    return s;
  }

  void set_kernels(kernels::KernelSet k) override {
    const bool uses_fp4 = weights_.nvfp4_matrices() > 0;
    const bool missing = !k.dense_gemm || (attention_layers_ > 0 && !k.attention) || (uses_fp4 && !k.fp4_gemm) ||
                         (uses_moe_ && !k.moe) || (linear_layers_ > 0 && (!k.conv1d || !k.delta_rule));
    if (missing)
      fail("the kernel set lacks a family this model uses (dense GEMM", attention_layers_ > 0 ? ", attention" : "",
           uses_fp4 ? ", FP4 GEMM" : "", uses_moe_ ? ", MoE" : "", linear_layers_ > 0 ? ", conv1d, delta rule" : "",
           ")");
    ctx_.config = &weights_.config;
    ctx_.kernels = k;
    ctx_.semantics = semantics_;
  }

  void forward(std::span<const SequenceChunk> chunks, std::span<float> logits) const override;

 private:
  // Checks the chunks and the logits buffer; fills seqs with each chunk's rows.
  void check_chunks(std::span<const SequenceChunk> chunks, std::span<float> logits,
                    std::vector<hybrid::SequenceRows>& seqs) const;
  void mlp(const DecoderLayerWeights& layer, const float* x, std::int64_t rows, Workspace& ws, float* out) const;

  ModelWeights weights_;
  kernels::Fp4Semantics semantics_;
  RotaryEmbedding rope_;
  hybrid::Context ctx_;
  std::int64_t attention_layers_ = 0, linear_layers_ = 0;
  bool uses_moe_ = false;
  WorkspacePool<Workspace> workspaces_;
};

void Qwen3_5Model::check_chunks(std::span<const SequenceChunk> chunks, std::span<float> logits,
                                std::vector<hybrid::SequenceRows>& seqs) const {
  const ModelConfig& c = weights_.config;
  if (chunks.empty()) fail("forward: no sequences given");
  seqs.clear();
  std::int64_t rows = 0, out_rows = 0;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const SequenceChunk& ch = chunks[i];
    const auto m = static_cast<std::int64_t>(ch.tokens.size());
    const auto who = [i] { return "forward: chunk " + std::to_string(i); };  // built only for an error
    if (m == 0) fail(who(), " has no tokens");
    if (!ch.state) fail(who(), " has no sequence state");
    for (const hybrid::SequenceRows& earlier : seqs)
      if (earlier.state == ch.state) fail(who(), " repeats the sequence state of an earlier chunk");
    const SequenceState& st = *ch.state;
    if (st.past < 0) fail(who(), ": past ", st.past, " is negative");
    if (attention_layers_ > 0) {
      if (st.block_tokens <= 0) fail(who(), ": block_tokens ", st.block_tokens, " must be positive");
      check_kv_dtype(st, i);
      const auto covered = static_cast<std::int64_t>(st.kv_blocks.size()) * st.block_tokens;
      if (covered < st.past + m)
        fail(who(), ": ", st.kv_blocks.size(), " KV blocks of ", st.block_tokens, " tokens hold ", covered,
             " positions, but ", st.past, " cached + ", m, " new tokens need ", st.past + m);
      for (std::int64_t b = 0; b < (st.past + m + st.block_tokens - 1) / st.block_tokens; ++b)
        if (!st.kv_blocks[sz(b)]) fail(who(), ": KV block ", b, " is null");
    }
    if (static_cast<std::int64_t>(st.conv_state.size()) != linear_layers_ ||
        static_cast<std::int64_t>(st.recurrent_state.size()) != linear_layers_)
      fail(who(), ": the state has ", st.conv_state.size(), " conv and ", st.recurrent_state.size(),
           " recurrent buffers, the model ", linear_layers_, " linear-attention layers");
    for (std::int64_t l = 0; l < linear_layers_; ++l)
      if (!st.conv_state[sz(l)] || !st.recurrent_state[sz(l)]) fail(who(), ": the state of linear layer ", l, " is null");
    for (std::int64_t t = 0; t < m; ++t) {
      const std::int32_t id = ch.tokens[sz(t)];
      if (id < 0 || id >= c.vocab_size)
        fail(who(), ": token id ", id, " at position ", st.past + t, " is outside the vocabulary [0, ", c.vocab_size, ")");
    }
    seqs.push_back({rows, m, ch.state});
    rows += m;
    out_rows += rows_for(ch);
  }
  if (static_cast<std::int64_t>(logits.size()) != out_rows * c.vocab_size)
    fail("forward: the logits buffer holds ", logits.size(), " floats, expected ", out_rows, " x ", c.vocab_size);
}

// Qwen3_5MoeSparseMoeBlock: routed experts plus sigmoid(shared_expert_gate(x)) * shared_expert(x);
// Qwen3NextMLP for a dense layer.
void Qwen3_5Model::mlp(const DecoderLayerWeights& layer, const float* x, std::int64_t rows, Workspace& ws,
                       float* out) const {
  const std::int64_t H = weights_.config.hidden_size;
  auto swiglu = [&](const MlpWeights& w, float* y) {
    const std::size_t n = sz(rows * w.gate_proj.n);
    float* gate = grown(ws.mlp_gate, n);
    float* up = grown(ws.mlp_up, n);
    ctx_.linear(x, rows, w.gate_proj, gate);
    ctx_.linear(x, rows, w.up_proj, up);
    for (std::size_t i = 0; i < n; ++i) gate[i] = hybrid::silu(gate[i]) * up[i];
    ctx_.linear(gate, rows, w.down_proj, y);
  };
  if (!layer.sparse_moe) {
    swiglu(layer.mlp, out);
    return;
  }
  ctx_.kernels.moe->run(x, rows, layer.moe, out, semantics_);
  if (!layer.has_shared_expert) return;
  float* shared = grown(ws.shared, sz(rows * H));
  float* gate = grown(ws.shared_gate, sz(rows));
  swiglu(layer.shared_expert, shared);
  ctx_.linear(x, rows, layer.shared_expert_gate, gate);
  for (std::int64_t t = 0; t < rows; ++t) {
    const float g = hybrid::sigmoid(gate[t]);
    for (std::int64_t j = 0; j < H; ++j) out[t * H + j] += g * shared[t * H + j];
  }
}

void Qwen3_5Model::forward(std::span<const SequenceChunk> chunks, std::span<float> logits) const {
  const ModelConfig& c = weights_.config;
  const WorkspacePool<Workspace>::Lease lease(workspaces_);
  Workspace& ws = *lease;
  check_chunks(chunks, logits, ws.seqs);
  const std::span<const hybrid::SequenceRows> seqs = ws.seqs;
  const std::int64_t rows = seqs.back().begin + seqs.back().m, H = c.hidden_size;
  const std::size_t n = sz(rows * H);

  float* hidden = grown(ws.hidden, n);
  float* normed = grown(ws.normed, n);
  float* branch = grown(ws.branch, n);
  // embed_tokens, and cos/sin of every row's position (text-only mRoPE is plain RoPE).
  const std::int64_t half = rope_.rotary_dim() / 2;
  float* cos = grown(ws.cos, sz(rows * half));
  float* sin = grown(ws.sin, sz(rows * half));
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    for (std::int64_t t = 0; t < seqs[i].m; ++t) {
      const std::int64_t row = seqs[i].begin + t;
      kernels::dequantize_row(weights_.embed_tokens, chunks[i].tokens[sz(t)], hidden + row * H);
      rope_.cos_sin(seqs[i].state->past + t, cos + row * half, sin + row * half);
    }
  }

  std::int64_t linear_index = 0, attention_index = 0;
  for (const DecoderLayerWeights& layer : weights_.layers) {
    rms_norm(hidden, rows, H, layer.input_layernorm, c.rms_norm_eps, normed);
    if (layer.type == LayerType::LinearAttention) {
      hybrid::gated_deltanet(ctx_, layer.linear_attn, linear_index++, normed, seqs, rows, ws.layer, branch);
    } else {
      hybrid::gated_attention(ctx_, layer.self_attn, attention_index++, rope_, cos, sin, normed, seqs, rows, ws.layer,
                              branch);
    }
    add_into(hidden, branch, n);
    rms_norm(hidden, rows, H, layer.post_attention_layernorm, c.rms_norm_eps, normed);
    mlp(layer, normed, rows, ws, branch);
    add_into(hidden, branch, n);
  }

  // Final norm and lm_head on the rows whose logits are wanted, chunk after chunk.
  std::int64_t out_rows = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) out_rows += rows_for(chunks[i]);
  if (out_rows == 0) return;
  float* wanted = grown(ws.wanted, sz(out_rows * H));
  std::int64_t at = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::int64_t r = rows_for(chunks[i]);
    std::copy_n(hidden + (seqs[i].begin + seqs[i].m - r) * H, r * H, wanted + at * H);
    at += r;
  }
  rms_norm(wanted, out_rows, H, weights_.norm, c.rms_norm_eps, wanted);
  ctx_.linear(wanted, out_rows, weights_.lm_head, logits.data());
}

}  // namespace

std::unique_ptr<CausalLM> make_qwen3_5_model(ModelWeights weights, kernels::KernelSet kernel_set,
                                             kernels::Fp4Semantics semantics) {
  return std::make_unique<Qwen3_5Model>(std::move(weights), kernel_set, semantics);
}

}  // namespace fp4serve
