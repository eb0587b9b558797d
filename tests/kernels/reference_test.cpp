// The reference is the source of truth, so it is itself checked against the plainest possible
// code: whole-matrix dequantization with the numerics functions and one token at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/random_data.h"
#include "kernels/reference/reference_dots.h"
#include "kernels/weight_rows.h"
#include "numerics/nvfp4.h"
#include "numerics/scalar_formats.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace fp4serve::kernels {
namespace {

std::vector<float> naive_gemm(const std::vector<float>& x, std::int64_t m, const WeightMatrix& w, Fp4Semantics sem) {
  std::vector<float> wd(static_cast<std::size_t>(w.n * w.k));
  if (w.kind == SchemeKind::NVFP4) {
    nvfp4::dequantize({w.data, wd.size() / 2}, {w.block_scales, wd.size() / 16}, w.weight_scale_2, w.n, w.k, wd);
  } else {
    for (std::int64_t n = 0; n < w.n; ++n) dequantize_row(w, n, wd.data() + n * w.k);
  }
  std::vector<float> y(static_cast<std::size_t>(m * w.n));
  for (std::int64_t i = 0; i < m; ++i) {
    std::vector<float> xi(x.begin() + i * w.k, x.begin() + (i + 1) * w.k);
    if (sem == Fp4Semantics::W4A4 && w.kind == SchemeKind::NVFP4) fake_quantize_activations_nvfp4(xi.data(), w.k, w.input_scale);
    for (std::int64_t n = 0; n < w.n; ++n) {
      long double acc = 0;
      for (std::int64_t j = 0; j < w.k; ++j) acc += static_cast<long double>(xi[j]) * wd[n * w.k + j];
      y[i * w.n + n] = static_cast<float>(acc);
    }
  }
  return y;
}

TEST(Reference, GemmMatchesNaiveDefinition) {
  Rng rng(3);
  // 5 and 11 rows: the dot products' groups of four and the rows left over; K = 100 leaves
  // elements past the last group of eight.
  for (auto [kind, dt] : {std::pair{SchemeKind::NVFP4, DType::U8}, std::pair{SchemeKind::Dense, DType::BF16},
                          std::pair{SchemeKind::FP8, DType::F8_E4M3}})
    for (Fp4Semantics sem : {Fp4Semantics::W4A16, Fp4Semantics::W4A4})
      for (std::int64_t m : {5, 11})
        for (std::int64_t k : {96, 100}) {
          if (kind == SchemeKind::NVFP4 && k % 16 != 0) continue;
          auto w = random_weight(rng, kind, dt, 37, k);
          const auto x = random_activations(rng, m, k);
          std::vector<float> y(static_cast<std::size_t>(m * 37));
          reference_kernels().fp4_gemm->run(x.data(), m, w->w, y.data(), sem);
          const auto want = naive_gemm(x, m, w->w, sem);
          for (std::size_t i = 0; i < y.size(); ++i)
            EXPECT_NEAR(y[i], want[i], 1e-6 * (1 + std::fabs(want[i]))) << i << " m=" << m << " k=" << k;
        }
}

TEST(Reference, EveryDotCopyReturnsTheSameBits) {
  // The baseline copy is the yardstick; the AVX2 and AVX-512 copies (where this CPU runs them)
  // must match it bit for bit, and all must be within fp64 rounding of the exact sums.
  Rng rng(11);
  std::vector<int> widths{128};
  if (cpu_features().usable(CpuFeature::AVX2) && cpu_features().usable(CpuFeature::FMA)) widths.push_back(256);
  if (cpu_features().usable(CpuFeature::AVX512F)) widths.push_back(512);
  for (std::size_t rows : {1, 3, 4, 5, 9})
    for (std::size_t cols : {1, 4, 6})
      for (std::size_t k : {1, 7, 8, 9, 96, 100, 2048}) {
        const auto a = random_activations(rng, static_cast<std::int64_t>(rows), static_cast<std::int64_t>(k), 10.0f);
        const auto b = random_activations(rng, static_cast<std::int64_t>(cols), static_cast<std::int64_t>(k), 10.0f);
        const std::size_t ldo = cols + 1;  // a gap in each output row: nothing may be written there
        std::vector<double> base(rows * ldo, -7.0), got(rows * ldo, -7.0);
        reference_dots(a.data(), k, rows, b.data(), k, cols, k, base.data(), ldo, 128);
        for (std::size_t i = 0; i < rows; ++i) {
          for (std::size_t c = 0; c < cols; ++c) {
            long double exact = 0, magnitude = 0;
            for (std::size_t j = 0; j < k; ++j) {
              exact += static_cast<long double>(a[i * k + j]) * b[c * k + j];
              magnitude += std::fabs(static_cast<long double>(a[i * k + j]) * b[c * k + j]);
            }
            EXPECT_LE(std::fabs(static_cast<long double>(base[i * ldo + c]) - exact), 1e-15L * magnitude)
                << "rows " << rows << " cols " << cols << " k " << k;
          }
          EXPECT_EQ(base[i * ldo + cols], -7.0);
        }
        for (int bits : widths) {
          reference_dots(a.data(), k, rows, b.data(), k, cols, k, got.data(), ldo, bits);
          EXPECT_EQ(std::memcmp(got.data(), base.data(), base.size() * sizeof(double)), 0)
              << bits << "-bit copy, rows " << rows << " cols " << cols << " k " << k;
        }
        reference_dots(a.data(), k, rows, b.data(), k, cols, k, got.data(), ldo);  // the copy the kernels use
        EXPECT_EQ(std::memcmp(got.data(), base.data(), base.size() * sizeof(double)), 0)
            << "rows " << rows << " cols " << cols << " k " << k;
      }
}

TEST(Reference, DotCopyOfAnUnknownWidthIsAClearError) {
  float a = 1.0f;
  double out = 0.0;
  try {
    reference_dots(&a, 1, 1, &a, 1, 1, 1, &out, 1, 384);
    FAIL() << "no error for a 384-bit copy";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bits must be 0, 128, 256 or 512, got 384"), std::string::npos) << e.what();
  }
  // A copy the CPU cannot run (ctest runs this with AVX-512F and AVX2 turned off as well).
  if (!cpu_features().usable(CpuFeature::AVX512F)) {
    try {
      reference_dots(&a, 1, 1, &a, 1, 1, 1, &out, 1, 512);
      FAIL() << "no error for the 512-bit copy without AVX-512F";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot run the 512-bit copy"), std::string::npos) << e.what();
    }
  }
}

TEST(Reference, Nvfp4RowsDequantizeAsTheFormatDefines) {
  // Every code in every position and every block scale byte (NaN ones included), row by row
  // against nvfp4::dequantize, bit for bit: dequantize_row takes an AVX-512 path where the CPU
  // has one, and the scalar loop elsewhere.
  const std::int64_t n = 8, k = 64 * 16;  // 512 blocks of 16: each of the 256 scale bytes twice
  Rng rng(5);
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(n * k / 2)), scales(static_cast<std::size_t>(n * k / 16));
  for (std::size_t i = 0; i < packed.size(); ++i)
    packed[i] = i % 16 == 0 ? static_cast<std::uint8_t>((i / 16) % 256) : static_cast<std::uint8_t>(rng.uniform(0.0f, 256.0f));
  for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<std::uint8_t>(i % 256);
  WeightMatrix w;
  w.kind = SchemeKind::NVFP4;
  w.dtype = DType::U8;
  w.n = n;
  w.k = k;
  w.data = packed.data();
  w.block_scales = scales.data();
  w.weight_scale_2 = 0.37f;
  std::vector<float> want(static_cast<std::size_t>(n * k)), got(static_cast<std::size_t>(k));
  nvfp4::dequantize(packed, scales, w.weight_scale_2, n, k, want);
  for (std::int64_t r = 0; r < n; ++r) {
    dequantize_row(w, r, got.data());
    for (std::int64_t c = 0; c < k; ++c) {
      const float g = got[static_cast<std::size_t>(c)], e = want[static_cast<std::size_t>(r * k + c)];
      if (std::isnan(e)) {
        EXPECT_TRUE(std::isnan(g)) << "row " << r << " column " << c;
      } else {
        EXPECT_EQ(std::memcmp(&g, &e, sizeof(float)), 0) << "row " << r << " column " << c << ": " << g << " vs " << e;
      }
    }
  }
}

TEST(Reference, SixteenBitRowsWidenAsTheFormatsDefine) {
  // Every bf16 and f16 bit pattern (NaN and Inf included), against the numerics functions, bit
  // for bit: the BF16 row has its own vectorizable loop.
  const std::int64_t k = 1 << 16;
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(2 * k));
  for (std::int64_t i = 0; i < k; ++i) {
    bytes[static_cast<std::size_t>(2 * i)] = static_cast<std::uint8_t>(i & 0xFF);
    bytes[static_cast<std::size_t>(2 * i + 1)] = static_cast<std::uint8_t>(i >> 8);
  }
  for (DType dtype : {DType::BF16, DType::F16}) {
    WeightMatrix w;
    w.kind = SchemeKind::Dense;
    w.dtype = dtype;
    w.n = 1;
    w.k = k;
    w.data = bytes.data();
    std::vector<float> got(static_cast<std::size_t>(k));
    dequantize_row(w, 0, got.data());
    for (std::int64_t i = 0; i < k; ++i) {
      const auto bits = static_cast<std::uint16_t>(i);
      const float want = dtype == DType::BF16 ? bf16_to_float(bits) : fp16_to_float(bits);
      ASSERT_EQ(std::memcmp(&got[static_cast<std::size_t>(i)], &want, sizeof(float)), 0)
          << dtype_name(dtype) << " bits 0x" << std::hex << i;
    }
  }
}

// Token by token, expert by expert, exactly as the Hugging Face module reads.
std::vector<float> naive_moe(const std::vector<float>& x, std::int64_t m, const MoeLayer& l) {
  const std::int64_t H = l.router.k, E = l.router.n;
  std::vector<float> y(static_cast<std::size_t>(m * H), 0.0f);
  for (std::int64_t t = 0; t < m; ++t) {
    std::vector<float> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
    const auto logits = naive_gemm(xt, 1, l.router, Fp4Semantics::W4A16);
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    std::vector<float> p(static_cast<std::size_t>(E));
    for (std::int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(logits[e] - mx);
    for (float& v : p) v = static_cast<float>(v / sum);
    std::vector<std::size_t> order(static_cast<std::size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return p[a] > p[b]; });
    float chosen = 0;
    for (std::int64_t i = 0; i < l.top_k; ++i) chosen += p[order[i]];
    for (std::int64_t i = 0; i < l.top_k; ++i) {
      const MoeExpert& ex = l.experts[order[i]];
      auto g = naive_gemm(xt, 1, ex.gate, Fp4Semantics::W4A16);
      const auto u = naive_gemm(xt, 1, ex.up, Fp4Semantics::W4A16);
      for (std::size_t j = 0; j < g.size(); ++j) g[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
      const auto o = naive_gemm(g, 1, ex.down, Fp4Semantics::W4A16);
      const float wgt = l.norm_topk_prob ? p[order[i]] / chosen : p[order[i]];
      for (std::int64_t j = 0; j < H; ++j) y[t * H + j] += wgt * o[j];
    }
  }
  return y;
}

TEST(Reference, MoeMatchesNaiveDefinition) {
  MoeShape s;
  s.hidden = 48;
  s.intermediate = 32;
  s.experts = 6;
  s.top_k = 2;
  s.norm_topk_prob = true;
  Rng rng(4);
  auto moe = random_moe(rng, s, 1 << 20);
  const auto x = random_activations(rng, 9, s.hidden);
  std::vector<float> y(x.size());
  reference_kernels().moe->run(x.data(), 9, moe->layer, y.data(), Fp4Semantics::W4A16);
  const auto want = naive_moe(x, 9, moe->layer);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
}

}  // namespace
}  // namespace fp4serve::kernels
