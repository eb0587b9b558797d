#pragma once
// Random operands for validation: activations, weights of every storage kind (owning their
// bytes), MoE layers and attention inputs. NVFP4 weights carry a few extreme block scales
// (448, the 2^-9 subnormal, zero, negative) in a minority of rows, so every code path is hit
// without those rows dominating every row's error figure.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/shapes.h"

namespace fp4serve::kernels {

// xoshiro256**: fast, good enough for test data, seedable for reproducible reports.
class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t next();
  float uniform(float lo, float hi);  // [lo, hi)
  std::uint32_t below(std::uint32_t n);

 private:
  std::uint64_t s_[4];
};

// A weight matrix that owns its storage; `w` points into it. Not copyable (w would dangle).
struct OwnedWeight {
  std::vector<std::uint8_t> data;
  std::vector<std::uint8_t> scales;
  WeightMatrix w;
  OwnedWeight() = default;
  OwnedWeight(const OwnedWeight&) = delete;
  OwnedWeight& operator=(const OwnedWeight&) = delete;
};

std::vector<float> random_activations(Rng& rng, std::int64_t m, std::int64_t k, float amplitude = 1.0f);
// kind/dtype as in GemmShape. NVFP4 gets weight_scale_2 and an input_scale suited to
// activations of amplitude ~1 (so W4A4 works); FP8 gets a per-tensor scale.
std::unique_ptr<OwnedWeight> random_weight(Rng& rng, SchemeKind kind, DType dtype, std::int64_t n, std::int64_t k);

struct OwnedMoe {
  std::vector<std::unique_ptr<OwnedWeight>> storage;
  MoeLayer layer;
};
// A MoE layer of `shape`. Experts share at most `max_bytes` of distinct weight data (a pool
// reused round-robin); every expert still gets its own per-tensor scales, so an expert mix-up
// changes the result.
std::unique_ptr<OwnedMoe> random_moe(Rng& rng, const MoeShape& shape, std::size_t max_bytes);
// A router for `shape` whose rows for experts [0, hot) are aligned with `bias`: tokens built
// around `bias` crowd onto those experts, so each runs its GEMMs on many tokens (prefill-like).
// Dense routers only (every Qwen3-MoE checkpoint keeps the router unquantized).
std::unique_ptr<OwnedWeight> hot_router(Rng& rng, const MoeShape& shape, std::int64_t hot, const std::vector<float>& bias);

// The validation error figure of a [rows, cols] output: max over rows i of
//   ||out_i - ref_i|| / max(||ref_i||, rms_i ||ref_i||)        (fp64)
// Per row, so a few wrong rows (a dropped tail) cannot hide in a large M; floored at the RMS row
// norm, so a row whose dot products happen to cancel does not turn rounding into a huge ratio.
// Any non-finite output gives +inf.
double output_error(const float* out, const float* ref, std::int64_t rows, std::int64_t cols);

}  // namespace fp4serve::kernels
