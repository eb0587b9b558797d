#include "kernels/doctor_report.h"

#include <sys/utsname.h>

#include <sstream>

#include "build_info.h"
#include "formats/checkpoint.h"
#include "formats/model_config.h"
#include "formats/quant_config.h"
#include "formats/quant_scheme.h"
#include "kernels/backend.h"
#include "kernels/model_shapes.h"
#include "util/huge_pages.h"
#include "util/error.h"
#include "util/thread_pool.h"

#ifndef FP4SERVE_KERNEL_FLAGS_AVX2
#define FP4SERVE_KERNEL_FLAGS_AVX2 ""
#define FP4SERVE_KERNEL_FLAGS_AVX512 ""
#define FP4SERVE_KERNEL_FLAGS_VNNI ""
#define FP4SERVE_KERNEL_FLAGS_AMX ""
#endif

namespace fp4serve::kernels {

namespace {

nlohmann::json build_json() {
  nlohmann::json sanitizers = nlohmann::json::array();
#if defined(__SANITIZE_ADDRESS__)
  sanitizers.push_back("address");
#endif
#if defined(__SANITIZE_THREAD__)
  sanitizers.push_back("thread");
#endif
#if defined(NDEBUG)
  const bool assertions = false;
#else
  const bool assertions = true;
#endif
  return {{"version", build::kVersion},  {"git_revision", build::kGitRevision}, {"compiler", build::kCompiler},
          {"build_type", build::kBuildType}, {"cxx_flags", build::kCxxFlags},     {"sanitizers", sanitizers},
          {"assertions", assertions},
          {"kernel_flags", {{"avx2", FP4SERVE_KERNEL_FLAGS_AVX2}, {"avx512", FP4SERVE_KERNEL_FLAGS_AVX512}, {"vnni", FP4SERVE_KERNEL_FLAGS_VNNI}, {"amx", FP4SERVE_KERNEL_FLAGS_AMX}}}};
}

nlohmann::json os_json() {
  utsname u{};
  if (uname(&u) != 0) return {{"sysname", "unknown"}};
  return {{"sysname", u.sysname},
          {"release", u.release},
          {"version", u.version},
          {"machine", u.machine},
          {"transparent_huge_pages", transparent_huge_pages_mode()}};
}

nlohmann::json cpu_json(const CpuFeatures& c) {
  nlohmann::json features = nlohmann::json::object();
  for (CpuFeature f : all_cpu_features())
    features[std::string(cpu_feature_name(f))] = {{"cpuid", c.cpuid[static_cast<int>(f)]}, {"usable", c.usable(f)}};
  nlohmann::json disabled = nlohmann::json::array();
  for (CpuFeature f : c.disabled) disabled.push_back(cpu_feature_name(f));
  return {{"vendor", c.vendor},
          {"model", c.model_name},
          {"logical_cpus", c.logical_cpus},
          {"kernel_threads", global_thread_pool().size()},
          {"os_support", {{"avx", c.os_avx}, {"avx512", c.os_avx512}, {"amx", c.os_amx}, {"amx_permission", c.amx_permission}}},
          {"disabled", disabled},
          {"features", features}};
}

nlohmann::json backends_json(const CpuFeatures& cpu) {
  nlohmann::json out = nlohmann::json::array();
  for (const Backend& b : compiled_backends()) {
    nlohmann::json needs = nlohmann::json::array(), families = nlohmann::json::array();
    for (CpuFeature f : b.needs) needs.push_back(cpu_feature_name(f));
    for (OpFamily f : {OpFamily::Fp4Gemm, OpFamily::DenseGemm, OpFamily::Moe, OpFamily::Attention, OpFamily::LinearAttention})
      if (b.family(f).present()) families.push_back(family_name(f));
    const auto missing = cpu.missing(b.needs);
    out.push_back({{"name", b.name},
                   {"description", b.description},
                   {"speed_rank", b.speed_rank},
                   {"needs", needs},
                   {"missing", missing},
                   {"supported", missing.empty()},
                   {"families", families}});
  }
  return out;
}

}  // namespace

nlohmann::json doctor_report(const DoctorOptions& options) {
  BackendOptions bo = options.backends;
  bo.validate_all = true;
  const CpuFeatures cpu = bo.cpu ? *bo.cpu : cpu_features();
  nlohmann::json j;
  j["schema"] = "fp4serve.doctor/1";
  j["fp4serve"] = build_json();
  j["os"] = os_json();
  j["cpu"] = cpu_json(cpu);
  j["cuda"] = nullptr;  // not a CUDA build
  j["backends"] = backends_json(cpu);
  j["model"] = nullptr;

  ShapeSet shapes;
  if (options.model_dir) {
    const ModelConfig config = load_model_config(*options.model_dir);
    const Checkpoint ckpt = Checkpoint::open(*options.model_dir);
    const QuantConfig qc = load_quant_config(*options.model_dir);
    const ResolvedQuantization rq = resolve_quantization(ckpt, qc, ScaleValues::Skip);
    shapes = shapes_for_model(config, rq, bo.semantics);
    shapes.source = "model " + options.model_dir->string();
    j["model"] = {{"dir", options.model_dir->string()}, {"arch", arch_name(config.arch)}, {"hidden_size", config.hidden_size},
                  {"layers", config.num_hidden_layers}, {"experts", config.num_experts}, {"linear_modules", rq.modules.size()}};
  } else {
    shapes = builtin_shapes();
    shapes.semantics = bo.semantics;  // doctor --w4a4 without a model validates W4A4 too
  }
  try {
    auto sel = select_kernels(bo, shapes);
    j["validation"] = sel->report().to_json();
    j["ok"] = true;
    j["error"] = nullptr;
  } catch (const Error& e) {
    j["validation"] = nullptr;
    j["ok"] = false;
    j["error"] = e.what();
  }
  return j;
}

namespace {

std::string yesno(bool b) { return b ? "yes" : "no"; }

std::string sci(const nlohmann::json& v) {
  if (v.is_null()) return "non-finite";
  std::ostringstream os;
  os.precision(2);
  os << std::scientific << v.get<double>();
  return os.str();
}

}  // namespace

std::string doctor_text(const nlohmann::json& j) {
  std::ostringstream os;
  const auto& b = j["fp4serve"];
  os << "fp4serve " << b["version"].get<std::string>() << " (" << b["git_revision"].get<std::string>() << ")\n";
  os << "  build: " << b["compiler"].get<std::string>() << ", " << b["build_type"].get<std::string>() << ", CXXFLAGS \""
     << b["cxx_flags"].get<std::string>() << "\", assertions " << (b["assertions"].get<bool>() ? "on" : "off");
  if (!b["sanitizers"].empty()) os << ", sanitizers " << b["sanitizers"].dump();
  os << "\n  kernel flags:";
  const char* sep = " ";
  for (const auto& [folder, flags] : b["kernel_flags"].items()) {
    os << sep << folder << " \"" << flags.get<std::string>() << "\"";
    sep = ", ";
  }
  os << "\n";
  const auto& o = j["os"];
  os << "OS: " << o.value("sysname", "?") << " " << o.value("release", "?") << " " << o.value("machine", "?")
     << "; transparent huge pages: " << o.value("transparent_huge_pages", "?");
  const std::string thp = o.value("transparent_huge_pages", "");
  os << (thp == "never" || thp == "unavailable" ? " (weights stay in 4 KiB pages: decode streams them more slowly)"
                                                : " (weights are mapped for 2 MiB pages)")
     << "\n";
  const auto& c = j["cpu"];
  os << "CPU: " << c["model"].get<std::string>() << " (" << c["vendor"].get<std::string>() << "), " << c["logical_cpus"].get<int>()
     << " logical CPUs, kernels use " << c["kernel_threads"].get<int>() << " threads\n";
  const auto& s = c["os_support"];
  os << "  OS state: AVX " << yesno(s["avx"]) << ", AVX-512 " << yesno(s["avx512"]) << ", AMX " << yesno(s["amx"]) << " ("
     << s["amx_permission"].get<std::string>() << ")\n  features:";
  for (const auto& [name, f] : c["features"].items())
    os << " " << name << (f["usable"].get<bool>() ? "+" : f["cpuid"].get<bool>() ? "(cpu only)" : "-");
  os << "\n";
  if (!c["disabled"].empty()) os << "  disabled by FP4SERVE_CPU_DISABLE: " << c["disabled"].dump() << "\n";
  os << "CUDA: not a CUDA build\n";
  os << "Backends compiled in:\n";
  for (const auto& be : j["backends"]) {
    os << "  " << be["name"].get<std::string>() << ": " << (be["supported"].get<bool>() ? "supported" : "unsupported") << "; "
       << be["description"].get<std::string>() << "\n";
    if (!be["missing"].empty()) os << "      missing: " << be["missing"].dump() << "\n";
  }
  if (!j["model"].is_null()) os << "Model: " << j["model"]["dir"].get<std::string>() << " (" << j["model"]["arch"].get<std::string>() << ")\n";
  if (!j["ok"].get<bool>()) {
    os << "Validation FAILED: " << j["error"].get<std::string>() << "\n";
    return os.str();
  }
  const auto& v = j["validation"];
  os << "Validation on " << v["shapes_source"].get<std::string>() << " (" << v["semantics"].get<std::string>() << ", seed "
     << v["seed"].get<std::uint64_t>() << ", " << v["seconds"].get<double>() << " s):\n";
  if (!v["injected_faults"].get<std::string>().empty()) os << "  FP4SERVE_INJECT_FAULT=" << v["injected_faults"].get<std::string>() << "\n";
  os << "  int8 activations " << v["int8_policy"].get<std::string>() << "\n";
  os << "  KV cache " << v["kv_cache_dtype"].get<std::string>() << " (--kv-cache-dtype)\n";
  for (const auto& f : v["families"]) {
    os << "  " << f["family"].get<std::string>() << " -> "
       << (f["chosen"].is_null() ? std::string("(not used)") : f["chosen"].get<std::string>()) << "   [" << f["flag"].get<std::string>()
       << " " << f["requested"].get<std::string>() << "]\n";
    for (const auto& cand : f["candidates"]) {
      const std::string st = cand["status"];
      os << "      " << cand["backend"].get<std::string>() << ": " << st;
      if (st == "passed" || st == "failed")
        os << ", error " << sci(cand["error"]) << " (tolerance " << sci(cand["tolerance"]) << ", " << cand["precision"].get<std::string>()
           << "), " << cand["seconds"].get<double>() * 1e3 << " ms";
      if (!cand["reason"].get<std::string>().empty()) os << "; " << cand["reason"].get<std::string>();
      os << "\n";
    }
  }
  return os.str();
}

}  // namespace fp4serve::kernels
