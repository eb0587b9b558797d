#pragma once
// Every decision the registry made: per op family, each candidate's verdict with its error
// figure and time, the one chosen, and what the run-time guard did since. One object feeds the
// start-up log, `doctor`, and later /metrics. The JSON form is documented in docs/kernels.md.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/kernels.h"

namespace fp4serve::kernels {

enum class VerdictStatus {
  Unsupported,  // the CPU/OS lacks a needed feature, or the model has a shape it cannot run
  Failed,       // ran and produced a non-finite, unwritten or too-distant output
  Passed,
  NotTried,     // `auto` had already chosen a faster backend (or another was named explicitly)
};
std::string_view verdict_status_name(VerdictStatus s);

struct Verdict {
  std::string backend;
  VerdictStatus status = VerdictStatus::NotTried;
  std::string reason;        // why unsupported / failed, naming the shape and M
  double error = -1.0;       // worst error figure over all cases (< 0: not measured; inf: non-finite)
  double tolerance = 0.0;
  std::string precision;     // "fp32" / "16-bit-activations" / "bf16-activations" / "int8-activations"
  double seconds = 0.0;      // time spent running this backend on the cases
  std::vector<std::string> faults;  // injected faults (FP4SERVE_INJECT_FAULT entries)
  bool suspect = false;      // the run-time guard re-validated it after a non-finite output
};

struct FamilyReport {
  OpFamily family = OpFamily::Fp4Gemm;
  std::string requested = "auto";
  std::string chosen;                 // empty when the model does not use this family
  std::vector<std::string> shapes;    // what validation ran, described
  std::vector<std::string> cases;     // e.g. "M=1", "M=19", ...
  double reference_seconds = 0.0;     // computing the reference outputs
  std::vector<Verdict> verdicts;      // candidates, fastest first
};

struct GuardEvent {
  std::string where;                  // what the engine reported (e.g. "logits of request 17")
  std::vector<std::string> actions;   // one line per family
};

struct GuardCounters {
  std::uint64_t non_finite_events = 0;
  std::uint64_t revalidations = 0;          // backend re-validations run
  std::uint64_t revalidation_failures = 0;  // of those, failed
  std::uint64_t fallbacks = 0;              // families switched to another backend
  std::uint64_t skipped = 0;                // events within the re-validation interval
};

struct SelectionReport {
  std::string shapes_source;
  std::string semantics;  // "W4A16" / "W4A4"
  bool int8_activations = false;  // auto may take int8-activation backends
  std::string int8_policy;        // why (or why not), naming the flag that changes it
  std::string kv_cache_dtype = "f32";  // the cache type attention was validated on (--kv-cache-dtype)
  std::uint64_t seed = 0;
  std::string injected_faults;  // FP4SERVE_INJECT_FAULT as read
  double seconds = 0.0;         // whole selection, data generation included
  std::vector<FamilyReport> families;
  GuardCounters counters;
  std::vector<GuardEvent> events;

  const FamilyReport& family(OpFamily f) const;
  nlohmann::json to_json() const;
  std::string to_text() const;  // the start-up log lines
};

}  // namespace fp4serve::kernels
