#pragma once
// The element-wise pieces of the Qwen3.5-MoE / Qwen3-Next layers (norms, gates, activations),
// each written to follow its transformers counterpart's fp32 operation order. The matrix
// products and recurrent ops go through the KernelSet instead.
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/elementwise.h"

namespace fp4serve::hybrid {

using fp4serve::silu;
inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
// torch.nn.functional.softplus (beta 1, threshold 20): x above the threshold passes through.
inline float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

// RMSNorm itself (plain and zero-centred gains alike) is fp4serve::rms_norm in model/rms_norm.h.

// Qwen3_5MoeRMSNormGated over rows of `dim` (one value head each): w * (x * rsqrt(mean(x^2) + eps))
// times silu(gate), in place on x.
void gated_rms_norm(float* x, const float* gate, std::int64_t rows, std::int64_t dim, const std::vector<float>& w,
                    double eps);

// l2norm of transformers' gated delta rule: x * rsqrt(sum(x^2) + 1e-6) per row, then times `scale`.
void l2norm_rows(float* x, std::int64_t rows, std::int64_t dim, float scale);

}  // namespace fp4serve::hybrid
