#pragma once
// Writes a random-weight checkpoint in the layout of a real Hugging Face release (ModelOpt NVFP4,
// compressed-tensors NVFP4 or BF16), sharded like real ones, streamed to disk shard by shard.
#include <cstdint>
#include <filesystem>
#include <string>

#include "formats/model_config.h"
#include "model/checkpoint_summary.h"
#include "synth/checkpoint_files.h"

namespace fp4serve::synth {

struct SynthOptions {
  ModelConfig config;
  WeightFormat format = WeightFormat::ModelOptNvfp4;
  QuantScope scope = QuantScope::All;
  std::uint64_t seed = 0;
  std::filesystem::path out_dir;
  std::uint64_t shard_bytes = 5'000'000'000ull;  // Hugging Face's default max_shard_size
  bool no_data = false;           // leave tensors over 64 KiB as sparse holes (reads as zeros)
  bool with_tokenizer = true;     // copy the vendored Qwen3 tokenizer files
  std::filesystem::path tokenizer_dir;  // empty = the vendored assets
  bool force = false;             // replace an existing non-empty output directory
  bool progress = true;
  unsigned threads = 0;           // 0 = all cores
};

struct SynthReport {
  std::size_t tensors = 0;
  std::size_t shards = 0;
  std::uint64_t bytes = 0;
  double seconds = 0.0;
};

SynthReport write_synthetic_checkpoint(const SynthOptions& options);

// `synth --dry-run`: writes what `options` describes the way --no-data does (configs, headers,
// small tensors; large tensors as sparse holes) into a scratch directory under the system temp
// folder, summarises it with the same code as `inspect`, deletes it, and returns the summary
// with `dir` set to options.out_dir. options.out_dir is neither read nor written. The same
// requests fail as for a real write (shapes NVFP4 cannot hold, a vocab smaller than the tokenizer).
CheckpointSummary dry_run_summary(const SynthOptions& options);

// Where the vendored Qwen3 tokenizer files live ($FP4SERVE_ASSET_DIR or the source tree's assets/).
std::filesystem::path default_tokenizer_dir();

}  // namespace fp4serve::synth
