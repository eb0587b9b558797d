// Mirrors Qwen3_5MoeAttention.forward / Qwen3NextAttention.forward.
#include <cmath>
#include <cstring>

#include "model/hybrid_layers.h"
#include "model/hybrid_ops.h"
#include "model/kv_cache_rows.h"
#include "model/rms_norm.h"
#include "model/workspace_pool.h"

namespace fp4serve::hybrid {

namespace {
std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }
}  // namespace

void Context::linear(const float* x, std::int64_t m, const kernels::WeightMatrix& w, float* y) const {
  const kernels::GemmKernel* gemm = w.kind == SchemeKind::NVFP4 ? kernels.fp4_gemm : kernels.dense_gemm;
  gemm->run(x, m, w, y, semantics);
}

void gated_attention(const Context& ctx, const AttentionWeights& w, std::int64_t attention_index,
                     const RotaryEmbedding& rope, const float* cos, const float* sin, const float* x,
                     std::span<const SequenceRows> seqs, std::int64_t rows, LayerWorkspace& ws, float* out) {
  const ModelConfig& c = *ctx.config;
  const std::int64_t D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const std::int64_t half = rope.rotary_dim() / 2, kv_row = Hkv * D;
  const bool gated = c.attn_output_gate;

  // q_proj(x).view(..., heads, 2 * head_dim) then chunk(2): per head [query (D) | gate (D)].
  const std::size_t q_size = sz(rows * Hq * D);
  float* q = grown(ws.q, q_size);
  float* gate = gated ? grown(ws.gate, q_size) : nullptr;
  float* k = grown(ws.k, sz(rows * kv_row));
  float* v = grown(ws.v, sz(rows * kv_row));
  float* attn = grown(ws.attn, q_size);
  if (gated) {
    float* qg = grown(ws.qg, 2 * q_size);
    ctx.linear(x, rows, w.q_proj, qg);
    for (std::int64_t t = 0; t < rows; ++t)
      for (std::int64_t h = 0; h < Hq; ++h) {
        const float* src = qg + (t * Hq + h) * 2 * D;
        std::memcpy(q + (t * Hq + h) * D, src, sz(D) * sizeof(float));
        std::memcpy(gate + (t * Hq + h) * D, src + D, sz(D) * sizeof(float));
      }
  } else {
    ctx.linear(x, rows, w.q_proj, q);
  }
  ctx.linear(x, rows, w.k_proj, k);
  ctx.linear(x, rows, w.v_proj, v);
  rms_norm(q, rows * Hq, D, w.q_norm, c.rms_norm_eps, q);
  rms_norm(k, rows * Hkv, D, w.k_norm, c.rms_norm_eps, k);
  for (std::int64_t t = 0; t < rows; ++t) {
    rope.apply(q + t * Hq * D, Hq, D, cos + t * half, sin + t * half);
    rope.apply(k + t * kv_row, Hkv, D, cos + t * half, sin + t * half);
  }

  // Per sequence: write the new keys and values into its paged cache, then attend.
  for (const SequenceRows& s : seqs) {
    const SequenceState& st = *s.state;
    store_new_kv(st, attention_index, kv_row, D, s.m, k + s.begin * kv_row, v + s.begin * kv_row);
    kernels::AttentionArgs args;
    args.q = q + s.begin * Hq * D;
    args.out = attn + s.begin * Hq * D;
    point_attention_at_kv(st, attention_index, kv_row, s.m, args);
    args.num_heads = Hq;
    args.num_kv_heads = Hkv;
    args.head_dim = D;
    args.scale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));  // self.head_dim**-0.5
    ctx.kernels.attention->run(args);
  }

  // attn_output * torch.sigmoid(gate), then o_proj.
  if (gated)
    for (std::size_t i = 0; i < q_size; ++i) attn[i] *= sigmoid(gate[i]);
  ctx.linear(attn, rows, w.o_proj, out);
}

}  // namespace fp4serve::hybrid
