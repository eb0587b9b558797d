#include "model/rms_norm.h"

#include <algorithm>
#include <cmath>

#include "kernels/vector_math.h"
#include "util/thread_pool.h"

namespace fp4serve {

double sum_squares(const float* x, std::int64_t n) { return kernels::best_vector_math().sum_squares(x, n); }

float inv_rms(const float* x, std::int64_t dim, float eps) {
  const auto variance = static_cast<float>(sum_squares(x, dim) / static_cast<double>(dim));
  return 1.0f / std::sqrt(variance + eps);
}

void rms_norm(const float* x, std::int64_t rows, std::int64_t dim, const std::vector<float>& gain, double eps,
              float* out) {
  const auto feps = static_cast<float>(eps);
  // Rows are independent: a prefill's rows go to the pool (each row computed the same way
  // whatever the split); decode's few rows stay on the caller.
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, dim));
  parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = out + r * dim;
      const float inv = inv_rms(xr, dim, feps);
      for (std::int64_t i = 0; i < dim; ++i) yr[i] = gain[static_cast<std::size_t>(i)] * (xr[i] * inv);
    }
  });
}

}  // namespace fp4serve
