#include "kernels/moe_traffic.h"

#include <atomic>

namespace fp4serve::kernels {

namespace {
std::atomic<std::uint64_t> g_calls{0}, g_experts{0}, g_bytes{0};
}  // namespace

void count_moe_call(std::uint64_t experts, std::uint64_t bytes) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  g_experts.fetch_add(experts, std::memory_order_relaxed);
  g_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

MoeTraffic moe_traffic() {
  return {g_calls.load(std::memory_order_relaxed), g_experts.load(std::memory_order_relaxed),
          g_bytes.load(std::memory_order_relaxed)};
}

MoeTraffic operator-(const MoeTraffic& b, const MoeTraffic& a) {
  return {b.calls - a.calls, b.experts - a.experts, b.bytes - a.bytes};
}

}  // namespace fp4serve::kernels
