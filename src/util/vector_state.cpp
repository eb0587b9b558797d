#include "util/vector_state.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cstdint>

#include "util/cpu_features.h"

namespace fp4serve {

namespace {

// The one function of this file that may run AVX: called only where the CPU has it.
__attribute__((target("avx"))) void vzeroupper() { _mm256_zeroupper(); }

bool can_read_xinuse() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || ((c >> 27) & 1u) == 0) return false;  // OSXSAVE
  if (__get_cpuid_max(0, nullptr) < 0xD) return false;
  __cpuid_count(0xD, 1, a, b, c, d);
  return ((a >> 2) & 1u) != 0;  // XGETBV with ECX = 1
}

}  // namespace

void clear_upper_vector_state() {
  static const bool avx = cpu_features().usable(CpuFeature::AVX);
  if (avx) vzeroupper();
}

std::optional<bool> upper_vector_state_in_use() {
  static const bool readable = can_read_xinuse();
  if (!readable) return std::nullopt;
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  constexpr std::uint32_t kYmmHi128 = 1u << 2, kZmmHi256 = 1u << 6;
  return (lo & (kYmmHi128 | kZmmHi256)) != 0;
}

}  // namespace fp4serve
