#include "kernels/tile_rate.h"

#include <chrono>
#include <cstdint>

#include "kernels/isa_kernels.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {

bool amx_tiles_usable() { return cpu_features().missing({CpuFeature::AMX_TILE, CpuFeature::AMX_BF16}).empty(); }

std::optional<double> amx_tile_product_ns() {
  if (!amx_tiles_usable()) return std::nullopt;
  // About 1 ms at the ≈ 6 ns per product measured on an AMX Xeon (16 cycles).
  constexpr std::int64_t kProducts = 1 << 17;
  const auto t0 = std::chrono::steady_clock::now();
  amx::run_tile_products(kProducts);
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  return ns / static_cast<double>(kProducts);
}

bool amx_unit_varied(double ns_a, double ns_b) {
  const double lo = ns_a < ns_b ? ns_a : ns_b, hi = ns_a < ns_b ? ns_b : ns_a;
  return hi > 1.5 * lo;
}

}  // namespace fp4serve::kernels
