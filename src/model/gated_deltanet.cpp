// Mirrors Qwen3_5MoeGatedDeltaNet.forward (transformers/models/qwen3_5_moe/modeling_qwen3_5_moe.py)
// and Qwen3NextGatedDeltaNet.fix_query_key_value_ordering for the Qwen3-Next layout.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/hybrid_layers.h"
#include "model/hybrid_ops.h"
#include "model/workspace_pool.h"
#include "util/error.h"

namespace fp4serve::hybrid {

namespace {

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

struct Dims {
  std::int64_t Hk, Hv, dk, dv, r, key_dim, value_dim, conv_dim, K;
  explicit Dims(const ModelConfig& c)
      : Hk(c.linear_num_key_heads),
        Hv(c.linear_num_value_heads),
        dk(c.linear_key_head_dim),
        dv(c.linear_value_head_dim),
        r(Hv / Hk),
        key_dim(Hk * dk),
        value_dim(Hv * dv),
        conv_dim(2 * key_dim + value_dim),
        K(c.linear_conv_kernel_dim) {}
};

// Qwen3-Next: in_proj_qkvz rows are grouped per key head g as [q_g (dk) | k_g (dk) | v_g (r*dv) |
// z_g (r*dv)] and in_proj_ba as [b_g (r) | a_g (r)]; value head g*r + j. Reorders one row into the
// Qwen3.5 order: qkv = [q (all heads) | k | v], z, b, a.
void ungroup_row(const Dims& d, const float* qkvz, const float* ba, float* qkv, float* z, float* b, float* a) {
  const std::int64_t group = 2 * d.dk + 2 * d.r * d.dv;
  for (std::int64_t g = 0; g < d.Hk; ++g) {
    const float* src = qkvz + g * group;
    std::memcpy(qkv + g * d.dk, src, sz(d.dk) * sizeof(float));
    std::memcpy(qkv + d.key_dim + g * d.dk, src + d.dk, sz(d.dk) * sizeof(float));
    std::memcpy(qkv + 2 * d.key_dim + g * d.r * d.dv, src + 2 * d.dk, sz(d.r * d.dv) * sizeof(float));
    std::memcpy(z + g * d.r * d.dv, src + 2 * d.dk + d.r * d.dv, sz(d.r * d.dv) * sizeof(float));
    std::memcpy(b + g * d.r, ba + g * 2 * d.r, sz(d.r) * sizeof(float));
    std::memcpy(a + g * d.r, ba + g * 2 * d.r + d.r, sz(d.r) * sizeof(float));
  }
}

}  // namespace

void gated_deltanet(const Context& ctx, const LinearAttentionWeights& w, std::int64_t linear_index, const float* x,
                    std::span<const SequenceRows> seqs, std::int64_t rows, LayerWorkspace& ws, float* out) {
  const ModelConfig& c = *ctx.config;
  const Dims d(c);
  float* qkv = grown(ws.qkv, sz(rows * d.conv_dim));
  float* z = grown(ws.z, sz(rows * d.value_dim));
  float* b = grown(ws.b, sz(rows * d.Hv));
  float* a = grown(ws.a, sz(rows * d.Hv));
  if (w.layout == LinearAttnLayout::Split) {
    ctx.linear(x, rows, w.in_proj_qkv, qkv);
    ctx.linear(x, rows, w.in_proj_z, z);
    ctx.linear(x, rows, w.in_proj_b, b);
    ctx.linear(x, rows, w.in_proj_a, a);
  } else {
    float* qkvz = grown(ws.qkvz, sz(rows * (d.conv_dim + d.value_dim)));
    float* ba = grown(ws.ba, sz(rows * 2 * d.Hv));
    ctx.linear(x, rows, w.in_proj_qkvz, qkvz);
    ctx.linear(x, rows, w.in_proj_ba, ba);
    for (std::int64_t t = 0; t < rows; ++t)
      ungroup_row(d, qkvz + t * (d.conv_dim + d.value_dim), ba + t * 2 * d.Hv, qkv + t * d.conv_dim,
                  z + t * d.value_dim, b + t * d.Hv, a + t * d.Hv);
  }

  // beta = b.sigmoid(); g = -A_log.float().exp() * softplus(a.float() + dt_bias). In place: b
  // becomes beta and a becomes g.
  for (std::int64_t t = 0; t < rows; ++t) {
    for (std::int64_t h = 0; h < d.Hv; ++h) {
      float& bt = b[t * d.Hv + h];
      float& at = a[t * d.Hv + h];
      bt = sigmoid(bt);
      at = -std::exp(w.A_log[sz(h)]) * softplus(at + w.dt_bias[sz(h)]);
    }
  }

  // Per sequence: conv1d + SiLU with its conv state, l2norm of q and k, the delta rule with its
  // recurrent state.
  float* core = grown(ws.core, sz(rows * d.value_dim));
  const float q_scale = static_cast<float>(std::pow(static_cast<double>(d.dk), -0.5));
  for (const SequenceRows& s : seqs) {
    const std::int64_t m = s.m;
    float* conv = grown(ws.conv, sz(m * d.conv_dim));
    kernels::Conv1dArgs ca;
    ca.x = qkv + s.begin * d.conv_dim;
    ca.out = conv;
    ca.state = s.state->conv_state[sz(linear_index)];
    ca.weight = w.conv1d.data();
    ca.m = m;
    ca.channels = d.conv_dim;
    ca.kernel = d.K;
    ctx.kernels.conv1d->run(ca);

    float* q = grown(ws.lq, sz(m * d.key_dim));
    float* k = grown(ws.lk, sz(m * d.key_dim));
    float* v = grown(ws.lv, sz(m * d.value_dim));
    for (std::int64_t t = 0; t < m; ++t) {
      const float* row = conv + t * d.conv_dim;
      std::memcpy(q + t * d.key_dim, row, sz(d.key_dim) * sizeof(float));
      std::memcpy(k + t * d.key_dim, row + d.key_dim, sz(d.key_dim) * sizeof(float));
      std::memcpy(v + t * d.value_dim, row + 2 * d.key_dim, sz(d.value_dim) * sizeof(float));
    }
    l2norm_rows(q, m * d.Hk, d.dk, q_scale);  // query * head_k_dim ** -0.5, after the l2norm
    l2norm_rows(k, m * d.Hk, d.dk, 1.0f);

    kernels::DeltaRuleArgs da;
    da.q = q;
    da.k = k;
    da.v = v;
    da.g = a + s.begin * d.Hv;
    da.beta = b + s.begin * d.Hv;
    da.state = s.state->recurrent_state[sz(linear_index)];
    da.out = core + s.begin * d.value_dim;
    da.m = m;
    da.num_k_heads = d.Hk;
    da.num_v_heads = d.Hv;
    da.dk = d.dk;
    da.dv = d.dv;
    ctx.kernels.delta_rule->run(da);
  }

  // Qwen3_5MoeRMSNormGated per value head with z as the gate, then out_proj.
  gated_rms_norm(core, z, rows * d.Hv, d.dv, w.norm, c.rms_norm_eps);
  ctx.linear(core, rows, w.out_proj, out);
}

}  // namespace fp4serve::hybrid
