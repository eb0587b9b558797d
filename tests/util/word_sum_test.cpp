#include "util/word_sum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/expect_error.h"

namespace fp4serve {
namespace {

std::vector<int> widths_this_cpu_runs() {
  std::vector<int> widths;
  for (int bits : {128, 256, 512})
    if (bits <= widest_word_sum_bits()) widths.push_back(bits);
  return widths;
}

TEST(WordSum, EveryWidthSumsEveryRangeLikeThePlainLoop) {
  std::vector<std::uint64_t> words(1000);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = 0x9E3779B97F4A7C15ull * (i + 1);  // wraps: sums are mod 2^64
  const std::int64_t ends[][2] = {{0, 1000}, {3, 997}, {1, 32}, {5, 37}, {0, 0}, {7, 8}, {100, 163}};
  for (int bits : widths_this_cpu_runs()) {
    const WordSumFn sum = word_sum(bits).fn;
    EXPECT_EQ(word_sum(bits).load_bits, bits);
    for (const auto& be : ends) {
      std::uint64_t expected = 0;
      for (std::int64_t i = be[0]; i < be[1]; ++i) expected += words[static_cast<std::size_t>(i)];
      EXPECT_EQ(sum(words.data(), be[0], be[1]), expected) << bits << "-bit loads over [" << be[0] << ", " << be[1] << ")";
    }
  }
}

TEST(WordSum, ZeroPicksTheWidestAndOthersAreRefusedByName) {
  EXPECT_EQ(word_sum(0).fn, word_sum(widest_word_sum_bits()).fn);
  EXPECT_EQ(word_sum(0).load_bits, widest_word_sum_bits());
  EXPECT_GE(widest_word_sum_bits(), 128);
  testing::expect_error([] { word_sum(100); }, {"load_bits", "100"});
  testing::expect_error([] { word_sum(64); }, {"load_bits", "64"});
  // Runs on a CPU without them, or with FP4SERVE_CPU_DISABLE=avx512f,avx2 (tests/CMakeLists.txt).
  if (widest_word_sum_bits() < 512) testing::expect_error([] { word_sum(512); }, {"load_bits 512", "AVX-512F"});
  if (widest_word_sum_bits() < 256) testing::expect_error([] { word_sum(256); }, {"load_bits 256", "AVX2"});
}

}  // namespace
}  // namespace fp4serve
