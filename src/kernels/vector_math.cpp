#include "kernels/vector_math.h"

#include <bit>
#include <cmath>

#include "kernels/isa_kernels.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {

namespace {

namespace c = vector_math_constants;

float pow2(std::int32_t k) { return std::bit_cast<float>(static_cast<std::uint32_t>(k + 127) << 23); }

void exp_scalar(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = exp_approx(x[i]);
}

void silu_mul_scalar(float* gate, const float* up, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) gate[i] = silu_approx(gate[i]) * up[i];
}

void silu_scalar(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = silu_approx(x[i]);
}

double softmax_numerators_scalar(float* s, std::int64_t n) {
  float mx = -INFINITY;
  for (std::int64_t i = 0; i < n; ++i) mx = s[i] > mx ? s[i] : mx;
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sum += s[i] = exp_approx(s[i] - mx);
  return sum;
}

void weighted_sum_scalar(float* y, const float* const* rows, const float* w, std::int64_t k, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    float acc = 0.0f;
    for (std::int64_t i = 0; i < k; ++i) acc = std::fma(w[i], rows[i][j], acc);
    y[j] = acc;
  }
}

double sum_squares_scalar(const float* x, std::int64_t n) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

const VectorMath kScalar{"scalar",          exp_scalar, silu_mul_scalar, silu_scalar, softmax_numerators_scalar,
                         weighted_sum_scalar, sum_squares_scalar};
const VectorMath kAvx2{"avx2",           avx2::vec_exp, avx2::silu_mul, avx2::silu, avx2::softmax_numerators,
                       avx2::weighted_sum, avx2::sum_squares};
const VectorMath kAvx512{"avx512",           avx512::vec_exp, avx512::silu_mul, avx512::silu, avx512::softmax_numerators,
                         avx512::weighted_sum, avx512::sum_squares};

}  // namespace

float exp_approx(float x) {
  if (std::isnan(x)) return x + x;
  x = x > c::kExpMaxInput ? c::kExpMaxInput : x;
  x = x < c::kExpMinInput ? c::kExpMinInput : x;
  const float t = std::fma(x, c::kLog2e, c::kRoundMagic);
  const float nf = t - c::kRoundMagic;
  const auto n = static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(t) - std::bit_cast<std::uint32_t>(c::kRoundMagic));
  float r = std::fma(-nf, c::kLn2Hi, x);
  r = std::fma(-nf, c::kLn2Lo, r);
  float p = c::kExpPoly[0];
  for (int i = 1; i < 8; ++i) p = std::fma(p, r, c::kExpPoly[i]);
  const std::int32_t n1 = n >> 1;
  return p * pow2(n1) * pow2(n - n1);
}

float silu_approx(float x) { return x / (1.0f + exp_approx(-x)); }

const VectorMath& scalar_vector_math() { return kScalar; }

const VectorMath& avx2_vector_math() { return kAvx2; }
const VectorMath& avx512_vector_math() { return kAvx512; }

const VectorMath& best_vector_math() {
  static const VectorMath* best = [] {
    const CpuFeatures& f = cpu_features();
    if (f.usable(CpuFeature::AVX512F) && f.usable(CpuFeature::AVX512BW) && f.usable(CpuFeature::AVX512VL) &&
        f.usable(CpuFeature::AVX512DQ) && f.usable(CpuFeature::FMA))
      return &kAvx512;
    if (f.usable(CpuFeature::AVX2) && f.usable(CpuFeature::FMA)) return &kAvx2;
    return &kScalar;
  }();
  return *best;
}

}  // namespace fp4serve::kernels
