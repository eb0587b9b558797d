// The CPU probe: CPUID agrees with what Linux reports in /proc/cpuinfo, OS support gates
// usability, and the disable list works (the registry tests rely on it to simulate older CPUs).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "util/cpu_features.h"
#include "util/error.h"

namespace fp4serve {
namespace {

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(CpuFeatures, CpuidMatchesProcCpuinfo) {
  const auto flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line";
  const CpuFeatures& c = cpu_features();
  for (CpuFeature f : all_cpu_features()) {
    const std::string name(cpu_feature_name(f));
    // Linux hides a flag when the kernel disabled the feature, so cpuinfo => cpuid, not the reverse.
    if (flags.count(name) != 0) {
      EXPECT_TRUE(c.cpuid[static_cast<int>(f)]) << name;
      EXPECT_TRUE(c.usable(f)) << name << " is listed by the kernel, so its state must be enabled";
    }
  }
  EXPECT_GE(c.logical_cpus, 1);
  EXPECT_FALSE(c.model_name.empty());
}

TEST(CpuFeatures, UsableNeedsCpuidAndOs) {
  CpuFeatures c;
  c.cpuid[static_cast<int>(CpuFeature::AVX512F)] = true;
  c.os_avx = true;
  EXPECT_FALSE(c.usable(CpuFeature::AVX512F)) << "no ZMM state in XCR0";
  c.os_avx512 = true;
  EXPECT_TRUE(c.usable(CpuFeature::AVX512F));
  c.cpuid[static_cast<int>(CpuFeature::AMX_TILE)] = true;
  EXPECT_FALSE(c.usable(CpuFeature::AMX_TILE)) << "tile data permission not granted";
  c.os_amx = true;
  EXPECT_TRUE(c.usable(CpuFeature::AMX_TILE));
  const auto missing = c.missing({CpuFeature::AVX512F, CpuFeature::AVX2});
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_NE(missing[0].find("avx2 (no CPU support)"), std::string::npos) << missing[0];
}

TEST(CpuFeatures, DisableListTurnsFeaturesOff) {
  const CpuFeatures c = probe_cpu_features("avx512f,amx_tile");
  EXPECT_FALSE(c.usable(CpuFeature::AVX512F));
  EXPECT_FALSE(c.usable(CpuFeature::AMX_TILE));
  if (c.cpuid[static_cast<int>(CpuFeature::AVX512F)]) {
    const auto missing = c.missing({CpuFeature::AVX512F});
    ASSERT_EQ(missing.size(), 1u);
    EXPECT_NE(missing[0].find("FP4SERVE_CPU_DISABLE"), std::string::npos) << missing[0];
  }
  try {
    (void)probe_cpu_features("avx2,avx1024");
    FAIL() << "unknown feature accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("avx1024"), std::string::npos) << e.what();
  }
}

TEST(CpuFeatures, AmxPermissionIsRequestedWhenPresent) {
  const CpuFeatures& c = cpu_features();
  EXPECT_FALSE(c.amx_permission.empty());
  if (c.cpuid[static_cast<int>(CpuFeature::AMX_TILE)] && c.os_amx) {
    EXPECT_EQ(c.amx_permission, "granted");
  }
}

}  // namespace
}  // namespace fp4serve
