#include "model/hybrid_ops.h"

#include "model/rms_norm.h"

namespace fp4serve::hybrid {

void gated_rms_norm(float* x, const float* gate, std::int64_t rows, std::int64_t dim, const std::vector<float>& w,
                    double eps) {
  const auto feps = static_cast<float>(eps);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * dim;
    const float* gr = gate + r * dim;
    const float inv = inv_rms(xr, dim, feps);
    // Norm before gate: weight * normalised, then times silu(gate) in fp32.
    for (std::int64_t i = 0; i < dim; ++i) xr[i] = (w[static_cast<std::size_t>(i)] * (xr[i] * inv)) * silu(gr[i]);
  }
}

void l2norm_rows(float* x, std::int64_t rows, std::int64_t dim, float scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * dim;
    const float inv = 1.0f / std::sqrt(static_cast<float>(sum_squares(xr, dim)) + 1e-6f);
    for (std::int64_t i = 0; i < dim; ++i) xr[i] = (xr[i] * inv) * scale;
  }
}

}  // namespace fp4serve::hybrid
