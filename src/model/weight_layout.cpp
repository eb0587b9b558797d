#include "model/weight_layout.h"

#include <string>

#include "util/error.h"

namespace fp4serve {

namespace {

bool is_hybrid(const ModelConfig& c) { return c.arch == Arch::Qwen3Next || c.arch == Arch::Qwen3_5Moe; }

class LayoutBuilder {
 public:
  explicit LayoutBuilder(const ModelConfig& c) : c_(c) {}

  void linear(std::string module, std::int64_t out, std::int64_t in, bool residual_output = false,
              bool release_nvfp4 = false) {
    ParamSpec p{std::move(module), ParamKind::Linear, {out, in}};
    p.residual_output = residual_output;
    p.release_nvfp4 = release_nvfp4;
    out_.push_back(std::move(p));
  }
  // RMSNorm gain; (1 + w) exactly where the architecture uses zero-centred norms.
  void norm(std::string module, std::int64_t dim) { gain(std::move(module), dim, c_.zero_centered_norm); }
  void gain(std::string module, std::int64_t dim, bool zero_centered) {
    ParamSpec p{std::move(module), ParamKind::NormGain, {dim}};
    p.zero_centered = zero_centered;
    out_.push_back(std::move(p));
  }
  void add(std::string module, ParamKind kind, std::vector<std::int64_t> shape) {
    out_.push_back(ParamSpec{std::move(module), kind, std::move(shape)});
  }

  // Qwen3Attention, or the gated attention of the hybrids, whose q_proj emits a query and an
  // output gate per head (2 * head_dim rows each).
  void attention(const std::string& p) {
    const std::int64_t q_width = c_.num_attention_heads * c_.head_dim;
    const std::int64_t kv_width = c_.num_key_value_heads * c_.head_dim;
    const bool dense_release = c_.arch == Arch::Qwen3;
    linear(p + "self_attn.q_proj", c_.attn_output_gate ? 2 * q_width : q_width, c_.hidden_size, false, dense_release);
    linear(p + "self_attn.k_proj", kv_width, c_.hidden_size, false, dense_release);
    linear(p + "self_attn.v_proj", kv_width, c_.hidden_size, false, dense_release);
    linear(p + "self_attn.o_proj", c_.hidden_size, q_width, true, dense_release);
    norm(p + "self_attn.q_norm", c_.head_dim);
    norm(p + "self_attn.k_norm", c_.head_dim);
  }

  // Gated DeltaNet: Qwen3.5's four separate input projections, or Qwen3-Next's two fused ones
  // (per-key-head grouped [q k v z] and [b a]); then the conv, decay parameters, gated norm, output.
  void linear_attention(const std::string& p) {
    const std::int64_t key_dim = c_.linear_num_key_heads * c_.linear_key_head_dim;
    const std::int64_t value_dim = c_.linear_num_value_heads * c_.linear_value_head_dim;
    const std::int64_t conv_dim = 2 * key_dim + value_dim;
    const std::int64_t hv = c_.linear_num_value_heads;
    const std::string la = p + "linear_attn.";
    if (c_.arch == Arch::Qwen3Next) {
      linear(la + "in_proj_qkvz", 2 * key_dim + 2 * value_dim, c_.hidden_size);
      linear(la + "in_proj_ba", 2 * hv, c_.hidden_size);
    } else {
      linear(la + "in_proj_qkv", conv_dim, c_.hidden_size);
      linear(la + "in_proj_z", value_dim, c_.hidden_size);
      linear(la + "in_proj_b", hv, c_.hidden_size);
      linear(la + "in_proj_a", hv, c_.hidden_size);
    }
    add(la + "conv1d", ParamKind::Conv1d, {conv_dim, 1, c_.linear_conv_kernel_dim});
    add(la + "dt_bias", ParamKind::Vector, {hv});
    add(la + "A_log", ParamKind::Vector, {hv});
    gain(la + "norm", c_.linear_value_head_dim, false);
    linear(la + "out_proj", c_.hidden_size, value_dim, true);
  }

  // SwiGLU MLP: down(silu(gate(x)) * up(x)).
  void swiglu(const std::string& p, std::int64_t inner, bool release_nvfp4) {
    linear(p + "gate_proj", inner, c_.hidden_size, false, release_nvfp4);
    linear(p + "up_proj", inner, c_.hidden_size, false, release_nvfp4);
    linear(p + "down_proj", c_.hidden_size, inner, true, release_nvfp4);
  }

  // Router and per-expert SwiGLU experts; the hybrids add a shared expert behind a sigmoid gate.
  void sparse_moe(const std::string& p) {
    linear(p + "mlp.gate", c_.num_experts, c_.hidden_size);
    for (std::int64_t e = 0; e < c_.num_experts; ++e)
      swiglu(p + "mlp.experts." + std::to_string(e) + ".", c_.moe_intermediate_size, true);
    if (c_.shared_expert_intermediate_size > 0) {
      swiglu(p + "mlp.shared_expert.", c_.shared_expert_intermediate_size, false);
      linear(p + "mlp.shared_expert_gate", 1, c_.hidden_size);
    }
  }

  std::vector<ParamSpec> build() {
    const std::string& root = c_.weight_prefix;  // "model." or "model.language_model."
    add(root + "embed_tokens", ParamKind::Embedding, {c_.vocab_size, c_.hidden_size});
    for (std::int64_t layer = 0; layer < c_.num_hidden_layers; ++layer) {
      const std::string p = root + "layers." + std::to_string(layer) + ".";
      norm(p + "input_layernorm", c_.hidden_size);
      if (c_.layer_types.at(static_cast<std::size_t>(layer)) == LayerType::LinearAttention) linear_attention(p);
      else attention(p);
      norm(p + "post_attention_layernorm", c_.hidden_size);
      if (c_.is_moe_layer(layer)) sparse_moe(p);
      else swiglu(p + "mlp.", c_.intermediate_size, c_.arch == Arch::Qwen3);
    }
    norm(root + "norm", c_.hidden_size);
    if (!c_.tie_word_embeddings) linear("lm_head", c_.vocab_size, c_.hidden_size);
    return std::move(out_);
  }

 private:
  const ModelConfig& c_;
  std::vector<ParamSpec> out_;
};

}  // namespace

std::vector<ParamSpec> weight_layout(const ModelConfig& c) {
  if (static_cast<std::int64_t>(c.layer_types.size()) != c.num_hidden_layers)
    fail("weight layout: config has ", c.layer_types.size(), " layer_types for ", c.num_hidden_layers, " layers");
  if (is_hybrid(c) && (c.linear_num_key_heads <= 0 || c.linear_num_value_heads <= 0 || c.linear_key_head_dim <= 0 ||
                       c.linear_value_head_dim <= 0 || c.linear_conv_kernel_dim <= 0))
    fail("weight layout for '", arch_name(c.arch), "': the linear_* (Gated DeltaNet) sizes must be positive");
  if (!is_hybrid(c)) {
    for (LayerType t : c.layer_types)
      if (t == LayerType::LinearAttention)
        fail("weight layout: '", arch_name(c.arch), "' has no linear-attention layers");
  }
  return LayoutBuilder(c).build();
}

}  // namespace fp4serve
