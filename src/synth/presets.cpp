#include "synth/presets.h"

#include "util/error.h"

namespace fp4serve::synth {

namespace {

constexpr std::int64_t kQwen3Vocab = 151936;

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

void finish(ModelConfig& c) { c.layer_types.assign(static_cast<std::size_t>(c.num_hidden_layers), LayerType::FullAttention); }

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

Arch arch_from_name(std::string_view name) {
  if (name == "qwen3") return Arch::Qwen3;
  if (name == "qwen3_moe") return Arch::Qwen3Moe;
  if (name == "qwen3_next" || name == "qwen3_5_moe")
    fail("--arch ", name, ": synth does not write hybrid (Gated DeltaNet) checkpoints yet; supported: qwen3, qwen3_moe");
  fail("--arch ", name, ": unknown architecture; supported: qwen3, qwen3_moe");
}

std::vector<std::string> preset_names(Arch arch) {
  switch (arch) {
    case Arch::Qwen3: return {"tiny", "0.6b", "8b"};
    case Arch::Qwen3Moe: return {"tiny", "small", "30b-a3b", "235b-a22b"};
    default: return {};
  }
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
      fail("--preset ", preset, ": unknown for qwen3; choose one of ", joined(preset_names(arch)));
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
      fail("--preset ", preset, ": unknown for qwen3_moe; choose one of ", joined(preset_names(arch)));
    }
  } else {
    fail("synth: architecture '", arch_name(arch), "' has no presets yet");
  }
  finish(c);
  return c;
}

void apply_overrides(ModelConfig& c, const ShapeOverrides& o) {
  auto set = [](std::int64_t& field, const std::optional<std::int64_t>& value, const char* flag) {
    if (!value) return;
    if (*value <= 0) fail(flag, " must be positive, got ", *value);
    field = *value;
  };
  set(c.hidden_size, o.hidden, "--hidden");
  set(c.num_hidden_layers, o.layers, "--layers");
  set(c.num_attention_heads, o.heads, "--heads");
  set(c.num_key_value_heads, o.kv_heads, "--kv-heads");
  set(c.head_dim, o.head_dim, "--head-dim");
  set(c.intermediate_size, o.intermediate, "--intermediate");
  set(c.vocab_size, o.vocab, "--vocab");
  if (c.arch == Arch::Qwen3 && (o.experts || o.experts_per_tok || o.moe_intermediate))
    fail("--experts/--experts-per-tok/--moe-intermediate apply to qwen3_moe only (qwen3 is dense)");
  set(c.num_experts, o.experts, "--experts");
  set(c.num_experts_per_tok, o.experts_per_tok, "--experts-per-tok");
  set(c.moe_intermediate_size, o.moe_intermediate, "--moe-intermediate");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("--heads ", c.num_attention_heads, " must be a multiple of --kv-heads ", c.num_key_value_heads);
  if (c.is_moe() && c.num_experts_per_tok > c.num_experts)
    fail("--experts-per-tok ", c.num_experts_per_tok, " exceeds --experts ", c.num_experts);
  finish(c);
}

}  // namespace fp4serve::synth
