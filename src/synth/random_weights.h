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
// Value i depends only on (stream, i): it is splitmix64's (i+1)-th output, so the AVX-512
// version (used when the CPU has F + DQ) computes 8 of them at once with the same bits.
void fill_normal(std::uint64_t stream, float mean, float stddev, std::span<float> out);
// The one-at-a-time definition, which the tests hold fill_normal to bit for bit.
void fill_normal_scalar(std::uint64_t stream, float mean, float stddev, std::span<float> out);

// Fills `out` with uniform values in [lo, hi).
void fill_uniform(std::uint64_t stream, float lo, float hi, std::span<float> out);

}  // namespace fp4serve::synth
