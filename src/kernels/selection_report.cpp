#include "kernels/selection_report.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "kernels/shapes.h"
#include "util/error.h"

namespace fp4serve::kernels {

std::string_view verdict_status_name(VerdictStatus s) {
  switch (s) {
    case VerdictStatus::Unsupported: return "unsupported";
    case VerdictStatus::Failed: return "failed";
    case VerdictStatus::Passed: return "passed";
    case VerdictStatus::NotTried: return "not-tried";
  }
  return "?";
}

const FamilyReport& SelectionReport::family(OpFamily f) const {
  for (const auto& r : families)
    if (r.family == f) return r;
  fail("selection report has no family ", family_name(f));
}

namespace {

// JSON has no infinity: a non-finite error figure is written as null with "non_finite": true.
nlohmann::json error_json(double e) { return std::isfinite(e) && e >= 0 ? nlohmann::json(e) : nlohmann::json(nullptr); }

std::string sci(double v) {
  std::ostringstream os;
  if (std::isinf(v)) return "non-finite";
  os << std::setprecision(2) << std::scientific << v;
  return os.str();
}

}  // namespace

nlohmann::json SelectionReport::to_json() const {
  nlohmann::json j;
  j["shapes_source"] = shapes_source;
  j["semantics"] = semantics;
  j["int8_activations"] = int8_activations;
  j["int8_policy"] = int8_policy;
  j["kv_cache_dtype"] = kv_cache_dtype;
  j["seed"] = seed;
  j["injected_faults"] = injected_faults;
  j["seconds"] = seconds;
  j["families"] = nlohmann::json::array();
  for (const auto& f : families) {
    nlohmann::json fj;
    fj["family"] = family_name(f.family);
    fj["flag"] = family_flag(f.family);
    fj["requested"] = f.requested;
    fj["chosen"] = f.chosen.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.chosen);
    fj["shapes"] = f.shapes;
    fj["cases"] = f.cases;
    fj["reference_seconds"] = f.reference_seconds;
    fj["candidates"] = nlohmann::json::array();
    for (const auto& v : f.verdicts) {
      nlohmann::json vj;
      vj["backend"] = v.backend;
      vj["status"] = verdict_status_name(v.status);
      vj["reason"] = v.reason;
      vj["error"] = error_json(v.error);
      vj["non_finite"] = std::isinf(v.error);
      vj["tolerance"] = v.tolerance;
      vj["precision"] = v.precision;
      vj["seconds"] = v.seconds;
      vj["faults"] = v.faults;
      vj["suspect"] = v.suspect;
      fj["candidates"].push_back(vj);
    }
    j["families"].push_back(fj);
  }
  j["guard"] = {{"non_finite_events", counters.non_finite_events},
                {"revalidations", counters.revalidations},
                {"revalidation_failures", counters.revalidation_failures},
                {"fallbacks", counters.fallbacks},
                {"skipped", counters.skipped}};
  j["guard_events"] = nlohmann::json::array();
  for (const auto& e : events) j["guard_events"].push_back({{"where", e.where}, {"actions", e.actions}});
  return j;
}

std::string SelectionReport::to_text() const {
  std::ostringstream os;
  os << "kernels: validated on " << shapes_source << " (" << semantics << ", seed " << seed << ") in " << std::fixed
     << std::setprecision(2) << seconds << " s\n";
  if (!injected_faults.empty()) os << "kernels: FP4SERVE_INJECT_FAULT=" << injected_faults << "\n";
  os << "kernels: int8 activations " << int8_policy << "\n";
  os << "kernels: KV cache " << kv_cache_dtype << " (--kv-cache-dtype)\n";
  for (const auto& f : families) {
    os << "  " << std::left << std::setw(10) << family_name(f.family) << " -> "
       << (f.chosen.empty() ? std::string("(not used by this model)") : f.chosen) << (f.requested == "auto" ? "" : " (requested)") << "\n";
    for (const auto& v : f.verdicts) {
      os << "      " << std::setw(10) << v.backend << std::setw(12) << verdict_status_name(v.status);
      if (v.status == VerdictStatus::Passed || v.status == VerdictStatus::Failed)
        os << "error " << sci(v.error) << " (tol " << sci(v.tolerance) << ", " << v.precision << ") " << std::fixed
           << std::setprecision(3) << v.seconds << " s";
      if (!v.reason.empty()) os << (v.status == VerdictStatus::Passed ? "" : "  ") << v.reason;
      if (!v.faults.empty()) {
        os << "  [injected:";
        for (const auto& x : v.faults) os << " " << x;
        os << "]";
      }
      os << "\n";
    }
  }
  return os.str();
}

}  // namespace fp4serve::kernels
