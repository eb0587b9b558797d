#include "model/rms_norm.h"

#include <cmath>

namespace fp4serve {

double sum_squares(const float* x, std::int64_t n) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

float inv_rms(const float* x, std::int64_t dim, float eps) {
  const auto variance = static_cast<float>(sum_squares(x, dim) / static_cast<double>(dim));
  return 1.0f / std::sqrt(variance + eps);
}

void rms_norm(const float* x, std::int64_t rows, std::int64_t dim, const std::vector<float>& gain, double eps,
              float* out) {
  const auto feps = static_cast<float>(eps);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    const float inv = inv_rms(xr, dim, feps);
    for (std::int64_t i = 0; i < dim; ++i) yr[i] = gain[static_cast<std::size_t>(i)] * (xr[i] * inv);
  }
}

}  // namespace fp4serve
