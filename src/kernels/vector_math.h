#pragma once
// Element-wise math of the non-GEMM hot paths (SiLU of the MoE experts and the linear-attention conv, the router and attention
// softmaxes, the MoE weighted sum, RMSNorm's sum of squares), as one table per instruction set. glibc's scalar expf was a
// fifth of a 512-token prefill; these evaluate 8 or 16 lanes per instruction.
//
// exp_approx() is the source of truth: a scalar function whose every step (fma, rounding to an
// integer, power-of-two scaling) the SIMD versions repeat lane by lane, so avx2, avx512 and
// scalar return the same bits. It is within 2 ulp of the exact e^x over the whole float range
// (tests/kernels/vector_math_test.cpp), including subnormal results; x > 88.72... gives +inf,
// x < -103.98... gives 0, -inf gives 0, NaN stays NaN. The reference kernels keep std::exp.
#include <cstdint>
#include <string_view>

namespace fp4serve::kernels {

// e^x, the algorithm every table implements. Steps, shared with the SIMD files (which may not
// share inline code with generic ones, so they repeat it):
//   1. NaN -> x + x (quiet); clamp x to [kExpMinInput, kExpMaxInput] (beyond: 0 / +inf anyway).
//   2. n = round-to-nearest-even(x * log2 e) via fma(x, log2e, 1.5 * 2^23) - 1.5 * 2^23.
//   3. r = x - n ln2 with ln2 split in a 9-bit head and a tail (two fmas), |r| <= ~0.347.
//   4. p = e^r by its Taylor series to r^7 (Horner with fma; truncation < 0.15 ulp).
//   5. p * 2^(n >> 1) * 2^(n - (n >> 1)): the first product is exact, the second rounds once, so
//      subnormal results are rounded correctly and n = 128 still overflows to +inf.
float exp_approx(float x);
// x * sigmoid(x) written as x / (1 + exp_approx(-x)), the order of transformers' silu.
float silu_approx(float x);

namespace vector_math_constants {
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;  // 355 / 512: n * kLn2Hi is exact for |n| < 2^15
inline constexpr float kLn2Lo = -2.12194440054690583e-4f;
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23
inline constexpr float kExpMaxInput = 89.0f;       // e^89 > FLT_MAX
inline constexpr float kExpMinInput = -104.0f;     // e^-104 < 2^-150: rounds to 0
// 1/k! for k = 7 .. 0, the Horner order.
inline constexpr float kExpPoly[8] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f,
                                      1.0f / 6.0f,    0.5f,           1.0f,           1.0f};
}  // namespace vector_math_constants

struct VectorMath {
  const char* name;  // "scalar", "avx2", "avx512"
  // y[i] = exp_approx(x[i]); y may equal x.
  void (*exp)(const float* x, float* y, std::int64_t n);
  // gate[i] = silu_approx(gate[i]) * up[i].
  void (*silu_mul)(float* gate, const float* up, std::int64_t n);
  // x[i] = silu_approx(x[i]) (the linear-attention conv's activation).
  void (*silu)(float* x, std::int64_t n);
  // s[i] = exp_approx(s[i] - max s); returns the sum in fp64 (the order of the fp64 sum may
  // differ between tables). NaN entries do not count for the max and stay NaN.
  double (*softmax_numerators)(float* s, std::int64_t n);
  // y[j] = sum over i < k, in order i = 0, 1, ..., of w[i] * rows[i][j] with one fma per term,
  // starting from 0.
  void (*weighted_sum)(float* y, const float* const* rows, const float* w, std::int64_t k, std::int64_t n);
  // sum of x[i]^2 in fp64 (each square is exact in fp64; the order of the sum may differ
  // between tables, so results differ by fp64 rounding only).
  double (*sum_squares)(const float* x, std::int64_t n);
};

// Plain C++ (std::fma): runs anywhere; the tables below must equal it bit for bit (except the
// order of the fp64 sums of softmax_numerators and sum_squares).
const VectorMath& scalar_vector_math();
// The tables of each instruction set. A kernel backend names the one it uses (backends.cpp): its
// own CPU check covers the table's needs. (A lookup by backend name once gave avx2-int8 the scalar
// table: a new backend must not fall through to scalar unnoticed.)
const VectorMath& avx2_vector_math();
const VectorMath& avx512_vector_math();
// The fastest table this CPU can run (cpu_features(), FP4SERVE_CPU_DISABLE respected); for
// generic code outside a kernel backend.
const VectorMath& best_vector_math();

}  // namespace fp4serve::kernels
