// The MoE driver's row slices: decode splits every expert projection into 128-row tasks, each a
// weight_rows_view of the projection, and prefetches the next task's rows while one runs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "kernels/grouped_moe.h"
#include "kernels/random_data.h"
#include "kernels/validation.h"
#include "kernels/weight_rows.h"
#include "util/cpu_features.h"

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

// Projections of 272 and 320 rows: decode runs them as 128-row slices (the last one shorter),
// which the small shapes of Backends.MoeMatchesReference never reach.
TEST(GroupedMoe, DecodeSlicesOfLargeExpertsMatchReference) {
  for (SchemeKind kind : {SchemeKind::NVFP4, SchemeKind::Dense}) {
    const MoeShape s{.hidden = 320, .intermediate = 272, .experts = 8, .top_k = 2, .norm_topk_prob = true,
                     .expert_kind = kind, .expert_dtype = kind == SchemeKind::NVFP4 ? DType::U8 : DType::BF16};
    Rng rng(23);
    auto moe = random_moe(rng, s, 1 << 24);
    for (std::int64_t m : {1, 3}) {
      const auto x = random_activations(rng, m, s.hidden);
      std::vector<float> want(static_cast<std::size_t>(m * s.hidden));
      reference_kernels().moe->run(x.data(), m, moe->layer, want.data(), Fp4Semantics::W4A16);
      for (const Backend& b : compiled_backends()) {
        if (!b.moe.present() || !cpu_features().missing(b.needs).empty()) continue;
        std::vector<float> got(want.size(), NAN);
        b.moe.moe->run(x.data(), m, moe->layer, got.data(), Fp4Semantics::W4A16);
        EXPECT_LE(output_error(got.data(), want.data(), m, s.hidden), validation_tolerance(b.moe.precision))
            << b.name << " m=" << m;
      }
    }
  }
}

}  // namespace
}  // namespace fp4serve::kernels
