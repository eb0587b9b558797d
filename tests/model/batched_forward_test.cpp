// CausalLM::forward over several sequences at once equals running each alone: the same logits
// (within 1e-5 of the row's max |logit|) and the same keys and values, whatever the sequences'
// lengths, pasts, KV block sizes and logits requests; plus the errors forward() reports.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "kernels/kernels.h"
#include "model/model_weights.h"
#include "model/qwen3_model.h"
#include "model/qwen3_oracle.h"
#include "model/sequence_kv.h"

namespace fp4serve {
namespace {

using test_kv::SequenceKv;

// One sequence of the batch: `past` tokens already run, then `m` new ones.
struct Plan {
  std::size_t offset;  // where its tokens start in the fixture's ids
  std::int64_t past, m;
  LogitsFor logits;
  std::int64_t block_tokens;  // 0 = contiguous
};

std::int64_t rows_of(const Plan& p) {
  return p.logits == LogitsFor::AllPositions ? p.m : p.logits == LogitsFor::LastPosition ? 1 : 0;
}

// Runs every plan alone and all of them in one batch and compares.
void expect_batch_equals_alone(const CausalLM& model, const std::vector<std::int32_t>& ids,
                               const std::vector<Plan>& plans) {
  const std::int64_t V = model.vocab_size();
  std::vector<std::unique_ptr<SequenceKv>> alone, batched;
  std::vector<std::vector<float>> alone_logits;
  std::vector<SequenceChunk> chunks;
  std::int64_t total_rows = 0;
  for (const Plan& p : plans) {
    ASSERT_LE(p.offset + static_cast<std::size_t>(p.past + p.m), ids.size());
    const std::int32_t* seq = ids.data() + p.offset;
    const std::int64_t cap = p.past + p.m;
    alone.push_back(std::make_unique<SequenceKv>(model, cap, p.block_tokens, 7));
    batched.push_back(std::make_unique<SequenceKv>(model, cap, p.block_tokens, 11));
    std::vector<float> scratch(static_cast<std::size_t>(V));
    if (p.past > 0) {
      alone.back()->forward(model, {seq, static_cast<std::size_t>(p.past)}, scratch, LogitsFor::LastPosition);
      batched.back()->forward(model, {seq, static_cast<std::size_t>(p.past)}, scratch, LogitsFor::LastPosition);
    }
    alone_logits.emplace_back(static_cast<std::size_t>(rows_of(p) * V));
    alone.back()->forward(model, {seq + p.past, static_cast<std::size_t>(p.m)}, alone_logits.back(), p.logits);
    chunks.push_back({{seq + p.past, static_cast<std::size_t>(p.m)}, &batched.back()->state, p.logits});
    total_rows += rows_of(p);
  }
  std::vector<float> logits(static_cast<std::size_t>(total_rows * V));
  model.forward(chunks, logits);

  std::int64_t row = 0;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    for (std::int64_t r = 0; r < rows_of(plans[i]); ++r, ++row) {
      EXPECT_LE(oracle::relative_error(logits.data() + row * V, alone_logits[i].data() + r * V, V), 1e-5)
          << "sequence " << i << " row " << r;
    }
    const std::int64_t end = plans[i].past + plans[i].m;
    for (std::int64_t l = 0; l < model.config().num_hidden_layers; ++l) {
      for (std::int64_t p = plans[i].past; p < end; ++p) {
        for (std::int64_t j = 0; j < alone[i]->row_elements(); ++j) {
          ASSERT_NEAR(batched[i]->key(l, p, j), alone[i]->key(l, p, j), 1e-5) << "seq " << i << " layer " << l;
          ASSERT_NEAR(batched[i]->value(l, p, j), alone[i]->value(l, p, j), 1e-5) << "seq " << i << " layer " << l;
        }
      }
    }
  }
}

class BatchedForward : public ::testing::TestWithParam<oracle::Case> {};

TEST_P(BatchedForward, SeveralSequencesEqualEachAlone) {
  const oracle::Data d = oracle::load(GetParam());
  const Qwen3Model model(load_model_weights(GetParam().dir()), kernels::reference_kernels(), GetParam().semantics());
  // Different lengths, pasts, block sizes and logits requests in one batch; decodes and
  // prompt chunks mixed.
  expect_batch_equals_alone(model, d.ids,
                            {{0, 7, 1, LogitsFor::LastPosition, 0},
                             {3, 0, 9, LogitsFor::AllPositions, 4},
                             {1, 12, 5, LogitsFor::LastPosition, 1},
                             {5, 4, 3, LogitsFor::None, 3},
                             {2, 20, 1, LogitsFor::AllPositions, 16},
                             {0, 0, 1, LogitsFor::LastPosition, 2}});
}

TEST_P(BatchedForward, DecodeStepOfManySequences) {
  const oracle::Data d = oracle::load(GetParam());
  const Qwen3Model model(load_model_weights(GetParam().dir()), kernels::reference_kernels(), GetParam().semantics());
  std::vector<Plan> plans;
  for (std::size_t i = 0; i < 12; ++i)
    plans.push_back({i, static_cast<std::int64_t>(3 + 2 * i), 1, LogitsFor::LastPosition, 5});
  expect_batch_equals_alone(model, d.ids, plans);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchedForward, ::testing::ValuesIn(oracle::cases()),
                         [](const ::testing::TestParamInfo<oracle::Case>& p) { return p.param.label(); });

const oracle::Case kMoe{"moe_bf16_gqa2", "default"};

TEST(PagedKv, EveryBlockSizeEqualsContiguous) {
  const oracle::Data d = oracle::load(kMoe);
  const Qwen3Model model(load_model_weights(kMoe.dir()), kernels::reference_kernels());
  const auto T = static_cast<std::int64_t>(d.ids.size());
  const std::int64_t V = model.vocab_size();
  SequenceKv contiguous(model, T);
  std::vector<float> ref(static_cast<std::size_t>(T * V));
  contiguous.forward(model, d.ids, ref);
  for (std::int64_t block : {1, 2, 5, 16, 64}) {
    SequenceKv paged(model, T, block, static_cast<std::uint64_t>(block));
    std::vector<float> logits(ref.size());
    // Prefill in two parts so a chunk starts inside a block.
    const std::size_t split = 7;
    paged.forward(model, {d.ids.data(), split}, {logits.data(), split * static_cast<std::size_t>(V)});
    paged.forward(model, {d.ids.data() + split, d.ids.size() - split},
                  {logits.data() + split * static_cast<std::size_t>(V), logits.size() - split * static_cast<std::size_t>(V)});
    for (std::int64_t t = 0; t < T; ++t)
      EXPECT_LE(oracle::relative_error(logits.data() + t * V, ref.data() + t * V, V), 1e-6)
          << "block " << block << " position " << t;
  }
}

TEST(BatchedForwardErrors, NameTheChunkAndTheProblem) {
  const Qwen3Model model(load_model_weights(kMoe.dir()), kernels::reference_kernels());
  const std::int64_t V = model.vocab_size();
  SequenceKv a(model, 8, 4), b(model, 8, 4);
  const std::vector<std::int32_t> two{1, 2}, bad{1, static_cast<std::int32_t>(V)};
  std::vector<float> logits(static_cast<std::size_t>(2 * V));

  std::vector<SequenceChunk> chunks{{two, &a.state, LogitsFor::LastPosition}, {bad, &b.state, LogitsFor::LastPosition}};
  testing::expect_error([&] { model.forward(chunks, logits); }, {"chunk 1: token id 256 at position 1"});

  chunks = {{two, &a.state, LogitsFor::LastPosition}, {two, &a.state, LogitsFor::LastPosition}};
  testing::expect_error([&] { model.forward(chunks, logits); }, {"chunks 0 and 1 belong to the same sequence"});

  b.state.past = 7;  // 7 + 2 tokens need 3 blocks of 4, the state has 2
  chunks = {{two, &a.state, LogitsFor::LastPosition}, {two, &b.state, LogitsFor::LastPosition}};
  testing::expect_error([&] { model.forward(chunks, logits); },
                        {"chunk 1: 2 new tokens after 7 cached ones need 3 KV blocks"});

  b.state.past = 0;
  testing::expect_error([&] { model.forward(chunks, {logits.data(), logits.size() - 1}); },
                        {"the logits buffer holds 511 floats, expected 2 x 256"});
  testing::expect_error([&] { model.forward({}, logits); }, {"no chunks"});
}

TEST(BatchedForwardState, SpecDescribesTheKvLayout) {
  const Qwen3Model model(load_model_weights(kMoe.dir()), kernels::reference_kernels());
  const StateSpec spec = model.state_spec();
  EXPECT_EQ(spec.attention_layers, model.config().num_hidden_layers);
  EXPECT_EQ(spec.kv_row_elements, model.config().num_key_value_heads * model.config().head_dim);
  EXPECT_EQ(spec.kv_dtype, DType::F32);
  EXPECT_EQ(spec.kv_block_bytes(4), spec.kv_block_elements(4) * 4);
  EXPECT_EQ(spec.linear_layers, 0);
  EXPECT_EQ(spec.fixed_state_floats(), 0);
}

}  // namespace
}  // namespace fp4serve
