// How long `inspect` takes on real shapes (headers only), and how fast `synth` writes.
#include <benchmark/benchmark.h>

#include <filesystem>

#include "model/checkpoint_summary.h"
#include "synth/presets.h"
#include "synth/synth_checkpoint.h"

namespace {

namespace fs = std::filesystem;
using namespace fp4serve;

fs::path skeleton(const std::string& preset) {
  const fs::path dir = fs::temp_directory_path() / ("fp4serve_bench_" + preset);
  if (!fs::exists(dir / "config.json")) {
    synth::SynthOptions o;
    o.config = synth::preset_config(Arch::Qwen3Moe, preset);
    o.out_dir = dir;
    o.no_data = true;
    o.force = true;
    o.progress = false;
    synth::write_synthetic_checkpoint(o);
  }
  return dir;
}

// Prediction: dominated by JSON parsing of ~75k (30B) / ~145k (235B) header entries, ~0.1-0.3 s.
void BM_InspectSkeleton(benchmark::State& state, const std::string& preset) {
  const fs::path dir = skeleton(preset);
  for (auto _ : state) {
    CheckpointSummary s = summarize_checkpoint(dir);
    benchmark::DoNotOptimize(s.params_total);
  }
}
BENCHMARK_CAPTURE(BM_InspectSkeleton, qwen3_30b_a3b, std::string("30b-a3b"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_InspectSkeleton, qwen3_235b_a22b, std::string("235b-a22b"))->Unit(benchmark::kMillisecond);

// Bytes of NVFP4 checkpoint written per second for the "small" preset, all cores.
void BM_SynthSmall(benchmark::State& state) {
  const fs::path dir = fs::temp_directory_path() / "fp4serve_bench_synth_small";
  std::uint64_t bytes = 0;
  for (auto _ : state) {
    synth::SynthOptions o;
    o.config = synth::preset_config(Arch::Qwen3Moe, "small");
    o.out_dir = dir;
    o.force = true;
    o.progress = false;
    o.with_tokenizer = false;
    bytes += synth::write_synthetic_checkpoint(o).bytes;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  fs::remove_all(dir);
}
BENCHMARK(BM_SynthSmall)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
