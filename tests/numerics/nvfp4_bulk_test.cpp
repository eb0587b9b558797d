// The bulk NVFP4 helpers against their scalar definitions, bit for bit: float_to_e2m1 for the
// encoder (every 16-bit prefix of the fp32 space, the neighbourhood of every rounding midpoint
// and code value, NaNs, infinities, signed zeros, random bit patterns, random divisors) and
// nvfp4::amax for the block amax. Both the portable and (where the CPU has it) the AVX-512
// implementation are checked. FP4SERVE_EXHAUSTIVE=1 also runs all 2^32 fp32 patterns.
#include "numerics/nvfp4_bulk.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/nvfp4.h"
#include "numerics/scalar_formats.h"

namespace fp4serve::nvfp4 {
namespace {

using Encoder = std::function<void(const float*, const float*, std::size_t, std::uint8_t*)>;
using Amaxer = std::function<void(const float*, std::size_t, float*)>;

struct Impl {
  std::string name;
  Encoder encode;
  Amaxer amaxes;
};

std::vector<Impl> implementations() {
  std::vector<Impl> impls = {{"portable", encode_blocks_div_portable, block_amaxes_portable},
                             {"dispatched", encode_blocks_div, block_amaxes}};
  if (has_avx512_bulk()) impls.push_back({"avx512", encode_blocks_div_avx512, block_amaxes_avx512});
  return impls;
}

std::uint8_t code_at(const std::vector<std::uint8_t>& packed, std::size_t k) {
  return static_cast<std::uint8_t>(k % 2 == 0 ? packed[k / 2] & 0x0F : packed[k / 2] >> 4);
}

// Pads `values` to whole blocks, encodes them with each block's divisor and compares every code
// with float_to_e2m1(x / divisor). Returns the number of mismatches (reporting the first few).
int count_encode_mismatches(const Impl& impl, std::vector<float> values, const std::vector<float>& block_denoms) {
  while (values.size() % kBlock != 0) values.push_back(0.0f);
  const std::size_t blocks = values.size() / kBlock;
  std::vector<float> denoms(blocks);
  for (std::size_t b = 0; b < blocks; ++b) denoms[b] = block_denoms[b % block_denoms.size()];
  std::vector<std::uint8_t> packed(blocks * kBlock / 2);
  impl.encode(values.data(), denoms.data(), blocks, packed.data());
  int mismatches = 0;
  for (std::size_t k = 0; k < values.size(); ++k) {
    const float denom = denoms[k / kBlock];
    const std::uint8_t want = float_to_e2m1(values[k] / denom);
    const std::uint8_t got = code_at(packed, k);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << impl.name << ": x = " << values[k] << " (bits 0x" << std::hex
                    << std::bit_cast<std::uint32_t>(values[k]) << std::dec << ") / " << denom << ": got code "
                    << int{got} << ", float_to_e2m1 gives " << int{want};
    }
  }
  return mismatches;
}

// Values around every place the rounding changes or a code sits, both signs, plus specials.
std::vector<float> edge_values() {
  const float points[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f,
                          2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f, 448.0f};
  std::vector<float> v;
  for (float p : points) {
    float lo = p, hi = p;
    v.push_back(p);
    for (int step = 0; step < 4; ++step) {
      lo = std::nextafter(lo, -1.0f);
      hi = std::nextafter(hi, 1e9f);
      v.push_back(lo);
      v.push_back(hi);
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float s : {std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::max(), inf, std::numeric_limits<float>::quiet_NaN(),
                  std::bit_cast<float>(0x7F800001u) /* signalling NaN */, std::bit_cast<float>(0x7FFFFFFFu)}) {
    v.push_back(s);
  }
  const std::size_t positives = v.size();
  for (std::size_t i = 0; i < positives; ++i) v.push_back(-v[i]);  // -0.0 and negative NaNs included
  return v;
}

TEST(Nvfp4Bulk, EncoderMatchesFloatToE2m1OnEdges) {
  // Divisor 1 keeps the edges exact; the odd divisors move them onto division roundings.
  const std::vector<float> denoms = {1.0f, 0.5f, 3.0f, 1.0f / 3.0f, 0x1p-9f * 0.0123f, 448.0f * 17.0f};
  for (const Impl& impl : implementations()) {
    EXPECT_EQ(count_encode_mismatches(impl, edge_values(), {1.0f}), 0) << impl.name;
    for (float d : denoms) {
      std::vector<float> scaled;
      for (float x : edge_values()) scaled.push_back(x * d);  // x*d/d is x or one rounding off it
      EXPECT_EQ(count_encode_mismatches(impl, scaled, {d}), 0) << impl.name << " divisor " << d;
    }
  }
}

TEST(Nvfp4Bulk, EncoderMatchesFloatToE2m1OnEvery16BitPrefix) {
  // All 65,536 sign/exponent/top-mantissa combinations, each with several low halves.
  std::vector<float> values;
  std::mt19937 rng(7);
  for (std::uint32_t top = 0; top < 0x10000u; ++top) {
    for (std::uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0xFFFFu, static_cast<std::uint32_t>(rng() & 0xFFFFu)}) {
      values.push_back(std::bit_cast<float>(top << 16 | low));
    }
  }
  for (const Impl& impl : implementations()) EXPECT_EQ(count_encode_mismatches(impl, values, {1.0f}), 0) << impl.name;
}

TEST(Nvfp4Bulk, EncoderMatchesFloatToE2m1OnRandomBitsAndDivisors) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> log_denom(-30.0f, 30.0f);
  std::normal_distribution<float> gaussian(0.0f, 4.0f);
  std::vector<float> values, denoms;
  for (int i = 0; i < 1 << 18; ++i) values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  for (int i = 0; i < 1 << 18; ++i) values.push_back(gaussian(rng));  // the values quantizers see
  for (int b = 0; b < 997; ++b) denoms.push_back(std::exp2(log_denom(rng)));
  for (const Impl& impl : implementations()) {
    EXPECT_EQ(count_encode_mismatches(impl, values, {1.0f}), 0) << impl.name;
    EXPECT_EQ(count_encode_mismatches(impl, values, denoms), 0) << impl.name;
  }
}

TEST(Nvfp4Bulk, EncoderMatchesFloatToE2m1OnAllFloats) {
  const char* env = std::getenv("FP4SERVE_EXHAUSTIVE");
  if (env == nullptr || std::string(env) != "1") GTEST_SKIP() << "set FP4SERVE_EXHAUSTIVE=1 (about a minute)";
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<float> values(kChunk);
  std::vector<float> denoms(kChunk / kBlock, 1.0f);
  std::vector<std::uint8_t> packed(kChunk / 2);
  // The reference once per pattern; each implementation checked against it.
  std::vector<std::uint8_t> want(kChunk);
  for (std::uint64_t first = 0; first < (std::uint64_t{1} << 32); first += kChunk) {
    for (std::size_t i = 0; i < kChunk; ++i) {
      values[i] = std::bit_cast<float>(static_cast<std::uint32_t>(first + i));
      want[i] = float_to_e2m1(values[i]);
    }
    for (const Impl& impl : implementations()) {
      impl.encode(values.data(), denoms.data(), kChunk / kBlock, packed.data());
      for (std::size_t i = 0; i < kChunk; ++i) {
        ASSERT_EQ(code_at(packed, i), want[i]) << impl.name << ": bits 0x" << std::hex << first + i;
      }
    }
  }
}

TEST(Nvfp4Bulk, BlockAmaxMatchesAmaxIncludingNaN) {
  std::mt19937 rng(3);
  std::normal_distribution<float> gaussian(0.0f, 2.0f);
  const std::vector<float> edges = edge_values();
  constexpr std::size_t kBlocks = 4096;
  std::vector<float> x(kBlocks * kBlock);
  for (std::size_t b = 0; b < kBlocks; ++b) {
    for (int k = 0; k < kBlock; ++k) {
      // Mostly Gaussian; some blocks get edge values (NaN, Inf, -0, denormals) sprinkled in.
      const bool edge = b % 4 == 0 && rng() % 5 == 0;
      x[b * kBlock + k] = edge ? edges[rng() % edges.size()] : gaussian(rng);
    }
  }
  for (int k = 0; k < kBlock; ++k) x[k] = -0.0f;  // an all-zero block (of negative zeros)
  std::vector<float> got(kBlocks);
  for (const Impl& impl : implementations()) {
    impl.amaxes(x.data(), kBlocks, got.data());
    int nans = 0;
    for (std::size_t b = 0; b < kBlocks; ++b) {
      const float want = amax(std::span<const float>(x.data() + b * kBlock, kBlock));
      if (std::isnan(want)) {
        ++nans;
        ASSERT_TRUE(std::isnan(got[b])) << impl.name << " block " << b;
        // The quantizers turn a NaN amax into a NaN scale whose sign reaches the E4M3 code.
        ASSERT_FALSE(std::signbit(got[b])) << impl.name << " block " << b;
      } else {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[b]), std::bit_cast<std::uint32_t>(want))
            << impl.name << " block " << b << ": got " << got[b] << ", amax gives " << want;
      }
    }
    EXPECT_GT(nans, 0) << "the data must contain NaN blocks for this test to mean anything";
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got[0]), 0u) << "all -0.0 block: amax +0.0";
  }
}

}  // namespace
}  // namespace fp4serve::nvfp4
