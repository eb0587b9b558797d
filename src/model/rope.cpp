#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "util/error.h"

namespace fp4serve {

namespace {

// torch: base ** (arange(0, dim, 2, dtype=float) / dim), all in fp32.
std::vector<float> pos_freqs(double base, std::int64_t dim) {
  std::vector<float> out;
  const auto fdim = static_cast<float>(dim);
  const auto fbase = static_cast<float>(base);
  for (std::int64_t i = 0; i < dim; i += 2) out.push_back(std::pow(fbase, static_cast<float>(i) / fdim));
  return out;
}

// _compute_yarn_parameters (transformers 5.x): NTK-by-parts interpolation between the original
// frequencies (high-frequency dims, extrapolated) and frequencies divided by `factor`
// (low-frequency dims, interpolated), blended by a linear ramp over the correction range.
std::vector<float> yarn_inv_freq(const RopeScaling& rs, double base, std::int64_t dim) {
  const double factor = rs.factor;
  const auto original = static_cast<double>(rs.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(original / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
  };
  // truncate (the default): floor / ceil the range ends.
  double low = std::floor(correction_dim(rs.beta_fast));
  double high = std::ceil(correction_dim(rs.beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as HF: prevents a division by zero

  const std::vector<float> pf = pos_freqs(base, dim);
  const auto ffactor = static_cast<float>(factor);
  const auto flow = static_cast<float>(low);
  const auto frange = static_cast<float>(high - low);
  std::vector<float> out(pf.size());
  for (std::size_t i = 0; i < pf.size(); ++i) {
    const float extrapolation = 1.0f / pf[i];
    const float interpolation = 1.0f / (ffactor * pf[i]);
    const float ramp = std::clamp((static_cast<float>(i) - flow) / frange, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    out[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return out;
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config) : rotary_dim_(config.rotary_dim()) {
  if (rotary_dim_ < 2 || rotary_dim_ % 2 != 0 || rotary_dim_ > config.head_dim)
    fail("rotary dimension ", rotary_dim_, " is invalid for head_dim ", config.head_dim);
  const RopeScaling& rs = config.rope_scaling;
  if (rs.type == "default") {
    for (float f : pos_freqs(config.rope_theta, rotary_dim_)) inv_freq_.push_back(1.0f / f);
  } else if (rs.type == "linear") {
    // _compute_linear_scaling_rope_parameters: default inv_freq / factor.
    const auto factor = static_cast<float>(rs.factor);
    for (float f : pos_freqs(config.rope_theta, rotary_dim_)) inv_freq_.push_back((1.0f / f) / factor);
  } else if (rs.type == "yarn") {
    inv_freq_ = yarn_inv_freq(rs, config.rope_theta, rotary_dim_);
    // get_mscale(factor) = 0.1 ln(factor) + 1 unless the config gives attention_factor.
    const double attention = rs.attention_factor > 0.0 ? rs.attention_factor
                             : rs.factor <= 1.0       ? 1.0
                                                      : 0.1 * std::log(rs.factor) + 1.0;
    attention_scaling_ = static_cast<float>(attention);
  } else {
    fail("rope scaling type '", rs.type, "' is not supported by the model (default, linear, yarn are)");
  }
}

void RotaryEmbedding::cos_sin(std::int64_t position, float* cos, float* sin) const {
  // freqs = float(position) * inv_freq; cos = cos(freqs) * attention_scaling, all fp32.
  const auto p = static_cast<float>(position);
  for (std::size_t j = 0; j < inv_freq_.size(); ++j) {
    const float freq = p * inv_freq_[j];
    cos[j] = std::cos(freq) * attention_scaling_;
    sin[j] = std::sin(freq) * attention_scaling_;
  }
}

void RotaryEmbedding::apply(float* x, std::int64_t num_heads, std::int64_t head_dim, const float* cos,
                            const float* sin) const {
  const std::int64_t half = rotary_dim_ / 2;
  for (std::int64_t h = 0; h < num_heads; ++h) {
    float* v = x + h * head_dim;
    for (std::int64_t j = 0; j < half; ++j) {
      const float a = v[j], b = v[j + half];
      // (x * cos) + (rotate_half(x) * sin), rotate_half(x) = cat(-x2, x1).
      v[j] = a * cos[j] + (-b) * sin[j];
      v[j + half] = b * cos[j] + a * sin[j];
    }
  }
}

}  // namespace fp4serve
