#include "kernels/model_shapes.h"

#include <algorithm>
#include <string_view>

namespace fp4serve::kernels {

namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

void add_gemm(ShapeSet& set, SchemeKind kind, DType dtype, std::int64_t n, std::int64_t k, const std::string& example) {
  std::vector<GemmShape>& list = kind == SchemeKind::NVFP4 ? set.fp4 : set.dense;
  const std::int64_t vn = validation_n(n);
  for (const GemmShape& s : list)
    if (s.kind == kind && s.dtype == dtype && s.n == vn && s.k == k) return;
  list.push_back(GemmShape{kind, dtype, vn, k, n, example});
}

void sort_shapes(std::vector<GemmShape>& v) {
  std::sort(v.begin(), v.end(), [](const GemmShape& a, const GemmShape& b) {
    return std::tie(a.kind, a.dtype, a.n, a.k) < std::tie(b.kind, b.dtype, b.n, b.k);
  });
}

bool runs_in_text_model(std::string_view name, bool tied) {
  if (contains(name, "visual") || contains(name, "vision") || contains(name, "mtp")) return false;
  if (contains(name, "embed_tokens")) return tied;  // a lookup, unless it doubles as the LM head
  return true;
}

void from_config(const ModelConfig& c, ShapeSet& set) {
  const std::int64_t H = c.hidden_size, D = c.head_dim;
  const auto fp4 = SchemeKind::NVFP4;
  add_gemm(set, fp4, DType::U8, c.num_attention_heads * D, H, "q_proj");
  add_gemm(set, fp4, DType::U8, c.num_key_value_heads * D, H, "k_proj");
  add_gemm(set, fp4, DType::U8, H, c.num_attention_heads * D, "o_proj");
  if (c.is_moe()) {
    add_gemm(set, fp4, DType::U8, c.moe_intermediate_size, H, "experts.gate_proj");
    add_gemm(set, fp4, DType::U8, H, c.moe_intermediate_size, "experts.down_proj");
    add_gemm(set, SchemeKind::Dense, DType::BF16, c.num_experts, H, "mlp.gate");
  }
  bool dense_mlp = !c.is_moe();
  for (std::int64_t l = 0; l < c.num_hidden_layers && !dense_mlp; ++l) dense_mlp = !c.is_moe_layer(l);
  if (dense_mlp && c.intermediate_size > 0) {
    add_gemm(set, fp4, DType::U8, c.intermediate_size, H, "mlp.gate_proj");
    add_gemm(set, fp4, DType::U8, H, c.intermediate_size, "mlp.down_proj");
  }
  add_gemm(set, SchemeKind::Dense, DType::BF16, c.vocab_size, H, "lm_head");
}

}  // namespace

std::int64_t validation_n(std::int64_t n) {
  return n > kValidationCapAbove ? kValidationCappedN + n % 256 : n;
}

ShapeSet shapes_for_model(const ModelConfig& config, const ResolvedQuantization& q, Fp4Semantics semantics) {
  ShapeSet set;
  set.source = "model " + std::string(arch_name(config.arch)) + " hidden " + std::to_string(config.hidden_size);
  set.semantics = semantics;
  MoeShape moe;
  bool have_expert = false, have_router = false;
  std::size_t fp4_modules = 0, fp4_calibrated = 0;
  if (q.modules.empty()) {
    from_config(config, set);
  } else {
    for (const LinearModule& m : q.modules) {
      if (!runs_in_text_model(m.name, config.tie_word_embeddings)) continue;
      add_gemm(set, m.scheme.kind, m.scheme.storage, m.out_features, m.in_features, m.name);
      if (m.scheme.kind == SchemeKind::NVFP4) {
        ++fp4_modules;
        if (m.scheme.activations_quantized) ++fp4_calibrated;
      }
      if (!have_expert && contains(m.name, ".experts")) {
        moe.expert_kind = m.scheme.kind;
        moe.expert_dtype = m.scheme.storage;
        have_expert = true;
      }
      if (!have_router && ends_with(m.name, ".mlp.gate")) {
        moe.router_kind = m.scheme.kind;
        moe.router_dtype = m.scheme.storage;
        have_router = true;
      }
    }
  }
  set.fp4_activations_calibrated = fp4_modules > 0 && fp4_calibrated == fp4_modules;
  sort_shapes(set.dense);
  sort_shapes(set.fp4);
  if (config.is_moe()) {
    moe.hidden = config.hidden_size;
    moe.intermediate = config.moe_intermediate_size;
    moe.experts = config.num_experts;
    moe.top_k = config.num_experts_per_tok;
    moe.norm_topk_prob = config.norm_topk_prob;
    set.moe.push_back(moe);
  }
  const bool full_attention = std::any_of(config.layer_types.begin(), config.layer_types.end(),
                                          [](LayerType t) { return t == LayerType::FullAttention; }) ||
                              config.layer_types.empty();
  if (full_attention && config.num_attention_heads > 0)
    set.attention.push_back({config.num_attention_heads, config.num_key_value_heads, config.head_dim});
  if (std::any_of(config.layer_types.begin(), config.layer_types.end(),
                  [](LayerType t) { return t == LayerType::LinearAttention; })) {
    const std::int64_t key = config.linear_num_key_heads * config.linear_key_head_dim;
    set.linear_attention.push_back({2 * key + config.linear_num_value_heads * config.linear_value_head_dim,
                                    config.linear_conv_kernel_dim, config.linear_num_key_heads,
                                    config.linear_num_value_heads, config.linear_key_head_dim,
                                    config.linear_value_head_dim});
  }
  return set;
}

ShapeSet builtin_shapes() {
  ShapeSet set;
  set.source = "built-in shapes";
  auto gemm = [](SchemeKind kind, DType dtype, std::int64_t n, std::int64_t k, const char* what) {
    return GemmShape{kind, dtype, n, k, n, what};
  };
  set.fp4 = {gemm(SchemeKind::NVFP4, DType::U8, 256, 512, "even K"), gemm(SchemeKind::NVFP4, DType::U8, 77, 272, "K % 32 == 16, odd N")};
  set.dense = {gemm(SchemeKind::Dense, DType::BF16, 96, 512, "bf16"), gemm(SchemeKind::Dense, DType::BF16, 37, 200, "bf16 K tail"),
               gemm(SchemeKind::Dense, DType::F16, 40, 128, "f16"), gemm(SchemeKind::Dense, DType::F32, 24, 96, "f32"),
               gemm(SchemeKind::FP8, DType::F8_E4M3, 48, 256, "fp8")};
  MoeShape moe;
  moe.hidden = 256;
  moe.intermediate = 128;
  moe.experts = 16;
  moe.top_k = 4;
  moe.norm_topk_prob = true;
  set.moe = {moe};
  set.attention = {{8, 2, 64}, {4, 4, 128}};
  // 2 key heads serving 4 value heads, dk != dv, 20 channels (not a multiple of 8 or 16).
  set.linear_attention = {{2 * 2 * 16 + 4 * 8, 4, 2, 4, 16, 8}, {2 * 8 + 2 * 2, 4, 1, 2, 8, 2}};
  return set;
}

}  // namespace fp4serve::kernels
