#pragma once
// What this CPU can run: CPUID feature bits, and whether the OS saves the state they need
// (XCR0 via XGETBV for AVX and AVX-512; on Linux the arch_prctl permission for AMX tile data).
// A feature is *usable* only when both say yes. Kernel backends declare the features they need;
// the registry asks `usable()` before it even tries them.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve {

enum class CpuFeature {
  SSE42,
  AVX,
  AVX2,
  FMA,
  F16C,
  AVX512F,
  AVX512BW,
  AVX512VL,
  AVX512DQ,
  AVX512CD,
  AVX512_VNNI,
  AVX512_BF16,
  AVX512_FP16,
  AVX512_VBMI,
  AVX_VNNI,
  AMX_TILE,
  AMX_BF16,
  AMX_INT8,
};
inline constexpr int kCpuFeatureCount = static_cast<int>(CpuFeature::AMX_INT8) + 1;

// Lower-case name as /proc/cpuinfo spells it ("avx512_bf16", "amx_tile"); for doctor and errors.
std::string_view cpu_feature_name(CpuFeature feature);
std::vector<CpuFeature> all_cpu_features();

struct CpuFeatures {
  std::string vendor;      // "GenuineIntel"
  std::string model_name;  // brand string, e.g. "Intel(R) Xeon(R) Platinum 8480+"
  int logical_cpus = 1;    // online logical CPUs this process may run on

  bool cpuid[kCpuFeatureCount] = {};  // the CPU reports it
  // OS support: the XCR0 bits of the register state are enabled (and, for AMX, the kernel
  // granted this process the tile-data permission).
  bool os_avx = false;     // XCR0 bits 1-2 (SSE, AVX state)
  bool os_avx512 = false;  // XCR0 bits 5-7 (opmask, ZMM_Hi256, Hi16_ZMM)
  bool os_amx = false;     // XCR0 bits 17-18 (XTILECFG, XTILEDATA) and arch_prctl granted
  std::string amx_permission;  // what the AMX permission request said, for doctor
  // Features turned off by FP4SERVE_CPU_DISABLE (comma-separated names), to test fallbacks on
  // hardware that has everything.
  std::vector<CpuFeature> disabled;

  bool usable(CpuFeature feature) const;
  // The features of `needed` that are not usable, with why ("avx512f (no CPU support)").
  std::vector<std::string> missing(const std::vector<CpuFeature>& needed) const;
};

// Probes once (thread-safe) and returns the same object afterwards. The first call also asks
// Linux for AMX tile-data permission when the CPU has AMX, since that must precede any tile use.
const CpuFeatures& cpu_features();

// The probe itself, with a given disable list (comma-separated names); for tests.
CpuFeatures probe_cpu_features(std::string_view disable_list);

}  // namespace fp4serve
