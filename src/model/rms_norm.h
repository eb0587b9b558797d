#pragma once
// RMSNorm as transformers computes it in fp32, shared by the Qwen3-MoE and the hybrid models
// (their norms differ only in the gain, which the loader stores as the factor to apply).
#include <cstdint>
#include <vector>

namespace fp4serve {

// Sum of squares with an fp64 accumulator: torch's fp32 reduction differs by rounding only.
// Vectorised (kernels::best_vector_math()); rms_norm splits a prefill's rows over the pool.
double sum_squares(const float* x, std::int64_t n);

// 1 / sqrt(mean(x^2) + eps) of one row, the mean rounded to fp32 before eps is added, as torch does.
float inv_rms(const float* x, std::int64_t dim, float eps);

// RMSNorm over each of `rows` rows of `dim` floats: gain * (x * rsqrt(mean(x^2) + eps)), where
// `gain` is the factor applied: w for Qwen3MoeRMSNorm, 1 + w for the zero-centred norms of
// Qwen3.5-MoE / Qwen3-Next. `out` may equal `x`.
void rms_norm(const float* x, std::int64_t rows, std::int64_t dim, const std::vector<float>& gain, double eps,
              float* out);

}  // namespace fp4serve
