#pragma once
#include <cstdint>
#include <optional>

#include "engine/sampler.h"

namespace fp4serve::engine {

// SamplingParams in declaration order (GCC 12 warns on partial designated initializers).
inline SamplingParams params(double temperature, double top_p = 1.0, std::int64_t top_k = 0, double min_p = 0.0,
                             std::optional<std::uint64_t> seed = std::nullopt) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

}  // namespace fp4serve::engine
