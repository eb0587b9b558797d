#include "util/memory_bandwidth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "common/bandwidth_stopping_rule.h"
#include "common/expect_error.h"
#include "util/thread_pool.h"
#include "util/word_sum.h"

namespace fp4serve {
namespace {

TEST(MemoryBandwidth, MeasuresEveryPassOfTheRequestedBuffer) {
  BandwidthOptions o;
  o.bytes = std::uint64_t{16} << 20;  // small: the test checks the bookkeeping, not the machine
  o.passes = 2;
  const BandwidthResult r = measure_read_bandwidth(o);
  EXPECT_EQ(r.bytes, o.bytes);
  EXPECT_EQ(r.threads, global_thread_pool().size());
  ASSERT_EQ(r.pass_gb_per_s.size(), 2u);
  for (double g : r.pass_gb_per_s) {
    EXPECT_GT(g, 0.1);  // even a loaded, sanitised build streams 16 MiB faster than 100 MB/s
    EXPECT_LE(g, r.best_gb_per_s);
  }
  EXPECT_TRUE(r.best_gb_per_s == r.pass_gb_per_s[0] || r.best_gb_per_s == r.pass_gb_per_s[1]);
  EXPECT_DOUBLE_EQ(r.median_gb_per_s, (r.pass_gb_per_s[0] + r.pass_gb_per_s[1]) / 2);  // even count: the mean
}

TEST(MemoryBandwidth, MedianIsTheMiddlePass) {
  BandwidthOptions o;
  o.bytes = std::uint64_t{16} << 20;
  o.passes = 5;
  const BandwidthResult r = measure_read_bandwidth(o);
  ASSERT_EQ(r.pass_gb_per_s.size(), 5u);
  int below = 0, above = 0;
  for (double g : r.pass_gb_per_s) {
    below += g < r.median_gb_per_s ? 1 : 0;
    above += g > r.median_gb_per_s ? 1 : 0;
  }
  EXPECT_LE(below, 2);
  EXPECT_LE(above, 2);
  EXPECT_NE(std::find(r.pass_gb_per_s.begin(), r.pass_gb_per_s.end(), r.median_gb_per_s), r.pass_gb_per_s.end());
  EXPECT_LE(r.median_gb_per_s, r.best_gb_per_s);
}

TEST(MemoryBandwidth, MinSecondsAddsPassesUntilThatMuchTimeIsMeasured) {
  BandwidthOptions o;
  o.bytes = std::uint64_t{16} << 20;
  o.passes = 3;
  o.min_seconds = 0.2;  // three passes over 16 MiB take that long only below 0.25 GB/s
  const BandwidthResult r = measure_read_bandwidth(o);
  testing::expect_bandwidth_stopping_rule(r.pass_gb_per_s, r.bytes, 3, o.min_seconds, kMaxBandwidthPasses);
  // The passes' own times add up to the total: each pass streams the buffer once.
  double seconds = 0.0;
  for (double g : r.pass_gb_per_s) seconds += static_cast<double>(r.bytes) / (g * 1e9);
  EXPECT_NEAR(seconds, r.seconds, 1e-6 * r.seconds + 1e-9 * static_cast<double>(r.pass_gb_per_s.size()));
  if (r.pass_gb_per_s.size() < static_cast<std::size_t>(kMaxBandwidthPasses)) {
    EXPECT_GE(r.seconds, o.min_seconds);
  }
  o.min_seconds = 0.0;  // the count alone, however slow the passes
  EXPECT_EQ(measure_read_bandwidth(o).pass_gb_per_s.size(), 3u);
}

TEST(MemoryBandwidth, ReadsWithTheWidestLoadsUnlessToldAWidth) {
  BandwidthOptions o;
  o.bytes = std::uint64_t{16} << 20;
  o.passes = 1;
  EXPECT_EQ(measure_read_bandwidth(o).load_bits, widest_word_sum_bits());
  // Each width reads the whole buffer: the probe checks the sum of every word it read (a wrong
  // sum throws), so a loop that skipped or repeated words would fail here.
  for (int bits : {128, 256, 512}) {
    if (bits > widest_word_sum_bits()) continue;
    o.load_bits = bits;
    const BandwidthResult r = measure_read_bandwidth(o);
    EXPECT_EQ(r.load_bits, bits);
    ASSERT_EQ(r.pass_gb_per_s.size(), 1u);
    EXPECT_GT(r.pass_gb_per_s[0], 0.1);
  }
  o.load_bits = 100;
  testing::expect_error([&] { measure_read_bandwidth(o); }, {"load_bits", "100"});
}

TEST(MemoryBandwidth, RejectsBadOptionsNamingTheParameter) {
  BandwidthOptions o;
  o.bytes = std::uint64_t{16} << 20;
  o.passes = 0;
  testing::expect_error([&] { measure_read_bandwidth(o); }, {"passes", "0"});
  o.passes = 1;
  o.bytes = 4096;
  testing::expect_error([&] { measure_read_bandwidth(o); }, {"buffer", "4096"});
  o.bytes = std::uint64_t{16} << 20;
  o.min_seconds = -1.0;
  testing::expect_error([&] { measure_read_bandwidth(o); }, {"min_seconds", "-1"});
  o.min_seconds = 61.0;
  testing::expect_error([&] { measure_read_bandwidth(o); }, {"min_seconds", "61"});
}

// One region the caller holds.
BandwidthResult measure_region(std::span<const std::uint8_t> region, const BandwidthOptions& options = {}) {
  return measure_regions_bandwidth({&region, 1}, options);
}

TEST(MemoryBandwidth, ReadsARegionTheCallerHolds) {
  std::vector<std::uint64_t> held(std::size_t{2} << 20, 3);  // 16 MiB
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(held.data());
  BandwidthOptions o;
  o.passes = 4;
  const BandwidthResult r = measure_region({bytes, held.size() * 8}, o);
  EXPECT_EQ(r.bytes, held.size() * 8);
  ASSERT_EQ(r.pass_gb_per_s.size(), 4u);
  for (double g : r.pass_gb_per_s) EXPECT_GT(g, 0.1);
  // A region that starts off an 8-byte boundary is read from its first whole word.
  EXPECT_EQ(measure_region({bytes + 3, held.size() * 8 - 3}, o).bytes, held.size() * 8 - 8);
}

TEST(MemoryBandwidth, ReadsSeveralRegionsAsOnePass) {
  std::vector<std::uint64_t> a(std::size_t{1} << 20, 5), b(std::size_t{3} << 19, 7);  // 8 MiB, 12 MiB
  const std::span<const std::uint8_t> regions[] = {{reinterpret_cast<const std::uint8_t*>(a.data()), a.size() * 8},
                                                   {reinterpret_cast<const std::uint8_t*>(b.data()) + 1, b.size() * 8 - 1}};
  BandwidthOptions o;
  o.passes = 2;
  const BandwidthResult r = measure_regions_bandwidth(regions, o);
  // Every pass reads both, the second from its first whole word.
  EXPECT_EQ(r.bytes, a.size() * 8 + b.size() * 8 - 8);
  ASSERT_EQ(r.pass_gb_per_s.size(), 2u);
  for (double g : r.pass_gb_per_s) EXPECT_GT(g, 0.1);
  std::vector<std::uint8_t> small(4096, 1);
  const std::span<const std::uint8_t> smalls[] = {small, small};
  testing::expect_error([&] { measure_regions_bandwidth(smalls); }, {"regions of 8192 bytes are too small"});
}

TEST(MemoryBandwidth, RegionErrorsNameTheProblem) {
  std::vector<std::uint8_t> small(4096, 1);
  testing::expect_error([&] { measure_region(small); }, {"region", "4096", "too small"});
  std::vector<std::uint8_t> held(std::size_t{2} << 20, 1);
  BandwidthOptions o;
  o.bytes = std::uint64_t{16} << 20;
  testing::expect_error([&] { measure_region(held, o); }, {"bytes must be 0"});
  o.bytes = 0;
  o.passes = 0;
  testing::expect_error([&] { measure_region(held, o); }, {"passes", "0"});
}

TEST(MemoryBandwidth, DefaultBufferIsWellPastTheLastLevelCache) {
  constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
  EXPECT_EQ(default_bandwidth_buffer_bytes(0), 512 * MiB);         // unknown cache: still past any LLC of 128 MiB
  EXPECT_EQ(default_bandwidth_buffer_bytes(32 * MiB), 512 * MiB);  // a desktop: the floor
  EXPECT_EQ(default_bandwidth_buffer_bytes(480 * MiB), 1920 * MiB);  // this VM's reported L3: 4x
  EXPECT_EQ(default_bandwidth_buffer_bytes(4096 * MiB), 2048 * MiB);  // capped: memory is for the model
}

}  // namespace
}  // namespace fp4serve
