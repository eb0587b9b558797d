#pragma once
// Deterministic random weights: every tensor (and every chunk of a large one) has its own stream
// seeded from (seed, name, chunk), so output does not depend on thread count or write order.
#include <cstdint>
#include <span>
#include <string_view>

namespace fp4serve::synth {

std::uint64_t stream_seed(std::uint64_t seed, std::string_view name, std::uint64_t chunk = 0);

// Fills `out` with approximately normal values (Irwin-Hall of four uniforms, rescaled): mean
// `mean`, standard deviation `stddev`, never beyond mean +- 3.47 stddev, never NaN or Inf.
void fill_normal(std::uint64_t stream, float mean, float stddev, std::span<float> out);

// Fills `out` with uniform values in [lo, hi).
void fill_uniform(std::uint64_t stream, float lo, float hi, std::span<float> out);

}  // namespace fp4serve::synth
