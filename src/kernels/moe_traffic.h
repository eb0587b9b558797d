#pragma once
// What the MoE kernels read of the routed experts: each call reads every expert it routes at
// least one token to once, whatever the number of its tokens. `fp4serve bench` takes the
// difference around a decode test for the bytes a batched step really reads, so the batched
// decode gets a roofline of its own (docs/perf.md, "Batched decode bound").
#include <cstdint>

namespace fp4serve::kernels {

struct MoeTraffic {
  std::uint64_t calls = 0;    // MoE layer calls
  std::uint64_t experts = 0;  // distinct experts used, summed over the calls
  std::uint64_t bytes = 0;    // their weights (codes and scales), summed over the calls
};

// Adds one call that used `experts` distinct experts of `bytes` in all (relaxed atomics: calls
// come from one thread at a time per model, and readers only need totals between tests).
void count_moe_call(std::uint64_t experts, std::uint64_t bytes);

// The totals since the process started.
MoeTraffic moe_traffic();

// b - a, field by field.
MoeTraffic operator-(const MoeTraffic& b, const MoeTraffic& a);

}  // namespace fp4serve::kernels
