// kernels/vector_math.h: exp_approx against the exact e^x over every float exponent and the
// special values, and every SIMD table this CPU can run against the scalar table bit for bit
// (tails of every length included).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/grouped_moe.h"
#include "kernels/vector_math.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {
namespace {

std::int64_t ulp_distance(float a, float b) {
  // Map the sign-magnitude bit patterns onto a line where adjacent floats differ by 1.
  auto line = [](float v) {
    const auto b32 = static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(v));
    return b32 >= 0x80000000LL ? 0x80000000LL - b32 : b32;
  };
  const std::int64_t d = line(a) - line(b);
  return d < 0 ? -d : d;
}

// Every 4099th bit pattern (~2000 per exponent: all exponents, both signs, subnormals, inf and
// NaN codes) plus the edges of the range.
std::vector<float> sweep() {
  std::vector<float> v;
  for (std::uint64_t b = 0; b <= 0xFFFFFFFFull; b += 4099) v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(b)));
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 88.72f, 88.7228f, 88.72284f, 88.7229f, 89.0f, 89.5f, -87.3f, -103.27f,
                  -103.28f, -103.9f, -103.97f, -103.98f, -104.0f, -104.5f, -150.0f, 1e-30f, -1e-30f, FLT_MIN, -FLT_MIN,
                  FLT_MAX, -FLT_MAX, std::numeric_limits<float>::denorm_min(), 0.34657359f, -0.34657359f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::signaling_NaN()})
    v.push_back(x);
  // Dense around the overflow and underflow edges.
  for (float x = 88.0f; x < 89.0f; x = std::nextafter(x, 90.0f)) v.push_back(x);
  for (float x = -104.0f; x < -86.0f; x += 1.0f / 4096) v.push_back(x);
  return v;
}

struct Table {
  const VectorMath* vm;
  bool usable;
};

std::vector<Table> simd_tables() {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.usable(CpuFeature::AVX2) && f.usable(CpuFeature::FMA);
  const bool avx512 = avx2 && f.usable(CpuFeature::AVX512F) && f.usable(CpuFeature::AVX512BW) &&
                      f.usable(CpuFeature::AVX512VL) && f.usable(CpuFeature::AVX512DQ);
  return {{&avx2_vector_math(), avx2}, {&avx512_vector_math(), avx512}};
}

bool same_bits_or_both_nan(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

TEST(VectorMath, ExpApproxWithinTwoUlpOfExact) {
  std::int64_t worst = 0;
  float worst_x = 0.0f;
  for (float x : sweep()) {
    const float got = exp_approx(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(got)) << x;
      continue;
    }
    const auto want = static_cast<float>(std::exp(static_cast<double>(x)));
    const std::int64_t d = ulp_distance(got, want);
    if (d > worst) {
      worst = d;
      worst_x = x;
    }
    ASSERT_LE(d, 2) << "x = " << x << " (bits 0x" << std::hex << std::bit_cast<std::uint32_t>(x) << std::dec
                    << "): got " << got << ", exact " << want;
  }
  RecordProperty("worst_ulp", static_cast<int>(worst));
  std::printf("exp_approx: worst %lld ulp at x = %.9g\n", static_cast<long long>(worst), static_cast<double>(worst_x));
}

TEST(VectorMath, ExpApproxSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_approx(-inf), 0.0f);
  EXPECT_FALSE(std::signbit(exp_approx(-inf)));
  EXPECT_EQ(exp_approx(inf), inf);
  EXPECT_EQ(exp_approx(FLT_MAX), inf);
  EXPECT_EQ(exp_approx(89.0f), inf);
  EXPECT_EQ(exp_approx(-FLT_MAX), 0.0f);
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  EXPECT_EQ(exp_approx(-0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(exp_approx(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp_approx(std::numeric_limits<float>::signaling_NaN())));
  // The largest finite result and the smallest subnormal one.
  EXPECT_TRUE(std::isfinite(exp_approx(88.72283f)));
  EXPECT_GT(exp_approx(-103.2f), 0.0f);
  EXPECT_EQ(exp_approx(-103.28f * 1.01f), 0.0f);
}

TEST(VectorMath, SiluApproxMatchesExactSilu) {
  for (float x : sweep()) {
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(silu_approx(x)));
      continue;
    }
    const float got = silu_approx(x);
    if (x < -80.0f) {
      // A tiny negative result, -0 once e^-x overflows in fp32 (x < -88.72), as in torch's
      // fp32 silu; NaN at -inf (-inf / inf).
      if (std::isinf(x)) {
        EXPECT_TRUE(std::isnan(got)) << x;
      } else {
        EXPECT_TRUE(got <= 0.0f && got > -1e-32f) << x << " -> " << got;
      }
      continue;
    }
    const double xd = x;
    const auto want = static_cast<float>(xd / (1.0 + std::exp(-xd)));
    EXPECT_LE(ulp_distance(got, want), 4) << "x = " << x << ": got " << got << ", exact " << want;
  }
}

// Each SIMD backend's MoE runs its element-wise steps (SiLU x up, the weighted sum, the router
// softmax) with the table of the instruction set it requires. A lookup by name once handed
// avx2-int8 the scalar table: 8 % of its decode went to a scalar SiLU.
TEST(VectorMath, EveryMoeUsesTheTableOfItsInstructionSet) {
  EXPECT_STREQ(avx2_vector_math().name, "avx2");
  EXPECT_STREQ(avx512_vector_math().name, "avx512");
  int grouped = 0;
  for (const Backend& b : compiled_backends()) {
    const auto* moe = dynamic_cast<const GroupedMoeKernel*>(b.moe.moe);
    if (moe == nullptr) continue;
    ++grouped;
    auto needs = [&b](CpuFeature f) { return std::find(b.needs.begin(), b.needs.end(), f) != b.needs.end(); };
    const char* want = needs(CpuFeature::AVX512F) ? "avx512" : needs(CpuFeature::AVX2) ? "avx2" : "scalar";
    EXPECT_STREQ(moe->vector_math().name, want) << b.name;
  }
  EXPECT_GE(grouped, 2);  // avx2 and avx2-int8 are compiled on every x86-64 build
}

TEST(VectorMath, BestTableFollowsTheCpu) {
  const std::string best = best_vector_math().name;
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.usable(CpuFeature::AVX2) && f.usable(CpuFeature::FMA);
  const bool avx512 = avx2 && f.usable(CpuFeature::AVX512F) && f.usable(CpuFeature::AVX512BW) &&
                      f.usable(CpuFeature::AVX512VL) && f.usable(CpuFeature::AVX512DQ);
  EXPECT_EQ(best, avx512 ? "avx512" : avx2 ? "avx2" : "scalar");
}

TEST(VectorMath, SimdExpEqualsScalarBitForBit) {
  const std::vector<float> x = sweep();
  std::vector<float> want(x.size());
  scalar_vector_math().exp(x.data(), want.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same_bits_or_both_nan(want[i], exp_approx(x[i])));
  for (const Table& t : simd_tables()) {
    if (!t.usable) continue;
    std::vector<float> got(x.size(), -1.0f);
    t.vm->exp(x.data(), got.data(), static_cast<std::int64_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_TRUE(same_bits_or_both_nan(got[i], want[i])) << t.vm->name << " x = " << x[i] << ": " << got[i] << " vs " << want[i];
    // Every tail length, in place, and nothing written past n.
    for (std::int64_t n = 0; n <= 40; ++n) {
      std::vector<float> buf(x.begin() + 1000, x.begin() + 1000 + n + 8);
      t.vm->exp(buf.data(), buf.data(), n);
      for (std::int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits_or_both_nan(buf[i], want[1000 + i])) << t.vm->name << " n=" << n;
      for (std::int64_t i = n; i < n + 8; ++i) ASSERT_TRUE(same_bits_or_both_nan(buf[i], x[1000 + i])) << t.vm->name << " n=" << n;
    }
  }
}

TEST(VectorMath, SimdSiluMulEqualsScalarBitForBit) {
  std::vector<float> gate, up;
  for (int i = 0; i < 2000; ++i) {
    gate.push_back(static_cast<float>(std::sin(i * 0.37) * (i % 7 == 0 ? 120.0 : 9.0)));
    up.push_back(static_cast<float>(std::cos(i * 0.11) * 3.0));
  }
  gate[5] = std::numeric_limits<float>::infinity();
  gate[6] = -std::numeric_limits<float>::infinity();
  gate[7] = std::numeric_limits<float>::quiet_NaN();
  for (const Table& t : simd_tables()) {
    if (!t.usable) continue;
    for (std::int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 2000}) {
      std::vector<float> want = gate, got = gate;
      scalar_vector_math().silu_mul(want.data(), up.data(), n);
      t.vm->silu_mul(got.data(), up.data(), n);
      for (std::size_t i = 0; i < gate.size(); ++i)
        ASSERT_TRUE(same_bits_or_both_nan(got[i], want[i])) << t.vm->name << " n=" << n << " i=" << i;
    }
  }
  // The scalar table is silu_approx(g) * u.
  std::vector<float> s = gate;
  scalar_vector_math().silu_mul(s.data(), up.data(), 2000);
  for (std::size_t i = 0; i < s.size(); ++i) ASSERT_TRUE(same_bits_or_both_nan(s[i], silu_approx(gate[i]) * up[i]));
}

TEST(VectorMath, SimdSiluEqualsScalarBitForBit) {
  std::vector<float> x;
  for (int i = 0; i < 2000; ++i) x.push_back(static_cast<float>(std::sin(i * 0.29) * (i % 5 == 0 ? 110.0 : 11.0)));
  x[3] = std::numeric_limits<float>::infinity();
  x[4] = -std::numeric_limits<float>::infinity();
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = -95.0f;  // exp(95) overflows: silu -> -0
  for (const Table& t : simd_tables()) {
    if (!t.usable) continue;
    for (std::int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 2000}) {
      std::vector<float> want = x, got = x;
      scalar_vector_math().silu(want.data(), n);
      t.vm->silu(got.data(), n);
      for (std::size_t i = 0; i < x.size(); ++i)
        ASSERT_TRUE(same_bits_or_both_nan(got[i], want[i])) << t.vm->name << " n=" << n << " i=" << i;
    }
  }
  // The scalar table is silu_approx, in place.
  std::vector<float> s = x;
  scalar_vector_math().silu(s.data(), 2000);
  for (std::size_t i = 0; i < s.size(); ++i) ASSERT_TRUE(same_bits_or_both_nan(s[i], silu_approx(x[i])));
}

TEST(VectorMath, SimdSoftmaxNumeratorsEqualScalar) {
  std::vector<float> base;
  for (int i = 0; i < 600; ++i) base.push_back(static_cast<float>(std::sin(i * 1.7) * 30.0));
  for (const Table& t : simd_tables()) {
    if (!t.usable) continue;
    for (std::int64_t n : {1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 47, 511, 600}) {
      std::vector<float> want(base.begin(), base.begin() + n), got = want;
      const double ws = scalar_vector_math().softmax_numerators(want.data(), n);
      const double gs = t.vm->softmax_numerators(got.data(), n);
      EXPECT_NEAR(gs, ws, 1e-12 * ws) << t.vm->name << " n=" << n;
      for (std::int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits_or_both_nan(got[i], want[i])) << t.vm->name << " n=" << n;
      // The maximum's numerator is exactly 1, so the sum is at least 1.
      std::int64_t arg = 0;
      for (std::int64_t i = 1; i < n; ++i) arg = base[i] > base[arg] ? i : arg;
      EXPECT_EQ(got[arg], 1.0f) << t.vm->name << " n=" << n;
      EXPECT_GE(gs, 1.0);
    }
    // A NaN score neither counts for the max nor hides: it stays NaN, as does the sum.
    std::vector<float> s(base.begin(), base.begin() + 37), s2 = s;
    s[20] = std::numeric_limits<float>::quiet_NaN();
    s2[20] = std::numeric_limits<float>::quiet_NaN();
    const double a = t.vm->softmax_numerators(s.data(), 37);
    scalar_vector_math().softmax_numerators(s2.data(), 37);
    EXPECT_TRUE(std::isnan(a));
    for (int i = 0; i < 37; ++i) ASSERT_TRUE(same_bits_or_both_nan(s[i], s2[i])) << t.vm->name << " i=" << i;
  }
  // Scalar: the numerators are exp_approx(s - max) and the maximum maps to 1.
  std::vector<float> s(base.begin(), base.begin() + 100);
  float mx = s[0];
  for (float v : s) mx = v > mx ? v : mx;
  scalar_vector_math().softmax_numerators(s.data(), 100);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(s[i], exp_approx(base[i] - mx));
}

TEST(VectorMath, SimdWeightedSumEqualsScalarBitForBit) {
  std::vector<std::vector<float>> data(9);
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 300; ++j) data[i].push_back(static_cast<float>(std::sin(i * 31.0 + j * 0.7)));
  std::vector<const float*> rows;
  for (const auto& d : data) rows.push_back(d.data());
  const std::vector<float> w = {0.3f, -0.21f, 0.125f, 0.9f, 1e-3f, 0.5f, -0.7f, 0.011f, 0.2f};
  for (const Table& t : simd_tables()) {
    if (!t.usable) continue;
    for (std::int64_t k : {1, 2, 8, 9})
      for (std::int64_t n : {1, 7, 8, 9, 16, 31, 32, 33, 63, 64, 65, 300}) {
        std::vector<float> want(310, -5.0f), got(310, -5.0f);
        scalar_vector_math().weighted_sum(want.data(), rows.data(), w.data(), k, n);
        t.vm->weighted_sum(got.data(), rows.data(), w.data(), k, n);
        for (std::size_t j = 0; j < want.size(); ++j)
          ASSERT_TRUE(same_bits_or_both_nan(got[j], want[j])) << t.vm->name << " k=" << k << " n=" << n << " j=" << j;
      }
  }
  // Scalar against fp64.
  std::vector<float> y(300);
  scalar_vector_math().weighted_sum(y.data(), rows.data(), w.data(), 9, 300);
  for (int j = 0; j < 300; ++j) {
    double s = 0.0;
    for (int i = 0; i < 9; ++i) s += static_cast<double>(w[i]) * data[i][j];
    EXPECT_NEAR(y[j], s, 1e-6);
  }
}

TEST(VectorMath, SimdSumSquaresMatchesFp64) {
  std::vector<float> x;
  for (int i = 0; i < 2100; ++i) x.push_back(static_cast<float>(std::sin(i * 0.91) * (i % 13 == 0 ? 1e3 : 1.0)));
  for (std::int64_t n : {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 2048, 2100}) {
    double want = 0.0;
    for (std::int64_t i = 0; i < n; ++i) want += static_cast<double>(x[i]) * x[i];
    EXPECT_EQ(scalar_vector_math().sum_squares(x.data(), n), want) << n;
    for (const Table& t : simd_tables()) {
      if (!t.usable) continue;
      EXPECT_NEAR(t.vm->sum_squares(x.data(), n), want, 1e-14 * want) << t.vm->name << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace fp4serve::kernels
