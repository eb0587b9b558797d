// The SIMD attention backends' separate paths against the reference: prefill (AVX-512: tiles of
// tokens, more in attention_prefill_test.cpp; AVX2: per (token, KV head) with every query head of
// the group), per (token, head) (decode over a short cache), per
// (token, KV head, slice of positions) (decode over a long cache), each head_dim from 16 to
// 128 (register-resident, head_dim / 16 as a template argument) and a wider one, position
// counts around the 16-position blocks, paged caches with blocks of 1, 5 and 16 tokens, and
// caches of fp32, f16 and bf16 elements (each path is a template over the element type).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attention_check.h"
#include "kernels/attention_split.h"
#include "kernels/kv_cache.h"
#include "kernels/online_softmax.h"
#include "kernels/validation.h"
#include "util/error.h"

namespace fp4serve::kernels {
namespace {

using Case = testing::AttentionCase;

void check(const Case& c, float amplitude) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16})
    testing::expect_attention_matches_reference(
        c, static_cast<std::uint64_t>(c.heads * 1009 + c.kv * 101 + c.dim * 7 + c.m * 3 + c.past), amplitude, 2e-6, dtype);
}

TEST(AttentionPaths, GroupedPrefillMatchesReference) {
  // m * kv >= 4 * threads picks the prefill path on machines up to 20 threads.
  for (std::int64_t dim : {16, 32, 48, 64, 80, 96, 112, 128})
    for (const Case& c : {Case{8, 2, dim, 40, 0}, Case{6, 2, dim, 41, 23}})
      check(c, 1.0f);
  // Qwen3-30B-A3B's layout (32 query heads on 4 KV heads, 128 wide) past several blocks of 16.
  check(Case{32, 4, 128, 37, 100}, 1.0f);
}

TEST(AttentionPaths, PerHeadDecodeMatchesReference) {
  for (std::int64_t dim : {16, 48, 128, 144})
    for (const Case& c : {Case{8, 2, dim, 1, 0}, Case{8, 2, dim, 1, 15}, Case{8, 2, dim, 1, 16}, Case{8, 2, dim, 2, 47},
                          Case{4, 4, dim, 50, 3}})
      check(c, 1.0f);
}

TEST(AttentionPaths, SplitDecodeMatchesReference) {
  // Fewer (token, KV head) tasks than 4 per thread and at least 512 positions: slices of >= 256
  // positions whose partial softmaxes are rescaled and summed. One KV head splits on any thread
  // count; Qwen3's 4 KV heads at one token from 2 threads on.
  for (std::int64_t dim : {16, 64, 128})
    for (const Case& c : {Case{8, 1, dim, 1, 511}, Case{8, 1, dim, 1, 1100}, Case{8, 1, dim, 2, 700}})
      check(c, 1.0f);
  // Qwen3-30B-A3B's layout, slices that do not fall on the 16-position blocks.
  check(Case{32, 4, 128, 1, 1000}, 1.0f);
  check(Case{32, 4, 128, 1, 2047}, 1.0f);
  // Qwen3.5's full attention: 32 query heads on 2 KV heads of 256 (two pieces of 128).
  check(Case{32, 2, 256, 1, 700}, 1.0f);
}

TEST(AttentionPaths, StartupValidationRunsTheSplitDecodePath) {
  // Qwen3-30B-A3B's heads on 2 threads: only a long-cache decode case splits, and start-up
  // validation must hold one, or the split path would serve without having been proven.
  auto splits = [](std::int64_t m, std::int64_t past) {
    AttentionArgs a;
    a.m = m;
    a.past = past;
    a.num_heads = 32;
    a.num_kv_heads = 4;
    a.head_dim = 128;
    return attention_splits(a, 2);
  };
  EXPECT_LT(splits(1, 37), 2);    // short cache: per-head tasks
  EXPECT_LT(splits(32, 600), 2);  // prefill: enough grouped tasks already
  EXPECT_EQ(splits(1, 700), 2);   // 4 tasks per thread on 2 threads; 701 positions hold 2 slices of 256
  bool validated = false;
  for (const auto& c : kAttentionValidation) validated = validated || splits(c.m, c.past) >= 2;
  EXPECT_TRUE(validated);
}

TEST(AttentionPaths, StartupValidationRunsPrefillPastOneSoftmaxChunk) {
  // Qwen3-30B-A3B's 4 KV heads on 2 threads: a case with >= 4 (token, KV head) tasks per thread
  // (avx512's prefill tiles) whose positions need more than one softmax chunk, so the running
  // max and sum are proven at start-up too.
  bool validated = false;
  for (const auto& c : kAttentionValidation) validated = validated || (c.m * 4 >= 4 * 2 && c.past + c.m > kPrefillChunk);
  EXPECT_TRUE(validated);
}

TEST(AttentionPaths, PeakedScoresMatchReference) {
  // Large scores: the softmax is nearly one-hot, so an off-by-one position or a wrong scale shows.
  check(Case{8, 2, 64, 40, 9}, 6.0f);
  check(Case{8, 2, 64, 1, 70}, 6.0f);
  // Split decode: the peak lies in one slice, the other slices' weights must fall to ~0.
  check(Case{8, 1, 64, 1, 900}, 6.0f);
}

TEST(AttentionPaths, SixteenBitCachesHoldRoundedRows) {
  // The same keys and values through an f16 or bf16 cache: the output moves by about the
  // elements' rounding (2^-11, 2^-8 relative), not more and not zero (the rows really are rounded).
  const Case c{8, 2, 64, 3, 40};
  Rng rng(7);
  const std::int64_t total = c.past + c.m, row = c.kv * c.dim;
  const auto q = random_activations(rng, c.m, c.heads * c.dim);
  const auto k = random_activations(rng, total, row);
  const auto v = random_activations(rng, total, row);
  auto run = [&](DType dtype) {
    const PagedKvCopy cache(k.data(), v.data(), total, c.kv, c.dim, 16, 3, 1, 1, dtype);
    std::vector<float> out(q.size());
    reference_kernels().attention->run(testing::attention_args(c, cache, q.data(), out.data()));
    return out;
  };
  const auto f32 = run(DType::F32), f16 = run(DType::F16), bf16 = run(DType::BF16);
  const double e16 = output_error(f16.data(), f32.data(), c.m, c.heads * c.dim);
  const double eb16 = output_error(bf16.data(), f32.data(), c.m, c.heads * c.dim);
  EXPECT_GT(e16, 0.0);
  EXPECT_LT(e16, 2e-3);
  EXPECT_GT(eb16, e16);  // 8 significant bits against 11
  EXPECT_LT(eb16, 2e-2);
}

TEST(AttentionPaths, TokenRowsLieHeadByHeadInABlock) {
  // kernels.h's layout: KV head g's row at slot s starts at element side_offset + (g * B + s) *
  // head_dim, so each head's rows of a block are one run. A token's row written there reads back
  // element by element, and nothing else in the block is touched.
  const KvBlockSide side{5, 3, 2, 4};  // offset 5, 3 slots, 2 KV heads of 4
  const std::int64_t elements = 5 + 2 * 3 * 4 + 7;
  for (DType dtype : {DType::F32, DType::BF16}) {
    const auto bytes = static_cast<std::int64_t>(kv_element_bytes(dtype));
    std::vector<std::byte> block(static_cast<std::size_t>(elements * bytes));
    const std::vector<float> nans(static_cast<std::size_t>(elements), NAN);
    store_kv_row(block.data(), dtype, nans.data(), elements);
    const float row[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    store_kv_token(block.data(), dtype, side, 1, row);
    for (std::int64_t e = 0; e < elements; ++e) {
      const float x = load_kv_element(block.data(), dtype, e);
      if (e >= 9 && e < 13) EXPECT_EQ(x, row[e - 9]) << "head 0, element " << e;          // 5 + (0 * 3 + 1) * 4
      else if (e >= 21 && e < 25) EXPECT_EQ(x, row[4 + e - 21]) << "head 1, element " << e;  // 5 + (1 * 3 + 1) * 4
      else EXPECT_TRUE(std::isnan(x)) << "element " << e << " was written";
    }
    for (std::int64_t j = 0; j < 8; ++j) EXPECT_EQ(load_kv_token_element(block.data(), dtype, side, 1, j), row[j]) << j;
  }
}

TEST(AttentionPaths, UnsupportedCacheTypeIsAClearError) {
  const auto q = std::vector<float>(64, 0.5f), kv = std::vector<float>(32, 0.25f);
  const PagedKvCopy cache(kv.data(), kv.data(), 1, 2, 16, 16);
  std::vector<float> out(64);
  AttentionArgs a;
  a.q = q.data();
  a.out = out.data();
  cache.point(a);
  a.kv_dtype = DType::F8_E4M3;
  a.m = 1;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 16;
  for (const Backend& b : compiled_backends()) {
    if (!b.attention.present() || b.name == "reference" || !cpu_features().missing(b.needs).empty()) continue;
    try {
      b.attention.attention->run(a);
      ADD_FAILURE() << b.name << " accepted an F8_E4M3 KV cache";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("KV cache element type F8_E4M3 is not supported"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fp4serve::kernels
