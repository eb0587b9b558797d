// The AMX unit's rate that bench and kernels_bench print beside their figures (kernels/tile_rate.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string_view>

#include "kernels/tile_rate.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {
namespace {

// Where AMX runs, a rate a tile unit can have: a product is 16 x 16 x 32 multiply-adds, about 16
// cycles, so nanoseconds at any clock, far from a microsecond. Where it does not (no AMX, or
// FP4SERVE_CPU_DISABLE=amx_tile as the WithoutAmx run of this test sets), nothing.
TEST(TileRate, IsAPlausibleRateWhereAmxRunsAndNothingElsewhere) {
  const bool usable = cpu_features().missing({CpuFeature::AMX_TILE, CpuFeature::AMX_BF16}).empty();
  if (const char* off = std::getenv("FP4SERVE_CPU_DISABLE"); off != nullptr && std::string_view(off).find("amx_tile") != std::string_view::npos) {
    EXPECT_FALSE(usable) << "FP4SERVE_CPU_DISABLE=" << off;
  }
  EXPECT_EQ(amx_tiles_usable(), usable);
  const std::optional<double> ns = amx_tile_product_ns();
  ASSERT_EQ(ns.has_value(), usable);
  if (ns) {
    EXPECT_GT(*ns, 1.0);
    EXPECT_LT(*ns, 1000.0);
  }
}

// The unit's own variation (5.1-6.9 ns on a quiet AMX Xeon) is not a change; a shared unit's
// 2.2-2.8x is, in either order.
TEST(TileRate, TellsAMovedUnitFromJitter) {
  EXPECT_FALSE(amx_unit_varied(6.0, 6.0));
  EXPECT_FALSE(amx_unit_varied(5.1, 6.9));
  EXPECT_FALSE(amx_unit_varied(6.9, 5.1));
  EXPECT_TRUE(amx_unit_varied(6.0, 15.0));
  EXPECT_TRUE(amx_unit_varied(15.0, 6.0));
}

}  // namespace
}  // namespace fp4serve::kernels
