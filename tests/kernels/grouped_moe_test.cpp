// The MoE driver's tasks: with few experts per thread, decode splits every expert projection into
// 128-row tasks, each a weight_rows_view of the projection; with many (batched decode, prefill)
// each projection is one task. Either way it prefetches the next task's rows while one runs.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <vector>

#include "kernels/backend.h"
#include "kernels/grouped_moe.h"
#include "kernels/moe_traffic.h"
#include "kernels/random_data.h"
#include "kernels/validation.h"
#include "kernels/weight_rows.h"
#include "util/cpu_features.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {
namespace {

TEST(GroupedMoe, RowsViewHoldsTheSameRowsForEveryStorageKind) {
  struct Kind {
    SchemeKind kind;
    DType dtype;
  };
  for (const Kind& kd : {Kind{SchemeKind::NVFP4, DType::U8}, Kind{SchemeKind::FP8, DType::F8_E4M3},
                         Kind{SchemeKind::Dense, DType::BF16}, Kind{SchemeKind::Dense, DType::F32}}) {
    Rng rng(5);
    const std::int64_t n = 40, k = 48, r0 = 7, r1 = 30;
    auto w = random_weight(rng, kd.kind, kd.dtype, n, k);
    const WeightMatrix view = weight_rows_view(w->w, r0, r1);
    ASSERT_EQ(view.n, r1 - r0);
    std::vector<float> want(static_cast<std::size_t>(k)), got(static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < view.n; ++i) {
      dequantize_row(w->w, r0 + i, want.data());
      dequantize_row(view, i, got.data());
      for (std::int64_t j = 0; j < k; ++j)
        ASSERT_EQ(std::isnan(got[j]) ? 1 : got[j], std::isnan(want[j]) ? 1 : want[j])
            << dtype_name(kd.dtype) << " row " << r0 + i << " element " << j;
    }
  }
}

// Runs every backend with a MoE of projections of 272 and 320 rows (not multiples of the 128-row
// slice) on m = each of `tokens`, for NVFP4 and BF16 experts, and expects the reference's outputs.
// Returns how many of the grouped driver's calls ran whole projections and how many ran slices,
// read back from the experts each call counted (the reference counts nothing).
struct TaskKinds {
  int whole = 0, sliced = 0;
};

TaskKinds expect_moe_matches_reference(std::int64_t experts, std::int64_t top_k, std::uint64_t seed,
                                       std::initializer_list<std::int64_t> tokens) {
  const std::int64_t threads = global_thread_count();
  TaskKinds kinds;
  for (SchemeKind kind : {SchemeKind::NVFP4, SchemeKind::Dense}) {
    const MoeShape s{.hidden = 320, .intermediate = 272, .experts = experts, .top_k = top_k, .norm_topk_prob = true,
                     .expert_kind = kind, .expert_dtype = kind == SchemeKind::NVFP4 ? DType::U8 : DType::BF16};
    Rng rng(seed);
    auto moe = random_moe(rng, s, 1 << 24);
    for (std::int64_t m : tokens) {
      const auto x = random_activations(rng, m, s.hidden);
      std::vector<float> want(static_cast<std::size_t>(m * s.hidden));
      reference_kernels().moe->run(x.data(), m, moe->layer, want.data(), Fp4Semantics::W4A16);
      for (const Backend& b : compiled_backends()) {
        if (!b.moe.present() || !cpu_features().missing(b.needs).empty()) continue;
        std::vector<float> got(want.size(), NAN);
        const MoeTraffic before = moe_traffic();
        b.moe.moe->run(x.data(), m, moe->layer, got.data(), Fp4Semantics::W4A16);
        const MoeTraffic call = moe_traffic() - before;
        if (dynamic_cast<const GroupedMoeKernel*>(b.moe.moe) != nullptr) {
          EXPECT_EQ(call.calls, 1u) << b.name;
          EXPECT_GE(call.experts, static_cast<std::uint64_t>(top_k)) << b.name << " m=" << m;
          ++(moe_whole_projections(static_cast<std::int64_t>(call.experts), 0, threads) ? kinds.whole : kinds.sliced);
        }
        EXPECT_LE(output_error(got.data(), want.data(), m, s.hidden), validation_tolerance(b.moe.precision))
            << b.name << " m=" << m;
      }
    }
  }
  return kinds;
}

// 8 experts, top 2: decode with fewer than 4 used experts per thread runs the projections as
// 128-row slices (the last one shorter), which the small shapes of Backends.MoeMatchesReference
// never reach. One token uses 2 experts, fewer than 4 per thread on any pool: slices.
TEST(GroupedMoe, DecodeSlicesOfLargeExpertsMatchReference) {
  EXPECT_GT(expect_moe_matches_reference(8, 2, 23, {1, 3}).sliced, 0);
}

TEST(GroupedMoe, WholeProjectionsNeedFourUsedExpertsOrTwoBusyOnesPerThread) {
  EXPECT_FALSE(moe_whole_projections(7, 0, 2));
  EXPECT_TRUE(moe_whole_projections(8, 0, 2));  // batch 1 of 30b-a3b (top 8) on 2 threads
  EXPECT_FALSE(moe_whole_projections(8, 0, 16));
  EXPECT_TRUE(moe_whole_projections(82, 0, 16));  // batch 16 on 16 threads
  EXPECT_FALSE(moe_whole_projections(3, 1, 1));
  EXPECT_TRUE(moe_whole_projections(3, 2, 1));  // prefill: experts with >= 16 tokens each
  EXPECT_TRUE(moe_whole_projections(4, 0, 1));
}

// 32 experts, top 8: from one token on, a pool of up to 2 threads has 4 used experts per thread,
// so every projection is one task that writes straight into the slot buffers.
TEST(GroupedMoe, WholeProjectionsOfManyExpertsMatchReference) {
  const TaskKinds kinds = expect_moe_matches_reference(32, 8, 29, {1, 2, 5});
  if (global_thread_count() <= 2) {
    EXPECT_GT(kinds.whole, 0);
  } else if (kinds.whole == 0) {
    GTEST_SKIP() << "no call had 4 used experts per thread on " << global_thread_count() << " threads";
  }
}

}  // namespace
}  // namespace fp4serve::kernels
