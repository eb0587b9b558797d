// Batched forward on a tiny synthetic NVFP4 Qwen3-MoE checkpoint (written by synth, weights as
// a real ModelOpt release stores them): several sequences with different lengths, pasts and KV
// block sizes in one CausalLM::forward equal each run alone, under the auto-free reference
// kernels and through make_causal_lm.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "common/temp_dir.h"
#include "kernels/kernels.h"
#include "model/causal_lm.h"
#include "model/model_weights.h"
#include "model/sequence_kv.h"
#include "synth/presets.h"
#include "synth/synth_checkpoint.h"

namespace fp4serve {
namespace {

double relative_error(const float* ours, const float* ref, std::int64_t n) {
  double diff = 0.0, scale = 0.0;
  for (std::int64_t j = 0; j < n; ++j) {
    diff = std::max(diff, std::abs(static_cast<double>(ours[j]) - ref[j]));
    scale = std::max(scale, std::abs(static_cast<double>(ref[j])));
  }
  return diff / std::max(scale, 1e-30);
}

TEST(BatchedForwardSynth, TinyNvfp4MoeBatchEqualsEachAlone) {
  testing::TempDir tmp;
  synth::SynthOptions o;
  o.config = synth::preset_config(Arch::Qwen3Moe, "tiny");
  synth::ShapeOverrides ov;
  ov.vocab = 320;
  synth::apply_overrides(o.config, ov);
  o.out_dir = tmp.path() / "tiny";
  o.progress = false;
  o.with_tokenizer = false;
  o.threads = 2;
  o.seed = 5;
  synth::write_synthetic_checkpoint(o);
  const auto model = make_causal_lm(load_model_weights(o.out_dir), kernels::reference_kernels());
  const std::int64_t V = model->vocab_size();

  std::vector<std::int32_t> ids;
  for (int i = 0; i < 64; ++i) ids.push_back(static_cast<std::int32_t>((i * 37 + 11) % V));
  struct Plan {
    std::size_t offset;
    std::int64_t past, m, block_tokens;
  };
  const std::vector<Plan> plans{{0, 9, 1, 4}, {5, 0, 12, 3}, {2, 17, 4, 16}, {7, 30, 1, 0}, {1, 3, 6, 1}};
  std::vector<std::unique_ptr<test_kv::SequenceKv>> alone, batched;
  std::vector<std::vector<float>> alone_logits;
  std::vector<SequenceChunk> chunks;
  for (const Plan& p : plans) {
    const std::int32_t* seq = ids.data() + p.offset;
    alone.push_back(std::make_unique<test_kv::SequenceKv>(*model, p.past + p.m, p.block_tokens, 3));
    batched.push_back(std::make_unique<test_kv::SequenceKv>(*model, p.past + p.m, p.block_tokens, 4));
    std::vector<float> scratch(static_cast<std::size_t>(V));
    if (p.past > 0) {
      alone.back()->forward(*model, {seq, static_cast<std::size_t>(p.past)}, scratch, LogitsFor::LastPosition);
      batched.back()->forward(*model, {seq, static_cast<std::size_t>(p.past)}, scratch, LogitsFor::LastPosition);
    }
    alone_logits.emplace_back(static_cast<std::size_t>(p.m * V));
    alone.back()->forward(*model, {seq + p.past, static_cast<std::size_t>(p.m)}, alone_logits.back());
    chunks.push_back({{seq + p.past, static_cast<std::size_t>(p.m)}, &batched.back()->state, LogitsFor::AllPositions});
  }
  std::int64_t rows = 0;
  for (const Plan& p : plans) rows += p.m;
  std::vector<float> logits(static_cast<std::size_t>(rows * V));
  model->forward(chunks, logits);
  std::int64_t row = 0;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    for (std::int64_t r = 0; r < plans[i].m; ++r, ++row) {
      const float* ours = logits.data() + row * V;
      ASSERT_TRUE(std::all_of(ours, ours + V, [](float x) { return std::isfinite(x); }));
      EXPECT_LE(relative_error(ours, alone_logits[i].data() + r * V, V), 1e-5) << "sequence " << i << " row " << r;
    }
  }
}

}  // namespace
}  // namespace fp4serve
