#include "synth/presets.h"

#include "util/error.h"

namespace fp4serve::synth {

namespace {

// synth ships the Qwen3 tokenizer (151669 ids, padded to 151936 like the Qwen3 releases), so
// every preset uses its special-token ids; the Qwen3.5 preset keeps its real 248320-row vocab.
constexpr std::int64_t kQwen3Vocab = 151936;
constexpr std::int64_t kQwen3TokenizerIds = 151669;  // 151643 BPE tokens + 26 added tokens
constexpr std::int64_t kQwen3_5Vocab = 248320;
constexpr std::int64_t kDefaultInterval = 4;

bool hybrid(Arch arch) { return arch == Arch::Qwen3Next || arch == Arch::Qwen3_5Moe; }

ModelConfig qwen3_base() {
  ModelConfig c;
  c.arch = Arch::Qwen3;
  c.model_type = "qwen3";
  c.weight_prefix = "model.";
  c.vocab_size = kQwen3Vocab;
  c.max_position_embeddings = 40960;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645, 151643};
  return c;
}

ModelConfig qwen3_moe_base() {
  ModelConfig c = qwen3_base();
  c.arch = Arch::Qwen3Moe;
  c.model_type = "qwen3_moe";
  c.norm_topk_prob = true;
  c.decoder_sparse_step = 1;
  return c;
}

// What Qwen3-Next and Qwen3.5-MoE share: gated attention with partial rope, zero-centred norms,
// Gated DeltaNet layers, MoE with a shared expert, top-k renormalised.
ModelConfig hybrid_base(Arch arch) {
  ModelConfig c = qwen3_base();
  c.arch = arch;
  c.model_type = std::string(arch_name(arch));
  // Qwen3.5 nests the text model under text_config, whose tensors live under model.language_model.
  c.weight_prefix = arch == Arch::Qwen3_5Moe ? "model.language_model." : "model.";
  c.max_position_embeddings = 262144;
  c.rope_theta = 10000000.0;
  c.partial_rotary_factor = 0.25;
  c.attn_output_gate = true;
  c.zero_centered_norm = true;
  c.norm_topk_prob = true;
  c.decoder_sparse_step = 1;
  c.linear_conv_kernel_dim = 4;
  return c;
}

void set_attention(ModelConfig& c, std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t kv,
                   std::int64_t head_dim) {
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv;
  c.head_dim = head_dim;
}

void set_moe(ModelConfig& c, std::int64_t experts, std::int64_t top_k, std::int64_t moe_inter) {
  c.num_experts = experts;
  c.num_experts_per_tok = top_k;
  c.moe_intermediate_size = moe_inter;
}

void set_linear_attention(ModelConfig& c, std::int64_t key_heads, std::int64_t value_heads, std::int64_t key_dim,
                          std::int64_t value_dim) {
  c.linear_num_key_heads = key_heads;
  c.linear_num_value_heads = value_heads;
  c.linear_key_head_dim = key_dim;
  c.linear_value_head_dim = value_dim;
}

void set_layer_types(ModelConfig& c, std::int64_t interval) {
  if (hybrid(c.arch)) c.layer_types = hybrid_layer_types(c.num_hidden_layers, interval);
  else c.layer_types.assign(static_cast<std::size_t>(c.num_hidden_layers), LayerType::FullAttention);
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

[[noreturn]] void unknown_preset(Arch arch, std::string_view preset) {
  fail("--preset ", preset, ": unknown for ", arch_name(arch), "; choose one of ", joined(preset_names(arch)));
}

}  // namespace

std::vector<LayerType> hybrid_layer_types(std::int64_t layers, std::int64_t interval) {
  std::vector<LayerType> out;
  for (std::int64_t i = 0; i < layers; ++i)
    out.push_back((i + 1) % interval == 0 ? LayerType::FullAttention : LayerType::LinearAttention);
  return out;
}

std::int64_t full_attention_interval(const ModelConfig& c) {
  std::int64_t first_full = 0;
  while (first_full < c.num_hidden_layers && c.layer_types[static_cast<std::size_t>(first_full)] != LayerType::FullAttention)
    ++first_full;
  // No full-attention layer at all is what an interval beyond the layer count gives.
  const std::int64_t interval = first_full + 1;
  return hybrid_layer_types(c.num_hidden_layers, interval) == c.layer_types ? interval : 0;
}

Arch arch_from_name(std::string_view name) {
  for (Arch arch : {Arch::Qwen3, Arch::Qwen3Moe, Arch::Qwen3Next, Arch::Qwen3_5Moe})
    if (name == arch_name(arch)) return arch;
  fail("--arch ", name, ": unknown architecture; supported: qwen3, qwen3_moe, qwen3_next, qwen3_5_moe");
}

std::vector<std::string> preset_names(Arch arch) {
  switch (arch) {
    case Arch::Qwen3: return {"tiny", "0.6b", "8b"};
    case Arch::Qwen3Moe: return {"tiny", "small", "30b-a3b", "235b-a22b"};
    case Arch::Qwen3Next: return {"tiny", "80b-a3b"};
    case Arch::Qwen3_5Moe: return {"tiny", "397b-a17b"};
  }
  return {};
}

ModelConfig preset_config(Arch arch, std::string_view preset) {
  ModelConfig c;
  if (arch == Arch::Qwen3) {
    c = qwen3_base();
    if (preset == "tiny") {
      set_attention(c, 64, 2, 4, 2, 16);
      c.intermediate_size = 128;
      c.max_position_embeddings = 4096;
    } else if (preset == "0.6b") {  // Qwen3-0.6B: tied embeddings
      set_attention(c, 1024, 28, 16, 8, 128);
      c.intermediate_size = 3072;
      c.tie_word_embeddings = true;
    } else if (preset == "8b") {  // Qwen3-8B
      set_attention(c, 4096, 36, 32, 8, 128);
      c.intermediate_size = 12288;
    } else {
      unknown_preset(arch, preset);
    }
  } else if (arch == Arch::Qwen3Moe) {
    c = qwen3_moe_base();
    if (preset == "tiny") {
      set_attention(c, 64, 2, 4, 2, 16);
      set_moe(c, 8, 2, 32);
      c.intermediate_size = 128;
      c.max_position_embeddings = 4096;
    } else if (preset == "small") {  // a few hundred MB: benchmarks that fit any machine
      set_attention(c, 1024, 8, 16, 4, 64);
      set_moe(c, 32, 4, 384);
      c.intermediate_size = 3072;
      c.max_position_embeddings = 32768;
    } else if (preset == "30b-a3b") {  // Qwen3-30B-A3B
      set_attention(c, 2048, 48, 32, 4, 128);
      set_moe(c, 128, 8, 768);
      c.intermediate_size = 6144;
    } else if (preset == "235b-a22b") {  // Qwen3-235B-A22B
      set_attention(c, 4096, 94, 64, 4, 128);
      set_moe(c, 128, 8, 1536);
      c.intermediate_size = 12288;
    } else {
      unknown_preset(arch, preset);
    }
  } else {
    c = hybrid_base(arch);
    // tiny: layers 0-2 Gated DeltaNet, layer 3 full attention; head_dim 32 with 0.25 partial rope
    // (8 rotary dims); every width a multiple of 16 so any Linear can be NVFP4. The vocabulary is
    // exactly the shipped tokenizer's ids, so a random model never samples an id it cannot print.
    if (preset == "tiny") {
      c.vocab_size = kQwen3TokenizerIds;
      set_attention(c, 64, 4, 4, 2, 32);
      set_moe(c, 8, 2, 32);
      set_linear_attention(c, 2, 4, 16, 16);
      c.shared_expert_intermediate_size = 32;
      c.max_position_embeddings = 4096;
      if (arch == Arch::Qwen3Next) c.intermediate_size = 128;
    } else if (arch == Arch::Qwen3Next && preset == "80b-a3b") {  // Qwen3-Next-80B-A3B
      set_attention(c, 2048, 48, 16, 2, 256);
      set_moe(c, 512, 10, 512);
      set_linear_attention(c, 16, 32, 128, 128);
      c.shared_expert_intermediate_size = 512;
      c.intermediate_size = 5120;
    } else if (arch == Arch::Qwen3_5Moe && preset == "397b-a17b") {  // Qwen3.5-397B-A17B
      set_attention(c, 4096, 60, 32, 2, 256);
      set_moe(c, 512, 10, 1024);
      set_linear_attention(c, 16, 64, 128, 128);
      c.shared_expert_intermediate_size = 1024;
      c.vocab_size = kQwen3_5Vocab;
    } else {
      unknown_preset(arch, preset);
    }
  }
  set_layer_types(c, kDefaultInterval);
  return c;
}

void apply_overrides(ModelConfig& c, const ShapeOverrides& o) {
  auto set = [](std::int64_t& field, const std::optional<std::int64_t>& value, const char* flag) {
    if (!value) return;
    if (*value <= 0) fail(flag, " must be positive, got ", *value);
    field = *value;
  };
  const std::int64_t interval = hybrid(c.arch) ? full_attention_interval(c) : 0;
  set(c.hidden_size, o.hidden, "--hidden");
  set(c.num_hidden_layers, o.layers, "--layers");
  set(c.num_attention_heads, o.heads, "--heads");
  set(c.num_key_value_heads, o.kv_heads, "--kv-heads");
  set(c.head_dim, o.head_dim, "--head-dim");
  set(c.intermediate_size, o.intermediate, "--intermediate");
  set(c.vocab_size, o.vocab, "--vocab");
  if (c.arch == Arch::Qwen3 && (o.experts || o.experts_per_tok || o.moe_intermediate))
    fail("--experts/--experts-per-tok/--moe-intermediate apply to MoE architectures only (qwen3 is dense)");
  set(c.num_experts, o.experts, "--experts");
  set(c.num_experts_per_tok, o.experts_per_tok, "--experts-per-tok");
  set(c.moe_intermediate_size, o.moe_intermediate, "--moe-intermediate");
  if (!hybrid(c.arch) && (o.shared_intermediate || o.full_attention_interval))
    fail("--shared-intermediate/--full-attention-interval apply to qwen3_next and qwen3_5_moe only");
  set(c.shared_expert_intermediate_size, o.shared_intermediate, "--shared-intermediate");
  std::int64_t new_interval = interval > 0 ? interval : kDefaultInterval;
  set(new_interval, o.full_attention_interval, "--full-attention-interval");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("--heads ", c.num_attention_heads, " must be a multiple of --kv-heads ", c.num_key_value_heads);
  if (c.is_moe() && c.num_experts_per_tok > c.num_experts)
    fail("--experts-per-tok ", c.num_experts_per_tok, " exceeds --experts ", c.num_experts);
  if (hybrid(c.arch)) {
    const std::int64_t rotary = c.rotary_dim();
    if (rotary < 2 || rotary % 2 != 0)
      fail("--head-dim ", c.head_dim, " gives ", rotary, " rotary dims at partial_rotary_factor ",
           c.partial_rotary_factor, "; it must be even and >= 2 (use a multiple of 8)");
  }
  set_layer_types(c, new_interval);
}

}  // namespace fp4serve::synth
