// `fp4serve synth`: write a random-weight checkpoint of a real model's shape.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/app.h"
#include "model/checkpoint_summary.h"
#include "synth/presets.h"
#include "synth/synth_checkpoint.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/progress_bar.h"

namespace fp4serve::cli {

namespace {

// "5GB", "500MB", "4GiB", "123" -> bytes; a shard of 0 bytes makes no sense.
std::uint64_t parse_shard_size(const std::string& text) {
  const std::uint64_t bytes = parse_byte_size(text, "--shard-size");
  if (bytes == 0) fail("--shard-size ", text, ": must be positive");
  return bytes;
}

}  // namespace

void register_synth(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "Write a random-weight checkpoint in a real release's layout");
  struct Args {
    std::string arch = "qwen3_moe", preset = "tiny", format = "nvfp4", scope, out, shard_size = "5GB";
    std::string tokenizer_dir;
    std::uint64_t seed = 0;
    bool no_data = false, no_tokenizer = false, force = false, quiet = false, dry_run = false, json = false;
    unsigned threads = 0;
    synth::ShapeOverrides o;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--arch", a->arch, "Architecture: qwen3_moe, qwen3, qwen3_5_moe or qwen3_next")->capture_default_str();
  cmd->add_option("--preset", a->preset,
                  "Shape preset: qwen3_moe tiny|small|30b-a3b|235b-a22b; qwen3 tiny|0.6b|8b; "
                  "qwen3_5_moe tiny|397b-a17b; qwen3_next tiny|80b-a3b")
      ->capture_default_str();
  cmd->add_option("--format", a->format, "nvfp4 (ModelOpt), compressed-tensors (NVFP4) or bf16")->capture_default_str();
  cmd->add_option("--quant-scope", a->scope,
                  "all: every Linear but routers, gates and lm_head; experts: routed experts only "
                  "(default: experts for qwen3_5_moe/qwen3_next, as their NVFP4 releases; all otherwise)");
  cmd->add_option("--out", a->out, "Output directory (required unless --dry-run)");
  cmd->add_flag("--dry-run", a->dry_run,
                "Write nothing; print what `inspect` would print for the checkpoint (parameters, bytes, "
                "bytes read per token, per-sequence state)");
  cmd->add_flag("--json", a->json, "With --dry-run: print inspect's JSON instead of text");
  cmd->add_option("--seed", a->seed, "Random seed; same seed, same bytes")->capture_default_str();
  cmd->add_option("--shard-size", a->shard_size, "Largest shard, e.g. 5GB or 500MB")->capture_default_str();
  cmd->add_option("--hidden", a->o.hidden, "Override hidden_size");
  cmd->add_option("--layers", a->o.layers, "Override num_hidden_layers");
  cmd->add_option("--heads", a->o.heads, "Override num_attention_heads");
  cmd->add_option("--kv-heads", a->o.kv_heads, "Override num_key_value_heads");
  cmd->add_option("--head-dim", a->o.head_dim, "Override head_dim");
  cmd->add_option("--intermediate", a->o.intermediate, "Override intermediate_size (dense MLP)");
  cmd->add_option("--experts", a->o.experts, "Override num_experts");
  cmd->add_option("--experts-per-tok", a->o.experts_per_tok, "Override num_experts_per_tok");
  cmd->add_option("--moe-intermediate", a->o.moe_intermediate, "Override moe_intermediate_size");
  cmd->add_option("--vocab", a->o.vocab, "Override vocab_size");
  cmd->add_option("--shared-intermediate", a->o.shared_intermediate,
                  "Override shared_expert_intermediate_size (qwen3_5_moe, qwen3_next)");
  cmd->add_option("--full-attention-interval", a->o.full_attention_interval,
                  "Every N-th layer is full attention, the rest Gated DeltaNet (qwen3_5_moe, qwen3_next)");
  cmd->add_flag("--no-data", a->no_data,
                "Write headers and small tensors only; large tensors become sparse holes that read as zeros "
                "(for inspecting huge shapes without the disk)");
  cmd->add_flag("--no-tokenizer", a->no_tokenizer, "Do not copy the Qwen3 tokenizer files");
  cmd->add_option("--tokenizer-dir", a->tokenizer_dir, "Take tokenizer files from this directory");
  cmd->add_flag("--force", a->force, "Replace a non-empty output directory");
  cmd->add_flag("--quiet", a->quiet, "No progress bar");
  cmd->add_option("--threads", a->threads, "Worker threads (0 = all cores)");
  cmd->callback([a] {
    synth::SynthOptions opt;
    const Arch arch = synth::arch_from_name(a->arch);
    opt.config = synth::preset_config(arch, a->preset);
    synth::apply_overrides(opt.config, a->o);
    opt.format = synth::weight_format_from_name(a->format);
    opt.scope = a->scope.empty() ? synth::default_quant_scope(arch) : synth::quant_scope_from_name(a->scope);
    opt.seed = a->seed;
    opt.out_dir = a->out;
    opt.shard_bytes = parse_shard_size(a->shard_size);
    opt.no_data = a->no_data;
    opt.with_tokenizer = !a->no_tokenizer;
    opt.tokenizer_dir = a->tokenizer_dir;
    opt.force = a->force;
    opt.progress = !a->quiet;
    opt.threads = a->threads;
    if (a->json && !a->dry_run) fail("--json applies to --dry-run only (for a written checkpoint use `fp4serve inspect --json`)");
    if (a->dry_run) {
      CheckpointSummary summary = synth::dry_run_summary(opt);
      if (a->out.empty()) summary.dir = "(dry run: nothing written)";
      if (a->json) std::cout << summary_to_json(summary).dump(2) << "\n";
      else std::cout << summary_to_text(summary);
      return;
    }
    if (a->out.empty()) fail("--out is required (or use --dry-run to see the summary without writing)");
    const synth::SynthReport r = synth::write_synthetic_checkpoint(opt);
    std::cout << "wrote " << r.tensors << " tensors (" << format_bytes(static_cast<double>(r.bytes)) << ") in "
              << r.shards << " shard(s) to " << a->out << " in " << r.seconds << " s\n";
  });
}

}  // namespace fp4serve::cli
