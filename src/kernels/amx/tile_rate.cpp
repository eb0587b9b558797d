// A fixed amount of tile work for timing the AMX unit itself: on a shared VM its rate moved 2.5x
// between minutes while nothing else ran in the guest (docs/perf.md, session 37), so a benchmark
// of AMX kernels is read together with this rate taken beside it.
// ISA translation unit: no standard-library templates here.
#include <immintrin.h>

#include <cstdint>

#include "kernels/amx/amx_tiles.h"
#include "kernels/isa_kernels.h"

namespace fp4serve::kernels::amx {

void run_tile_products(std::int64_t count) {
  configure_tiles(64, 64);
  // Four accumulators on zero operands: independent products, at the unit's issue rate.
  _tile_zero(4);
  _tile_zero(5);
  for (std::int64_t i = 0; i < count; i += 4) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 5);
    _tile_dpbf16ps(2, 4, 5);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_release();
}

}  // namespace fp4serve::kernels::amx
