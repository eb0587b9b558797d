// The AVX-512 prefill attention (flash attention over tiles of query tokens,
// kernels/avx512/attention_prefill_avx512.cpp): several softmax chunks of 256 positions, the
// causal diagonal across a chunk's edge, tiles that do not divide the tokens; each token's output
// the same in a tile of any size; positions past a token's own never read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention_check.h"
#include "kernels/isa_kernels.h"
#include "kernels/paged_kv.h"
#include "kernels/random_data.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {
namespace {

using Case = testing::AttentionCase;

bool avx512_runs() { return cpu_features().usable(CpuFeature::AVX512F) && cpu_features().usable(CpuFeature::AVX512BW); }

TEST(AttentionPrefill, TilesMatchReferenceOverSeveralChunks) {
  // m * kv >= 4 * threads (the tiles) on machines up to 8 threads. Visible positions run past one
  // chunk of 256 (two or three softmax steps, each rescaling the sums before it), and in the
  // second case the causal diagonal crosses the chunk's edge at 256; one KV head per query head
  // in the last.
  const Case cases[] = {{32, 4, 128, 9, 600}, {32, 4, 128, 20, 250}, {8, 2, 64, 33, 300}, {6, 2, 48, 17, 511},
                        {4, 4, 32, 9, 260}};
  for (const Case& c : cases)
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      if (c.dim == 128 && dtype != DType::F32) continue;  // the 16-bit widening: the smaller heads
      testing::expect_attention_matches_reference(c, static_cast<std::uint64_t>(c.m * 31 + c.past), 1.0f, 2e-6, dtype);
    }
}

TEST(AttentionPrefill, PeakedScoresInLaterChunksMatchReference) {
  // Large scores: each chunk's max differs by many units from the running one, so the factors that
  // rescale the earlier sums are far from 1 (or underflow to 0).
  testing::expect_attention_matches_reference(Case{8, 2, 64, 24, 700}, 17, 6.0f);
  testing::expect_attention_matches_reference(Case{32, 4, 128, 8, 520}, 18, 6.0f);
}

// out for case c from the AVX-512 tiles with `threads` deciding the tile size.
std::vector<float> tiles_output(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                                const std::vector<float>& v, std::int64_t threads) {
  const PagedKvCopy cache(k.data(), v.data(), c.past + c.m, c.kv * c.dim, 16);
  std::vector<float> out(q.size(), NAN);
  avx512::attention_prefill_tiles(testing::attention_args(c, cache, q.data(), out.data()), threads);
  return out;
}

TEST(AttentionPrefill, EachTokenGetsTheSameOutputInATileOfAnySize) {
  if (!avx512_runs()) GTEST_SKIP() << "no AVX-512 on this CPU";
  // threads = 1: tiles of 16 tokens; 4: of 5; 100: of one token.
  const Case c{32, 4, 128, 21, 300};
  Rng rng(5);
  const auto q = random_activations(rng, c.m, c.heads * c.dim, 2.0f);
  const auto k = random_activations(rng, c.past + c.m, c.kv * c.dim, 2.0f);
  const auto v = random_activations(rng, c.past + c.m, c.kv * c.dim);
  const auto sixteen = tiles_output(c, q, k, v, 1);
  EXPECT_EQ(tiles_output(c, q, k, v, 4), sixteen);
  EXPECT_EQ(tiles_output(c, q, k, v, 100), sixteen);
  for (float x : sixteen) ASSERT_TRUE(std::isfinite(x));
}

TEST(AttentionPrefill, PositionsPastATokensOwnAreNeverRead) {
  if (!avx512_runs()) GTEST_SKIP() << "no AVX-512 on this CPU";
  // The last token's key and value rows hold NaN: every earlier token's output must be exactly
  // what it is without them (a masked score or a zero weight times NaN would still be NaN). 18
  // tokens: tiles of 9 (threads = 1) and of 3 (threads = 3), so the last token shares its tile.
  const Case c{8, 2, 64, 18, 270};
  Rng rng(9);
  const auto q = random_activations(rng, c.m, c.heads * c.dim);
  const auto k = random_activations(rng, c.past + c.m, c.kv * c.dim);
  const auto v = random_activations(rng, c.past + c.m, c.kv * c.dim);
  auto k_bad = k, v_bad = v;
  const std::int64_t row = c.kv * c.dim, last = c.past + c.m - 1;
  for (std::int64_t d = 0; d < row; ++d) k_bad[last * row + d] = v_bad[last * row + d] = NAN;
  for (std::int64_t threads : {1, 3}) {
    const auto clean = tiles_output(c, q, k, v, threads), poisoned = tiles_output(c, q, k_bad, v_bad, threads);
    const std::size_t earlier = static_cast<std::size_t>((c.m - 1) * c.heads * c.dim);
    EXPECT_EQ(std::memcmp(clean.data(), poisoned.data(), earlier * sizeof(float)), 0) << "threads " << threads;
    EXPECT_TRUE(std::isnan(poisoned[earlier])) << "the last token sees its own NaN row";
  }
}

}  // namespace
}  // namespace fp4serve::kernels
