#pragma once
// The AMX unit's own rate, for reading benchmarks of AMX kernels: on a shared VM it moved 2.5x
// between minutes while nothing else ran in the guest (docs/perf.md, session 37), and prefill,
// the batched lm_head and the attention tiles move with it. `fp4serve bench` samples it before
// and after its tests; kernels_bench runs it first and last.
#include <optional>

namespace fp4serve::kernels {

// This CPU and OS run AMX bf16 tiles.
bool amx_tiles_usable();

// Nanoseconds per 16 x 16 x 32 bf16 tile product (independent products, about 1 ms of them) on
// each of the kernels' threads at once, the slowest thread's; nothing where this CPU or OS does
// not run AMX tiles.
std::optional<double> amx_tile_product_ns();

// Two samples of amx_tile_product_ns further apart than the unit's own variation (5.1-6.9 ns on a
// quiet AMX Xeon, turbo to sustained clock: up to 1.35x; 2.2-2.8x between a quiet and a shared
// minute): more than 1.5x.
bool amx_unit_varied(double ns_a, double ns_b);

}  // namespace fp4serve::kernels
