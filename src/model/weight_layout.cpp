#include "model/weight_layout.h"

#include <string>

#include "util/error.h"

namespace fp4serve {

namespace {

void add(std::vector<ParamSpec>& out, std::string module, ParamKind kind, std::vector<std::int64_t> shape,
         bool residual_output = false) {
  out.push_back(ParamSpec{std::move(module), kind, std::move(shape), residual_output});
}

// Qwen3Attention: q/k/v/o projections and per-head q/k RMSNorm over head_dim.
void add_attention(std::vector<ParamSpec>& out, const ModelConfig& c, const std::string& p) {
  const std::int64_t q_width = c.num_attention_heads * c.head_dim;
  const std::int64_t kv_width = c.num_key_value_heads * c.head_dim;
  add(out, p + "self_attn.q_proj", ParamKind::Linear, {q_width, c.hidden_size});
  add(out, p + "self_attn.k_proj", ParamKind::Linear, {kv_width, c.hidden_size});
  add(out, p + "self_attn.v_proj", ParamKind::Linear, {kv_width, c.hidden_size});
  add(out, p + "self_attn.o_proj", ParamKind::Linear, {c.hidden_size, q_width}, true);
  add(out, p + "self_attn.q_norm", ParamKind::NormGain, {c.head_dim});
  add(out, p + "self_attn.k_norm", ParamKind::NormGain, {c.head_dim});
}

// SwiGLU MLP: down(silu(gate(x)) * up(x)).
void add_swiglu(std::vector<ParamSpec>& out, const std::string& p, std::int64_t hidden, std::int64_t inner) {
  add(out, p + "gate_proj", ParamKind::Linear, {inner, hidden});
  add(out, p + "up_proj", ParamKind::Linear, {inner, hidden});
  add(out, p + "down_proj", ParamKind::Linear, {hidden, inner}, true);
}

}  // namespace

std::vector<ParamSpec> weight_layout(const ModelConfig& c) {
  if (c.arch != Arch::Qwen3 && c.arch != Arch::Qwen3Moe)
    fail("weight layout for architecture '", arch_name(c.arch), "' is not implemented yet (qwen3, qwen3_moe are)");
  std::vector<ParamSpec> out;
  const std::string& root = c.weight_prefix;  // "model."
  add(out, root + "embed_tokens", ParamKind::Embedding, {c.vocab_size, c.hidden_size});
  for (std::int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = root + "layers." + std::to_string(layer) + ".";
    add(out, p + "input_layernorm", ParamKind::NormGain, {c.hidden_size});
    add_attention(out, c, p);
    add(out, p + "post_attention_layernorm", ParamKind::NormGain, {c.hidden_size});
    if (c.is_moe_layer(layer)) {
      add(out, p + "mlp.gate", ParamKind::Linear, {c.num_experts, c.hidden_size});
      for (std::int64_t e = 0; e < c.num_experts; ++e)
        add_swiglu(out, p + "mlp.experts." + std::to_string(e) + ".", c.hidden_size, c.moe_intermediate_size);
    } else {
      add_swiglu(out, p + "mlp.", c.hidden_size, c.intermediate_size);
    }
  }
  add(out, root + "norm", ParamKind::NormGain, {c.hidden_size});
  if (!c.tie_word_embeddings) add(out, "lm_head", ParamKind::Linear, {c.vocab_size, c.hidden_size});
  return out;
}

}  // namespace fp4serve
