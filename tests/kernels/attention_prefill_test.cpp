// The prefill attention tiles of the SIMD backends (flash attention over tiles of query tokens,
// kernels/avx512/attention_prefill_avx512.cpp, kernels/avx2/attention_prefill_avx2.cpp, head_dim
// a multiple of 32 on AVX2, and the AMX tiles of kernels/amx/attention_prefill_amx.cpp): several softmax chunks of 256 positions, the
// causal diagonal across a chunk's edge, tiles that do not divide the tokens; each token's output
// the same in a tile of any size; positions past a token's own never read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention_check.h"
#include "kernels/backend.h"
#include "kernels/isa_kernels.h"
#include "kernels/paged_kv.h"
#include "kernels/random_data.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {
namespace {

using Case = testing::AttentionCase;

using TilesFn = void (*)(const AttentionArgs&, std::int64_t);

struct Tiles {
  const char* name;
  TilesFn run;
};

// The tile kernels this CPU runs.
std::vector<Tiles> runnable_tiles() {
  std::vector<Tiles> out;
  const auto& f = cpu_features();
  if (f.usable(CpuFeature::AVX2) && f.usable(CpuFeature::FMA) && f.usable(CpuFeature::F16C))
    out.push_back({"avx2", avx2::attention_prefill_tiles});
  if (f.usable(CpuFeature::AVX512F) && f.usable(CpuFeature::AVX512BW)) out.push_back({"avx512", avx512::attention_prefill_tiles});
  // amx's needs include the OS's permission for the tile state.
  if (const Backend* amx = find_backend("amx"); amx != nullptr && f.missing(amx->needs).empty())
    out.push_back({"amx", amx::attention_prefill_tiles});
  return out;
}

TEST(AttentionPrefill, TilesMatchReferenceOverSeveralChunks) {
  // m * kv >= 4 * threads (the tiles) on machines up to 4 threads. Visible positions run past one
  // chunk of 256 (two or three softmax steps, each rescaling the sums before it), and in the
  // second case the causal diagonal crosses the chunk's edge at 256; one KV head per query head
  // in the fifth; Qwen3.5's full attention (32 query heads on 2 KV heads of 256: the value sums in
  // two pieces of 128) in the last.
  const Case cases[] = {{32, 4, 128, 9, 600}, {32, 4, 128, 20, 250}, {8, 2, 64, 33, 300}, {6, 2, 48, 17, 511},
                        {4, 4, 32, 9, 260},   {32, 2, 256, 9, 270}};
  for (const Case& c : cases)
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      if (c.dim >= 128 && dtype != DType::F32) continue;  // the 16-bit widening: the smaller heads
      testing::expect_attention_matches_reference(c, static_cast<std::uint64_t>(c.m * 31 + c.past), 1.0f, 2e-6, dtype);
    }
}

TEST(AttentionPrefill, PeakedScoresInLaterChunksMatchReference) {
  // Large scores: each chunk's max differs by many units from the running one, so the factors that
  // rescale the earlier sums are far from 1 (or underflow to 0).
  testing::expect_attention_matches_reference(Case{8, 2, 64, 24, 700}, 17, 6.0f);
  testing::expect_attention_matches_reference(Case{32, 4, 128, 8, 520}, 18, 6.0f);
}

// out for case c from `tiles` with `threads` deciding the tile size.
std::vector<float> tiles_output(const Tiles& tiles, const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                                const std::vector<float>& v, std::int64_t threads) {
  const PagedKvCopy cache(k.data(), v.data(), c.past + c.m, c.kv, c.dim, 16);
  std::vector<float> out(q.size(), NAN);
  tiles.run(testing::attention_args(c, cache, q.data(), out.data()), threads);
  return out;
}

TEST(AttentionPrefill, EachTokenGetsTheSameOutputInATileOfAnySize) {
  if (runnable_tiles().empty()) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  // threads = 1: tiles of 16 tokens (amx: all 21 in one); 4: of 5; 100: of one token.
  const Case c{32, 4, 128, 21, 300};
  Rng rng(5);
  const auto q = random_activations(rng, c.m, c.heads * c.dim, 2.0f);
  const auto k = random_activations(rng, c.past + c.m, c.kv * c.dim, 2.0f);
  const auto v = random_activations(rng, c.past + c.m, c.kv * c.dim);
  for (const Tiles& tiles : runnable_tiles()) {
    const auto sixteen = tiles_output(tiles, c, q, k, v, 1);
    EXPECT_EQ(tiles_output(tiles, c, q, k, v, 4), sixteen) << tiles.name;
    EXPECT_EQ(tiles_output(tiles, c, q, k, v, 100), sixteen) << tiles.name;
    for (float x : sixteen) ASSERT_TRUE(std::isfinite(x)) << tiles.name;
  }
}

TEST(AttentionPrefill, PositionsPastATokensOwnAreNeverRead) {
  if (runnable_tiles().empty()) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  // The last token's rows hold NaN (keys and values, or the values alone) or Inf (values): every
  // earlier token's output must be exactly what it is without them (a masked score or a zero
  // weight times NaN or Inf would be NaN), and the last token's own must not be finite (with
  // finite keys only its value row can make it so: the AMX tiles sum such a row apart). 18
  // tokens: tiles of 9 (threads = 1) and of 3 (threads = 3), so the last token shares its tile.
  const Case c{8, 2, 64, 18, 270};
  Rng rng(9);
  const auto q = random_activations(rng, c.m, c.heads * c.dim);
  const auto k = random_activations(rng, c.past + c.m, c.kv * c.dim);
  const auto v = random_activations(rng, c.past + c.m, c.kv * c.dim);
  const std::int64_t row = c.kv * c.dim, last = c.past + c.m - 1;
  struct Poison {
    const char* what;
    bool keys;
    float value;
  };
  for (const Poison& p : {Poison{"NaN keys and values", true, NAN}, Poison{"NaN values", false, NAN},
                          Poison{"infinite values", false, INFINITY}}) {
    auto k_bad = k, v_bad = v;
    for (std::int64_t d = 0; d < row; ++d) {
      if (p.keys) k_bad[last * row + d] = p.value;
      v_bad[last * row + d] = p.value;
    }
    for (const Tiles& tiles : runnable_tiles())
      for (std::int64_t threads : {1, 3}) {
        const auto clean = tiles_output(tiles, c, q, k, v, threads), poisoned = tiles_output(tiles, c, q, k_bad, v_bad, threads);
        const std::size_t earlier = static_cast<std::size_t>((c.m - 1) * c.heads * c.dim);
        EXPECT_EQ(std::memcmp(clean.data(), poisoned.data(), earlier * sizeof(float)), 0)
            << tiles.name << " threads " << threads << ", " << p.what;
        EXPECT_FALSE(std::isfinite(poisoned[earlier])) << tiles.name << ": the last token sees its own row, " << p.what;
      }
  }
}

}  // namespace
}  // namespace fp4serve::kernels
