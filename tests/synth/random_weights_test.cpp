// fill_normal (vectorised where the CPU allows) against fill_normal_scalar, its one-at-a-time
// definition: same bits for every length (tails included), stream (including ones that wrap
// around 2^64), mean and standard deviation. Also the stream independence synth relies on.
#include "synth/random_weights.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace fp4serve::synth {
namespace {

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << what << ", element " << i << " of " << got.size() << ": " << got[i] << " vs " << want[i];
  }
}

TEST(RandomWeights, FillNormalEqualsTheScalarDefinition) {
  const std::uint64_t streams[] = {0, 1, stream_seed(0, "model.layers.0.mlp.experts.0.up_proj"),
                                   stream_seed(42, "lm_head.weight", 7), ~std::uint64_t{0},
                                   0ull - 3 * 0x9E3779B97F4A7C15ull};
  const float params[][2] = {{0.0f, 1.0f}, {1.0f, 0.05f}, {0.0f, 0.0220970869f}, {-3.5f, 1e-30f}, {2.0f, -7.0f}};
  for (std::uint64_t stream : streams) {
    for (const auto& p : params) {
      for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 63u, 1000u, 4099u}) {
        std::vector<float> got(n), want(n);
        fill_normal(stream, p[0], p[1], got);
        fill_normal_scalar(stream, p[0], p[1], want);
        expect_same_bits(got, want, "fill_normal");
      }
    }
  }
}

TEST(RandomWeights, FillNormalPrefixesAgreeAndStreamsDiffer) {
  // Value i depends only on (stream, i): a longer fill starts with the shorter one.
  std::vector<float> a(1001), b(37), c(1001);
  const std::uint64_t s = stream_seed(5, "x");
  fill_normal(s, 0.0f, 1.0f, a);
  fill_normal(s, 0.0f, 1.0f, b);
  expect_same_bits(std::vector<float>(a.begin(), a.begin() + 37), b, "prefix");
  fill_normal(stream_seed(5, "y"), 0.0f, 1.0f, c);
  int equal = 0;
  for (std::size_t i = 0; i < a.size(); ++i) equal += a[i] == c[i];
  EXPECT_LT(equal, 5) << "different names must give different streams";
}

TEST(RandomWeights, FillNormalHasTheStatedMomentsAndBound) {
  std::vector<float> v(1 << 18);
  fill_normal(stream_seed(1, "moments"), 0.5f, 2.0f, v);
  double sum = 0, sq = 0;
  float lo = v[0], hi = v[0];
  for (float x : v) {
    sum += x;
    sq += static_cast<double>(x) * x;
    lo = std::fmin(lo, x);
    hi = std::fmax(hi, x);
  }
  const double mean = sum / static_cast<double>(v.size());
  const double sd = std::sqrt(sq / static_cast<double>(v.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.5, 0.02);
  EXPECT_NEAR(sd, 2.0, 0.02);
  EXPECT_GE(lo, 0.5f - 3.4642f * 2.0f);
  EXPECT_LE(hi, 0.5f + 3.4642f * 2.0f);
  EXPECT_LT(lo, 0.5f - 3.0f * 2.0f) << "the tails are reached";
}

}  // namespace
}  // namespace fp4serve::synth
