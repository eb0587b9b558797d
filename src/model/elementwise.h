#pragma once
// Element-wise helpers every model here uses, in the fp32 operation order of transformers'.
#include <cmath>
#include <cstddef>

namespace fp4serve {

// torch.nn.functional.silu: x * sigmoid(x), written as x / (1 + e^-x).
inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

// acc += x, the residual adds of a decoder layer.
inline void add_into(float* acc, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += x[i];
}

}  // namespace fp4serve
