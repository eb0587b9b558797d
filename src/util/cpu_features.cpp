#include "util/cpu_features.h"

#include <cpuid.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "util/error.h"

namespace fp4serve {

namespace {

struct FeatureBit {
  CpuFeature feature;
  const char* name;
};
// Order matches the enum.
constexpr FeatureBit kNames[kCpuFeatureCount] = {
    {CpuFeature::SSE42, "sse4_2"},         {CpuFeature::AVX, "avx"},
    {CpuFeature::AVX2, "avx2"},            {CpuFeature::FMA, "fma"},
    {CpuFeature::F16C, "f16c"},            {CpuFeature::AVX512F, "avx512f"},
    {CpuFeature::AVX512BW, "avx512bw"},    {CpuFeature::AVX512VL, "avx512vl"},
    {CpuFeature::AVX512DQ, "avx512dq"},    {CpuFeature::AVX512CD, "avx512cd"},
    {CpuFeature::AVX512_VNNI, "avx512_vnni"}, {CpuFeature::AVX512_BF16, "avx512_bf16"},
    {CpuFeature::AVX512_FP16, "avx512_fp16"}, {CpuFeature::AVX512_VBMI, "avx512vbmi"},
    {CpuFeature::AVX_VNNI, "avx_vnni"},    {CpuFeature::AMX_TILE, "amx_tile"},
    {CpuFeature::AMX_BF16, "amx_bf16"},    {CpuFeature::AMX_INT8, "amx_int8"},
};

int idx(CpuFeature f) { return static_cast<int>(f); }

bool bit(unsigned reg, int b) { return ((reg >> b) & 1u) != 0; }

// XGETBV without -mxsave: the instruction is always present once CPUID reports OSXSAVE.
std::uint64_t xgetbv0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

std::string brand_string() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000004u) return "unknown";
  char buf[49] = {};
  for (unsigned leaf = 0; leaf < 3; ++leaf) {
    __get_cpuid(0x80000002u + leaf, &a, &b, &c, &d);
    const unsigned regs[4] = {a, b, c, d};
    std::memcpy(buf + leaf * 16, regs, 16);
  }
  std::string s(buf);
  const auto first = s.find_first_not_of(' ');
  const auto last = s.find_last_not_of(' ');
  return first == std::string::npos ? "unknown" : s.substr(first, last - first + 1);
}

int online_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

// Linux keeps AMX tile data off until a process asks (kernel 5.16+); without the grant the first
// tile instruction faults. Returns whether the permission is held, and a sentence for doctor.
bool request_amx_permission(std::string& what) {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchGetXcompPerm = 0x1022;
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr unsigned long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    what = "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused (kernel older than 5.16 or AMX disabled)";
    return false;
  }
  unsigned long mask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask) != 0 || ((mask >> kXfeatureXtiledata) & 1u) == 0) {
    what = "arch_prctl granted the request but XTILEDATA is not in the permitted set";
    return false;
  }
  what = "granted";
  return true;
#else
  what = "not Linux: no way to request tile-data permission";
  return false;
#endif
}

std::vector<CpuFeature> parse_disable_list(std::string_view list) {
  std::vector<CpuFeature> out;
  while (!list.empty()) {
    const auto comma = list.find(',');
    std::string_view name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    if (name.empty()) continue;
    bool found = false;
    for (const auto& n : kNames)
      if (name == n.name) {
        out.push_back(n.feature);
        found = true;
      }
    if (!found) {
      std::string known;
      for (const auto& n : kNames) known += std::string(known.empty() ? "" : ", ") + n.name;
      fail("FP4SERVE_CPU_DISABLE: unknown feature '", name, "'; known: ", known);
    }
  }
  return out;
}

}  // namespace

std::string_view cpu_feature_name(CpuFeature feature) { return kNames[idx(feature)].name; }

std::vector<CpuFeature> all_cpu_features() {
  std::vector<CpuFeature> out;
  for (const auto& n : kNames) out.push_back(n.feature);
  return out;
}

bool CpuFeatures::usable(CpuFeature f) const {
  if (!cpuid[idx(f)]) return false;
  if (std::find(disabled.begin(), disabled.end(), f) != disabled.end()) return false;
  switch (f) {
    case CpuFeature::SSE42: return true;
    case CpuFeature::AVX:
    case CpuFeature::AVX2:
    case CpuFeature::FMA:
    case CpuFeature::F16C:
    case CpuFeature::AVX_VNNI: return os_avx;
    case CpuFeature::AMX_TILE:
    case CpuFeature::AMX_BF16:
    case CpuFeature::AMX_INT8: return os_amx;
    default: return os_avx && os_avx512;  // every AVX512* feature
  }
}

std::vector<std::string> CpuFeatures::missing(const std::vector<CpuFeature>& needed) const {
  std::vector<std::string> out;
  for (CpuFeature f : needed) {
    if (usable(f)) continue;
    std::string why;
    if (!cpuid[idx(f)]) why = "no CPU support";
    else if (std::find(disabled.begin(), disabled.end(), f) != disabled.end()) why = "disabled by FP4SERVE_CPU_DISABLE";
    else why = "CPU has it but the OS does not enable its register state";
    out.push_back(std::string(cpu_feature_name(f)) + " (" + why + ")");
  }
  return out;
}

CpuFeatures probe_cpu_features(std::string_view disable_list) {
  CpuFeatures c;
  c.logical_cpus = online_cpus();
  c.model_name = brand_string();
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &cx, &d) == 0) return c;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &cx, 4);
  c.vendor = vendor;

  __get_cpuid(1, &a, &b, &cx, &d);
  auto set = [&c](CpuFeature f, bool v) { c.cpuid[idx(f)] = v; };
  set(CpuFeature::SSE42, bit(cx, 20));
  set(CpuFeature::FMA, bit(cx, 12));
  set(CpuFeature::AVX, bit(cx, 28));
  set(CpuFeature::F16C, bit(cx, 29));
  const bool osxsave = bit(cx, 27);

  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, cx, d);
    const unsigned subleaves = a;
    set(CpuFeature::AVX2, bit(b, 5));
    set(CpuFeature::AVX512F, bit(b, 16));
    set(CpuFeature::AVX512DQ, bit(b, 17));
    set(CpuFeature::AVX512CD, bit(b, 28));
    set(CpuFeature::AVX512BW, bit(b, 30));
    set(CpuFeature::AVX512VL, bit(b, 31));
    set(CpuFeature::AVX512_VBMI, bit(cx, 1));
    set(CpuFeature::AVX512_VNNI, bit(cx, 11));
    set(CpuFeature::AMX_BF16, bit(d, 22));
    set(CpuFeature::AVX512_FP16, bit(d, 23));
    set(CpuFeature::AMX_TILE, bit(d, 24));
    set(CpuFeature::AMX_INT8, bit(d, 25));
    if (subleaves >= 1) {
      __cpuid_count(7, 1, a, b, cx, d);
      set(CpuFeature::AVX_VNNI, bit(a, 4));
      set(CpuFeature::AVX512_BF16, bit(a, 5));
    }
  }

  if (osxsave) {
    const std::uint64_t xcr0 = xgetbv0();
    c.os_avx = (xcr0 & 0x6u) == 0x6u;
    c.os_avx512 = (xcr0 & 0xE0u) == 0xE0u;
    const bool os_tiles = ((xcr0 >> 17) & 3u) == 3u;
    if (c.cpuid[idx(CpuFeature::AMX_TILE)]) {
      if (!os_tiles) c.amx_permission = "XCR0 does not enable tile state";
      else c.os_amx = request_amx_permission(c.amx_permission);
    } else {
      c.amx_permission = "no AMX on this CPU";
    }
  } else {
    c.amx_permission = "OS does not use XSAVE";
  }
  c.disabled = parse_disable_list(disable_list);
  return c;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    const char* env = std::getenv("FP4SERVE_CPU_DISABLE");
    return probe_cpu_features(env != nullptr ? env : "");
  }();
  return features;
}

}  // namespace fp4serve
