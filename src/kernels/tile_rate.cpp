#include "kernels/tile_rate.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/isa_kernels.h"
#include "util/cpu_features.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {

bool amx_tiles_usable() { return cpu_features().missing({CpuFeature::AMX_TILE, CpuFeature::AMX_BF16}).empty(); }

std::optional<double> amx_tile_product_ns() {
  if (!amx_tiles_usable()) return std::nullopt;
  // About 1 ms at the ≈ 6 ns per product measured on an AMX Xeon (16 cycles).
  constexpr std::int64_t kProducts = 1 << 17;
  // Every thread at once, as the kernels run: on the shared VM one vCPU's unit ran 14 ns per
  // product while the other's ran 6 (docs/perf.md, session 37), and a kernel split over both
  // waits for the slower.
  std::vector<double> ns(static_cast<std::size_t>(kernel_threads()), 0.0);
  parallel_for(static_cast<std::int64_t>(ns.size()), 1, [&ns](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      amx::run_tile_products(kProducts);
      ns[static_cast<std::size_t>(i)] = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    }
  });
  return *std::max_element(ns.begin(), ns.end()) / static_cast<double>(kProducts);
}

bool amx_unit_varied(double ns_a, double ns_b) {
  const auto [lo, hi] = std::minmax(ns_a, ns_b);
  return hi > 1.5 * lo;
}

}  // namespace fp4serve::kernels
