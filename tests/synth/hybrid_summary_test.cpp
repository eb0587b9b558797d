// `inspect` on hybrid checkpoints and `synth --dry-run`: the dry run prints what inspect prints for
// the checkpoint synth would write, and the numbers match formulas written from the config.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "common/temp_dir.h"
#include "model/checkpoint_summary.h"
#include "synth/presets.h"
#include "synth/synth_checkpoint.h"
#include "util/error.h"

namespace fp4serve::synth {
namespace {

namespace fs = std::filesystem;

SynthOptions real_shape(Arch arch, const char* preset, const fs::path& out) {
  SynthOptions o;
  o.config = preset_config(arch, preset);
  o.scope = default_quant_scope(arch);
  o.out_dir = out;
  o.no_data = true;
  o.with_tokenizer = false;
  o.progress = false;
  return o;
}

// What one token of a hybrid NVFP4 release (routed experts NVFP4, the rest BF16) costs, written
// term by term from the config numbers (reference notes section 6), independently of the code.
struct Expected {
  std::int64_t total = 0, active = 0;
  double bytes_per_token = 0, routed_per_token = 0;
  std::uint64_t kv_per_token = 0, conv_state = 0, recurrent_state = 0;
};

Expected expected(const ModelConfig& c) {
  const std::int64_t H = c.hidden_size, D = c.head_dim, hv = c.linear_num_value_heads;
  const std::int64_t key = c.linear_num_key_heads * c.linear_key_head_dim;
  const std::int64_t value = hv * c.linear_value_head_dim, conv = 2 * key + value;
  const bool next = c.arch == Arch::Qwen3Next;
  std::int64_t full = 0;
  for (LayerType t : c.layer_types) full += t == LayerType::FullAttention;
  const std::int64_t linear = c.num_hidden_layers - full;

  const std::int64_t linear_attn = (next ? (2 * key + 2 * value) * H + 2 * hv * H : conv * H + value * H + 2 * hv * H) +
                                   conv * c.linear_conv_kernel_dim + 2 * hv + c.linear_value_head_dim + H * value;
  const std::int64_t full_attn = 2 * c.num_attention_heads * D * H + 2 * c.num_key_value_heads * D * H +
                                 H * c.num_attention_heads * D + 2 * D;
  const std::int64_t shared_and_router = c.num_experts * H + 3 * c.shared_expert_intermediate_size * H + H;
  const std::int64_t expert_module = c.moe_intermediate_size * H;  // each of gate, up, down
  const std::int64_t routed = c.num_hidden_layers * c.num_experts * 3 * expert_module;
  const std::int64_t embed = c.vocab_size * H;
  const std::int64_t bf16 = 2 * embed + H + c.num_hidden_layers * (2 * H + shared_and_router) + linear * linear_attn +
                            full * full_attn;  // every BF16 parameter, embeddings and lm_head included

  Expected e;
  e.total = bf16 + routed;
  e.active = bf16 + routed / c.num_experts * c.num_experts_per_tok;
  // BF16: 2 bytes, all read but the embedding (one row); NVFP4: half a byte plus one E4M3 scale
  // per 16 and two F32 scalars per module, top-k of the experts read.
  const double expert_bytes = double(routed) * (0.5 + 1.0 / 16.0) + 8.0 * double(routed / expert_module);
  e.routed_per_token = expert_bytes * double(c.num_experts_per_tok) / double(c.num_experts);
  e.bytes_per_token = 2.0 * double(bf16 - embed + H) + e.routed_per_token;
  e.kv_per_token = static_cast<std::uint64_t>(full * 2 * c.num_key_value_heads * D * 2);
  e.conv_state = static_cast<std::uint64_t>(linear * conv * (c.linear_conv_kernel_dim - 1) * 4);
  e.recurrent_state =
      static_cast<std::uint64_t>(linear * hv * c.linear_key_head_dim * c.linear_value_head_dim * 4);
  return e;
}

void expect_numbers(const CheckpointSummary& s, const Expected& e) {
  EXPECT_EQ(s.params_total, e.total);
  EXPECT_EQ(s.params_active, e.active);
  // inspect rounds each tensor's share down to whole bytes: at most one byte per tensor.
  EXPECT_NEAR(double(s.weight_bytes_per_token), e.bytes_per_token, double(s.tensors));
  // The routed experts' share (a batched step reads the rest once): top-k of every expert tensor.
  EXPECT_NEAR(double(s.routed_expert_bytes_per_token), e.routed_per_token, double(s.tensors));
  EXPECT_EQ(s.kv_bytes_per_token, e.kv_per_token);
  EXPECT_EQ(s.conv_state_bytes, e.conv_state);
  EXPECT_EQ(s.recurrent_state_bytes, e.recurrent_state);
}

TEST(HybridSummary, Qwen3_5_397bNoDataWriteThenInspect) {
  fp4serve::testing::TempDir tmp;
  const SynthOptions o = real_shape(Arch::Qwen3_5Moe, "397b-a17b", tmp / "q397");
  write_synthetic_checkpoint(o);
  const CheckpointSummary s = summarize_checkpoint(o.out_dir);
  expect_numbers(s, expected(o.config));
  // Sanity against the model's name: 397 B total (the text model), 17 B active.
  EXPECT_NEAR(double(s.params_total) / 1e9, 397.0, 1.5);
  EXPECT_NEAR(double(s.params_active) / 1e9, 17.0, 0.5);
  // Per sequence: 45 x (64 heads x 128 x 128 fp32 = 4 MiB) of recurrent state.
  EXPECT_EQ(s.recurrent_state_bytes, 45u * 4 * 1024 * 1024);
  const std::string text = summary_to_text(s);
  EXPECT_NE(text.find("60 layers (45 linear_attention + 15 full_attention)"), std::string::npos) << text;
  EXPECT_NE(text.find("per sequence: 186.33 MiB fixed for 45 linear-attention layers"), std::string::npos) << text;
  EXPECT_NE(text.find("30.00 KiB of KV cache per token for 15 full-attention layers"), std::string::npos) << text;
  EXPECT_NE(text.find("decode reads"), std::string::npos) << text;
  EXPECT_NE(text.find(" of them routed experts), plus"), std::string::npos) << text;
  // The release split, as inspect reports it per module group.
  std::map<std::string, std::string> scheme;
  for (const ModuleGroup& g : s.groups) scheme[g.group] = g.scheme;
  const std::string layers = "model.language_model.layers.*.";
  EXPECT_EQ(scheme[layers + "mlp.experts.*.down_proj"], "NVFP4");
  EXPECT_EQ(scheme[layers + "linear_attn.in_proj_qkv"], "BF16");
  EXPECT_EQ(scheme[layers + "self_attn.q_proj"], "BF16");
  EXPECT_EQ(scheme[layers + "mlp.shared_expert.up_proj"], "BF16");
  EXPECT_EQ(scheme["lm_head"], "BF16");
  const auto j = summary_to_json(s);
  EXPECT_EQ(j["architecture"]["layer_pattern"], "45 linear_attention + 15 full_attention");
  EXPECT_EQ(j["decode"]["routed_expert_bytes_per_token"].get<std::uint64_t>(), s.routed_expert_bytes_per_token);
  EXPECT_EQ(j["memory"]["linear_attention_state_bytes_per_sequence"].get<std::uint64_t>(),
            s.conv_state_bytes + s.recurrent_state_bytes);
}

TEST(HybridSummary, DryRunPrintsWhatInspectPrintsAndWritesNothing) {
  fp4serve::testing::TempDir tmp;
  for (Arch arch : {Arch::Qwen3_5Moe, Arch::Qwen3Next, Arch::Qwen3Moe}) {
    SynthOptions o = real_shape(arch, "tiny", tmp / std::string(arch_name(arch)));
    o.with_tokenizer = true;  // checked, not copied, by the dry run
    const CheckpointSummary dry = dry_run_summary(o);
    EXPECT_FALSE(fs::exists(o.out_dir)) << "the dry run wrote " << o.out_dir;
    write_synthetic_checkpoint(o);
    const CheckpointSummary inspected = summarize_checkpoint(o.out_dir);
    EXPECT_EQ(summary_to_text(dry), summary_to_text(inspected)) << arch_name(arch);
    EXPECT_EQ(summary_to_json(dry), summary_to_json(inspected)) << arch_name(arch);
    if (arch == Arch::Qwen3Moe) {  // no hybrid lines for a model without linear attention
      EXPECT_EQ(summary_to_text(dry).find("linear attn"), std::string::npos);
      EXPECT_EQ(summary_to_text(dry).find("per sequence"), std::string::npos);
      EXPECT_EQ(dry.conv_state_bytes + dry.recurrent_state_bytes, 0u);
    } else {
      EXPECT_NE(summary_to_text(dry).find("4 layers (3 linear_attention + 1 full_attention)"), std::string::npos);
      expect_numbers(dry, expected(o.config));
    }
  }
}

TEST(HybridSummary, Qwen3Next80bDryRun) {
  const SynthOptions o = real_shape(Arch::Qwen3Next, "80b-a3b", "/nonexistent/q80");
  const CheckpointSummary s = dry_run_summary(o);
  expect_numbers(s, expected(o.config));
  EXPECT_NEAR(double(s.params_total) / 1e9, 80.0, 1.0);
  EXPECT_NEAR(double(s.params_active) / 1e9, 3.9, 0.1);  // "A3B" counts without embeddings: 3.3 B
  EXPECT_EQ(s.dir, "/nonexistent/q80");
  EXPECT_NE(summary_to_text(s).find("48 layers (36 linear_attention + 12 full_attention)"), std::string::npos);
}

TEST(HybridSummary, DryRunRejectsWhatAWriteRejects) {
  SynthOptions o = real_shape(Arch::Qwen3_5Moe, "tiny", "/nonexistent/never-written");
  o.with_tokenizer = true;
  ShapeOverrides small;
  small.vocab = 1000;
  apply_overrides(o.config, small);
  EXPECT_THROW(dry_run_summary(o), Error);
  o.with_tokenizer = false;
  EXPECT_NO_THROW(dry_run_summary(o));
  ShapeOverrides odd;
  odd.hidden = 72;  // not a multiple of the NVFP4 block
  apply_overrides(o.config, odd);
  EXPECT_THROW(dry_run_summary(o), Error);
}

}  // namespace
}  // namespace fp4serve::synth
