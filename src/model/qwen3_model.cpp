// Mirrors transformers/models/qwen3_moe/modeling_qwen3_moe.py (Qwen3MoeForCausalLM) and, for
// layers without experts, modeling_qwen3.py. Class names in comments point at the Python.
#include "model/qwen3_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "kernels/weight_rows.h"
#include "model/elementwise.h"
#include "model/kv_cache_rows.h"
#include "model/rms_norm.h"
#include "util/error.h"

namespace fp4serve {

namespace {

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

}  // namespace

// Scratch buffers for one forward call. They only grow (resize within capacity does not
// allocate), so once a workspace has seen the largest batch, later calls allocate nothing.
struct Qwen3Model::Workspace {
  std::vector<float> hidden, normed, branch;  // [rows, hidden]
  std::vector<float> q, k, v, attn;           // attention projections
  std::vector<float> gate, up;                // dense MLP
  std::vector<float> cos, sin;                // [rows, rotary_dim / 2]
  std::vector<std::int64_t> first_row;        // chunk c's rows are [first_row[c], first_row[c + 1])
  std::vector<std::int64_t> logit_rows;       // rows that get logits, in output order
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

Qwen3Model::~Qwen3Model() = default;

StateSpec Qwen3Model::state_spec() const {
  StateSpec spec;
  spec.attention_layers = config().num_hidden_layers;
  spec.kv_row_elements = config().num_key_value_heads * config().head_dim;
  spec.kv_dtype = kv_cache_dtype();
  return spec;
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
// RoPE), RoPE, cache update, causal GQA attention with scaling head_dim^-0.5, o_proj. The
// projections run over the rows of every chunk; the cache writes and attention per chunk.
void Qwen3Model::attention(const DecoderLayerWeights& layer, std::int64_t layer_index,
                           std::span<const SequenceChunk> chunks, Workspace& s, float* out) const {
  const ModelConfig& c = config();
  const AttentionWeights& a = layer.self_attn;
  const std::int64_t D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const std::int64_t row_floats = Hkv * D;
  const std::int64_t half = rope_.rotary_dim() / 2;
  const std::int64_t rows = s.first_row.back();
  s.q.resize(sz(rows * Hq * D));
  s.k.resize(sz(rows * row_floats));
  s.v.resize(sz(rows * row_floats));
  s.attn.resize(sz(rows * Hq * D));
  const float* x = s.normed.data();
  linear(x, rows, a.q_proj, s.q.data());
  linear(x, rows, a.k_proj, s.k.data());
  linear(x, rows, a.v_proj, s.v.data());
  // q_norm / k_norm: RMSNorm with one [head_dim] gain shared by every head.
  rms_norm(s.q.data(), rows * Hq, D, a.q_norm, c.rms_norm_eps, s.q.data());
  rms_norm(s.k.data(), rows * Hkv, D, a.k_norm, c.rms_norm_eps, s.k.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* cos = s.cos.data() + r * half;
    const float* sin = s.sin.data() + r * half;
    rope_.apply(s.q.data() + r * Hq * D, Hq, D, cos, sin);
    rope_.apply(s.k.data() + r * row_floats, Hkv, D, cos, sin);
  }

  kernels::AttentionArgs args;
  args.num_heads = Hq;
  args.num_kv_heads = Hkv;
  args.head_dim = D;
  args.scale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));  // self.head_dim**-0.5
  for (std::size_t ci = 0; ci < chunks.size(); ++ci) {
    const SequenceState& st = *chunks[ci].state;
    const std::int64_t r0 = s.first_row[ci], m = s.first_row[ci + 1] - r0;
    // The new keys and values go to their positions' slots in the sequence's blocks.
    store_new_kv(st, layer_index, row_floats, D, m, s.k.data() + r0 * row_floats, s.v.data() + r0 * row_floats);
    args.q = s.q.data() + r0 * Hq * D;
    args.out = s.attn.data() + r0 * Hq * D;
    point_attention_at_kv(st, layer_index, row_floats, m, args);
    kernels_.attention->run(args);
  }
  linear(s.attn.data(), rows, a.o_proj, out);
}

// Qwen3MoeMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)) with act_fn = SiLU.
void Qwen3Model::dense_mlp(const MlpWeights& mlp, std::int64_t rows, Workspace& s, float* out) const {
  const std::int64_t inner = mlp.gate_proj.n;
  s.gate.resize(sz(rows * inner));
  s.up.resize(sz(rows * inner));
  linear(s.normed.data(), rows, mlp.gate_proj, s.gate.data());
  linear(s.normed.data(), rows, mlp.up_proj, s.up.data());
  for (std::size_t i = 0; i < sz(rows * inner); ++i) s.gate[i] = silu(s.gate[i]) * s.up[i];
  linear(s.gate.data(), rows, mlp.down_proj, out);
}

std::int64_t Qwen3Model::validate(std::span<const SequenceChunk> chunks, std::size_t logits_size) const {
  const std::int64_t V = config().vocab_size;
  if (chunks.empty()) fail("forward: no chunks given");
  std::int64_t logit_rows = 0;
  for (std::size_t ci = 0; ci < chunks.size(); ++ci) {
    const SequenceChunk& ch = chunks[ci];
    const auto m = static_cast<std::int64_t>(ch.tokens.size());
    if (m == 0) fail("forward: chunk ", ci, " has no tokens");
    if (!ch.state) fail("forward: chunk ", ci, " has no sequence state");
    const SequenceState& st = *ch.state;
    if (st.past < 0) fail("forward: chunk ", ci, ": past is ", st.past);
    if (st.block_tokens <= 0) fail("forward: chunk ", ci, ": block_tokens is ", st.block_tokens);
    check_kv_dtype(st, ci);
    const auto blocks = static_cast<std::int64_t>(st.kv_blocks.size());
    if (st.past + m > blocks * st.block_tokens) {
      fail("forward: chunk ", ci, ": ", m, " new tokens after ", st.past, " cached ones need ",
           (st.past + m + st.block_tokens - 1) / st.block_tokens, " KV blocks of ", st.block_tokens,
           " tokens, the state has ", blocks);
    }
    for (std::int64_t b = 0; b < (st.past + m + st.block_tokens - 1) / st.block_tokens; ++b)
      if (!st.kv_blocks[sz(b)]) fail("forward: chunk ", ci, ": KV block ", b, " is null");
    for (std::int64_t t = 0; t < m; ++t) {
      const std::int32_t id = ch.tokens[sz(t)];
      if (id < 0 || id >= V)
        fail("forward: chunk ", ci, ": token id ", id, " at position ", st.past + t, " is outside the vocabulary [0, ",
             V, ")");
    }
    for (std::size_t cj = 0; cj < ci; ++cj)
      if (chunks[cj].state == ch.state) fail("forward: chunks ", cj, " and ", ci, " belong to the same sequence");
    logit_rows += ch.logits == LogitsFor::AllPositions ? m : ch.logits == LogitsFor::LastPosition ? 1 : 0;
  }
  if (logits_size != sz(logit_rows * V)) {
    fail("forward: the logits buffer holds ", logits_size, " floats, expected ", logit_rows, " x ", V);
  }
  return logit_rows;
}

// Qwen3MoeForCausalLM.forward -> Qwen3MoeModel.forward, over the rows of every chunk.
void Qwen3Model::forward(std::span<const SequenceChunk> chunks, std::span<float> logits) const {
  const ModelConfig& c = config();
  const std::int64_t H = c.hidden_size;
  const std::int64_t out_rows = validate(chunks, logits.size());

  const WorkspacePool<Workspace>::Lease lease(workspaces_);
  Workspace& s = *lease;
  s.first_row.resize(chunks.size() + 1);
  s.first_row[0] = 0;
  for (std::size_t ci = 0; ci < chunks.size(); ++ci)
    s.first_row[ci + 1] = s.first_row[ci] + static_cast<std::int64_t>(chunks[ci].tokens.size());
  const std::int64_t rows = s.first_row.back();
  s.hidden.resize(sz(rows * H));
  s.normed.resize(sz(rows * H));
  s.branch.resize(sz(rows * H));

  // embed_tokens, then Qwen3MoeRotaryEmbedding: cos/sin for each row's own position, shared by
  // every layer.
  const std::int64_t half = rope_.rotary_dim() / 2;
  s.cos.resize(sz(rows * half));
  s.sin.resize(sz(rows * half));
  s.logit_rows.clear();
  for (std::size_t ci = 0; ci < chunks.size(); ++ci) {
    const SequenceChunk& ch = chunks[ci];
    const std::int64_t r0 = s.first_row[ci], m = s.first_row[ci + 1] - r0;
    for (std::int64_t t = 0; t < m; ++t) {
      const std::int64_t r = r0 + t;
      kernels::dequantize_row(weights_.embed_tokens, ch.tokens[sz(t)], s.hidden.data() + r * H);
      rope_.cos_sin(ch.state->past + t, s.cos.data() + r * half, s.sin.data() + r * half);
      if (ch.logits == LogitsFor::AllPositions || (ch.logits == LogitsFor::LastPosition && t == m - 1))
        s.logit_rows.push_back(r);
    }
  }

  // Qwen3MoeDecoderLayer.forward, pre-norm residual blocks.
  const std::size_t n = sz(rows * H);
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const DecoderLayerWeights& layer = weights_.layers[sz(i)];
    rms_norm(s.hidden.data(), rows, H, layer.input_layernorm, c.rms_norm_eps, s.normed.data());
    attention(layer, i, chunks, s, s.branch.data());
    add_into(s.hidden.data(), s.branch.data(), n);

    rms_norm(s.hidden.data(), rows, H, layer.post_attention_layernorm, c.rms_norm_eps, s.normed.data());
    if (layer.sparse_moe) {
      // Qwen3MoeSparseMoeBlock: router softmax (fp32), top-k, optional renormalisation, experts.
      kernels_.moe->run(s.normed.data(), rows, layer.moe, s.branch.data(), semantics_);
    } else {
      dense_mlp(layer.mlp, rows, s, s.branch.data());
    }
    add_into(s.hidden.data(), s.branch.data(), n);
  }

  // Final norm and lm_head, only on the rows whose logits are wanted.
  if (out_rows == 0) return;
  for (std::int64_t j = 0; j < out_rows; ++j)
    std::memcpy(s.normed.data() + j * H, s.hidden.data() + s.logit_rows[sz(j)] * H, sz(H) * sizeof(float));
  rms_norm(s.normed.data(), out_rows, H, weights_.norm, c.rms_norm_eps, s.normed.data());
  linear(s.normed.data(), out_rows, weights_.lm_head, logits.data());
}

}  // namespace fp4serve
