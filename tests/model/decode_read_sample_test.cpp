#include "model/decode_read_sample.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/weight_rows.h"

namespace fp4serve {
namespace {

using Span = std::span<const std::uint8_t>;

std::uint64_t total(const std::vector<Span>& spans) {
  std::uint64_t n = 0;
  for (const Span& s : spans) n += s.size();
  return n;
}

// Each piece lies inside `mem`, and no byte is read twice.
void expect_inside_and_disjoint(const std::vector<Span>& pieces, const std::vector<std::uint8_t>& mem) {
  std::vector<int> seen(mem.size(), 0);
  for (const Span& p : pieces) {
    ASSERT_GE(p.data(), mem.data());
    ASSERT_LE(p.data() + p.size(), mem.data() + mem.size());
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_EQ(++seen[static_cast<std::size_t>(p.data() - mem.data()) + i], 1);
  }
}

TEST(DecodeReadSample, JoinsNeighboursAndTakesAllWhenTheBudgetCoversThem) {
  std::vector<std::uint8_t> mem(10000);
  // Out of order; [0, 1000) and [1008, 2000) are 8 bytes apart, [5000, 6000) stands alone.
  const std::vector<Span> spans = {{mem.data() + 5000, 1000}, {mem.data() + 1008, 992}, {mem.data(), 1000}};
  const std::vector<Span> all = sample_evenly(spans, 1 << 20, 256);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].data(), mem.data());
  EXPECT_EQ(all[0].size(), 2000u);  // the 8-byte gap read too
  EXPECT_EQ(all[1].data(), mem.data() + 5000);
  EXPECT_EQ(all[1].size(), 1000u);
}

TEST(DecodeReadSample, SpreadsTheBudgetEvenlyInPieces) {
  std::vector<std::uint8_t> mem(1 << 20);
  // Four far-apart runs of 64 KiB.
  std::vector<Span> spans;
  for (int r = 0; r < 4; ++r) spans.push_back({mem.data() + r * 256 * 1024, 64 * 1024});
  const std::uint64_t budget = 40 * 1024, piece = 4 * 1024;
  const std::vector<Span> pieces = sample_evenly(spans, budget, piece);
  EXPECT_EQ(total(pieces), budget);
  expect_inside_and_disjoint(pieces, mem);
  // Ten pieces, one every 25.6 KiB of the 256 KiB laid end to end: the first at the start, one
  // runs on across the second run's end (11 spans), and every run gets two or three spans.
  ASSERT_EQ(pieces.size(), 11u);
  EXPECT_EQ(pieces.front().data(), mem.data());
  for (int r = 0; r < 4; ++r) {
    int in_run = 0;
    for (const Span& p : pieces) in_run += p.data() >= spans[r].data() && p.data() < spans[r].data() + spans[r].size();
    EXPECT_GE(in_run, 2) << r;
    EXPECT_LE(in_run, 3) << r;
  }
}

TEST(DecodeReadSample, APieceRunsOnAcrossARunsEnd) {
  std::vector<std::uint8_t> mem(1 << 16);
  // Two runs of 3000 bytes; one piece of 4000 bytes from the start takes all of the first and
  // 1000 bytes of the second.
  const std::vector<Span> spans = {{mem.data(), 3000}, {mem.data() + 10000, 3000}};
  const std::vector<Span> pieces = sample_evenly(spans, 4000, 4000);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].data(), mem.data());
  EXPECT_EQ(pieces[0].size(), 3000u);
  EXPECT_EQ(pieces[1].data(), mem.data() + 10000);
  EXPECT_EQ(pieces[1].size(), 1000u);
}

kernels::WeightMatrix matrix_8x64(SchemeKind kind, DType dtype, const std::uint8_t* data, const std::uint8_t* scales) {
  kernels::WeightMatrix w;
  w.kind = kind;
  w.dtype = dtype;
  w.n = 8;
  w.k = 64;
  w.data = data;
  w.block_scales = scales;
  return w;
}

TEST(DecodeReadSample, WeightSpansCoverCodesAndBlockScales) {
  std::vector<std::uint8_t> mem(4096);
  const kernels::WeightMatrix nvfp4 = matrix_8x64(SchemeKind::NVFP4, DType::U8, mem.data(), mem.data() + 1000);
  EXPECT_EQ(kernels::weight_row_bytes(nvfp4), 32);
  EXPECT_EQ(kernels::weight_codes(nvfp4).size(), 8u * 32u);
  EXPECT_EQ(kernels::weight_block_scales(nvfp4).data(), mem.data() + 1000);
  EXPECT_EQ(kernels::weight_block_scales(nvfp4).size(), 8u * 4u);
  EXPECT_EQ(kernels::weight_bytes(nvfp4), 8u * 32u + 8u * 4u);
  const kernels::WeightMatrix bf16 = matrix_8x64(SchemeKind::Dense, DType::BF16, mem.data(), nullptr);
  EXPECT_EQ(kernels::weight_codes(bf16).size(), 8u * 64u * 2u);
  EXPECT_TRUE(kernels::weight_block_scales(bf16).empty());
  EXPECT_EQ(kernels::weight_bytes(bf16), 8u * 64u * 2u);
}

}  // namespace
}  // namespace fp4serve
