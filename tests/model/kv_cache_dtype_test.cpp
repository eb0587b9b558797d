// The KV cache's element type (--kv-cache-dtype, kernels/kv_cache.h) through the whole model, on
// the oracle fixtures: an f16 or bf16 cache stores each key and value row rounded to nearest
// even (layer 0's rows, computed before any attention, are exactly the rounding of the fp32
// cache's), the logits of typical rows stay within the rounding's reach of transformers', prefill
// in chunks still equals all at once, and a state of another type is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/kv_cache.h"
#include "model/hybrid_state.h"
#include "model/model_weights.h"
#include "model/qwen3_5_model.h"
#include "model/qwen3_model.h"
#include "model/qwen3_oracle.h"
#include "model/sequence_kv.h"
#include "numerics/scalar_formats.h"
#include "common/expect_error.h"

namespace fp4serve {
namespace {

using test_kv::SequenceKv;

// Logits of every position, against transformers' fp32 run: the bound per cache type is the
// rounding of every cached element (2^-11 f16, 2^-8 bf16 relative) carried through a few layers.
double tolerance(DType dtype) { return dtype == DType::F16 ? 5e-3 : dtype == DType::BF16 ? 4e-2 : 1e-4; }

class KvCacheDtype : public ::testing::TestWithParam<oracle::Case> {};

TEST_P(KvCacheDtype, SixteenBitCachesRoundRowsAndKeepLogitsClose) {
  const oracle::Data data = oracle::load(GetParam());
  const auto T = static_cast<std::int64_t>(data.ids.size());
  const auto V = data.vocab;
  Qwen3Model f32_model(load_model_weights(GetParam().dir()), kernels::reference_kernels(), GetParam().semantics());
  SequenceKv f32_kv(f32_model, T);
  std::vector<float> f32_logits(static_cast<std::size_t>(T * V));
  f32_kv.forward(f32_model, data.ids, f32_logits);

  for (DType dtype : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(kernels::kv_dtype_name(dtype));
    Qwen3Model model(load_model_weights(GetParam().dir()), kernels::reference_kernels(), GetParam().semantics());
    model.set_kv_cache_dtype(dtype);
    ASSERT_EQ(model.state_spec().kv_dtype, dtype);
    ASSERT_EQ(model.state_spec().kv_block_bytes(4) * 2, f32_model.state_spec().kv_block_bytes(4));
    SequenceKv kv(model, T, /*block_tokens=*/3);
    std::vector<float> logits(static_cast<std::size_t>(T * V));
    kv.forward(model, data.ids, logits);

    const auto round = [dtype](float x) {
      return dtype == DType::F16 ? fp16_to_float(float_to_fp16(x)) : bf16_to_float(float_to_bf16(x));
    };
    bool any_rounded = false;
    for (std::int64_t p = 0; p < T; ++p)
      for (std::int64_t i = 0; i < kv.row_elements(); ++i) {
        const float k = f32_kv.key(0, p, i), v = f32_kv.value(0, p, i);
        ASSERT_EQ(kv.key(0, p, i), round(k)) << "layer 0 key " << p << " element " << i;
        ASSERT_EQ(kv.value(0, p, i), round(v)) << "layer 0 value " << p << " element " << i;
        any_rounded = any_rounded || round(k) != k;
      }
    EXPECT_TRUE(any_rounded) << "no cached element changed: the cache did not round";

    // Against transformers' fp32 run. A row may move further where an MoE top-k choice's margin
    // is below the cache's rounding (the fixtures guarantee 1e-4): at most one row in 16. W4A4
    // is a step function of its activations (kernels/validation.h), so only the rows above hold.
    std::vector<double> errors;
    double moved = 0.0;
    for (std::int64_t t = 0; t < T; ++t) {
      errors.push_back(oracle::relative_error(logits.data() + t * V, data.row(static_cast<std::size_t>(t)), V));
      moved = std::max(moved, oracle::relative_error(logits.data() + t * V, f32_logits.data() + t * V, V));
    }
    EXPECT_GT(moved, 0.0) << "logits identical to the fp32 cache's";
    if (GetParam().semantics() != kernels::Fp4Semantics::W4A4) {
      const auto over = std::count_if(errors.begin(), errors.end(), [&](double e) { return e > tolerance(dtype); });
      std::nth_element(errors.begin(), errors.begin() + T / 2, errors.end());
      EXPECT_LE(errors[static_cast<std::size_t>(T / 2)], tolerance(dtype)) << "median row against transformers";
      EXPECT_LE(over * 16, T) << over << " of " << T << " rows beyond " << tolerance(dtype);
    }

    // Chunked prefill reads back the same rounded rows it wrote.
    SequenceKv chunked(model, T, /*block_tokens=*/5);
    std::vector<float> part(static_cast<std::size_t>(4 * V)), row(static_cast<std::size_t>(V));
    chunked.forward(model, {data.ids.data(), 4}, part);
    for (std::int64_t p = 4; p < T; ++p) {
      chunked.forward(model, {data.ids.data() + p, 1}, row, LogitsFor::LastPosition);
      EXPECT_LE(oracle::relative_error(row.data(), logits.data() + p * V, V), 1e-6) << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvCacheDtype, ::testing::ValuesIn(oracle::cases()),
                         [](const ::testing::TestParamInfo<oracle::Case>& p) { return p.param.label(); });

TEST(KvCacheDtypeErrors, StateOfAnotherTypeIsRefused) {
  const oracle::Case c = oracle::cases().front();
  Qwen3Model model(load_model_weights(c.dir()), kernels::reference_kernels(), c.semantics());
  SequenceKv f32_state(model, 4);  // made while the model still writes f32
  model.set_kv_cache_dtype(DType::F16);
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  const std::vector<std::int32_t> ids{1};
  testing::expect_error([&] { f32_state.forward(model, ids, logits, LogitsFor::LastPosition); },
                        {"chunk 0", "the state's KV cache holds f32, the model writes f16"});
  testing::expect_error([&] { model.set_kv_cache_dtype(DType::F8_E4M3); }, {"--kv-cache-dtype", "F8_E4M3", "f16"});
}

TEST(KvCacheDtypeHybrid, GatedAttentionLayersUseTheCacheType) {
  // Qwen3.5 / Qwen3-Next: the full-attention layers write and read the 16-bit cache too.
  for (const oracle::Case& c : oracle::cases("oracle_hybrid")) {
    SCOPED_TRACE(c.label());
    const oracle::Data data = oracle::load(c);
    const auto T = static_cast<std::int64_t>(data.ids.size());
    std::vector<float> logits[2];
    for (DType dtype : {DType::F32, DType::F16}) {
      auto model = make_qwen3_5_model(load_model_weights(c.dir()), kernels::reference_kernels(), c.semantics());
      model->set_kv_cache_dtype(dtype);
      hybrid_test::SequenceBuffers seq(model->state_spec(), T);
      ASSERT_EQ(seq.state.kv_dtype, dtype);
      auto& out = logits[dtype == DType::F16 ? 1 : 0];
      out.resize(static_cast<std::size_t>(T * data.vocab));
      const SequenceChunk chunk{data.ids, &seq.state, LogitsFor::AllPositions};
      model->forward({&chunk, 1}, out);
    }
    double worst = 0.0, moved = 0.0;
    for (std::int64_t t = 0; t < T; ++t) {
      const float* row = logits[1].data() + t * data.vocab;
      worst = std::max(worst, oracle::relative_error(row, data.row(static_cast<std::size_t>(t)), data.vocab));
      moved = std::max(moved, oracle::relative_error(row, logits[0].data() + t * data.vocab, data.vocab));
    }
    EXPECT_LE(worst, tolerance(DType::F16)) << "against transformers";
    EXPECT_GT(moved, 0.0) << "logits identical to the fp32 cache's";
  }
}

}  // namespace
}  // namespace fp4serve
