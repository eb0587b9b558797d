#include "kernels/registry.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>

#include "kernels/backend.h"
#include "kernels/faults.h"
#include "kernels/kv_cache.h"
#include "kernels/model_shapes.h"
#include "kernels/validation.h"
#include "util/error.h"

namespace fp4serve::kernels {

namespace {

using Clock = std::chrono::steady_clock;
constexpr OpFamily kFamilies[] = {OpFamily::Fp4Gemm, OpFamily::DenseGemm, OpFamily::Moe, OpFamily::Attention,
                                  OpFamily::LinearAttention};

std::uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

struct Candidate {
  const Backend* backend = nullptr;
  FamilyImpl impl;  // with injected faults, if any
  std::unique_ptr<FaultHolder> holder;
};

}  // namespace

const std::string& BackendOptions::requested(OpFamily f) const {
  switch (f) {
    case OpFamily::DenseGemm: return dense;
    case OpFamily::Fp4Gemm: return fp4_gemm;
    case OpFamily::Moe: return moe;
    case OpFamily::Attention: return attention;
    case OpFamily::LinearAttention: return linear_attention;
  }
  return fp4_gemm;
}

std::vector<std::string> backend_choices(OpFamily family) {
  std::vector<std::string> out{"auto"};
  for (const Backend& b : compiled_backends())
    if (b.family(family).present()) out.push_back(b.name);
  return out;
}

struct KernelSelection::State {
  BackendOptions options;
  ShapeSet shapes;
  CpuFeatures cpu;
  std::vector<FaultSpec> faults;
  std::uint64_t next_seed = 0;
  struct Family {
    OpFamily family;
    std::vector<Candidate> candidates;  // aligned with the report's verdicts
    int chosen = -1;
    bool used = false;
    bool healthy = true;
  };
  std::vector<Family> families;
  SelectionReport report;
  KernelSet current;
  std::uint64_t generation = 0;
  Clock::time_point last_pass{};
  bool ever_revalidated = false;

  FamilyReport& rep(OpFamily f) {
    for (auto& r : report.families)
      if (r.family == f) return r;
    fail("internal: no report for family ", family_name(f));
  }

  // Whether auto may quantize activations to int8, and why (for the report and the verdicts),
  // decided once per selection from the options and the checkpoint.
  struct Int8Policy {
    bool allowed;
    std::string why;
  };
  Int8Policy int8_policy() const {
    if (options.exact_activations) return {false, "not allowed: --exact-activations keeps the fp32 class"};
    if (options.allow_int8_activations) return {true, "allowed by --allow-int8-activations"};
    const bool nvfp4 = !shapes.fp4.empty() || std::any_of(shapes.moe.begin(), shapes.moe.end(), [](const MoeShape& m) {
      return m.expert_kind == SchemeKind::NVFP4;
    });
    if (!nvfp4) return {false, "not used: the model has no NVFP4 weights"};
    if (shapes.semantics == Fp4Semantics::W4A4)
      return {false,
              "not allowed: --w4a4 reproduces a GPU's 4-bit activations, int8 would round them again; opt in with "
              "--allow-int8-activations"};
    if (shapes.fp4_activations_calibrated)
      return {true,
              "allowed: every NVFP4 weight has an input scale, so the checkpoint was calibrated for 4-bit activations; "
              "--exact-activations keeps the fp32 class"};
    return {false,
            "not allowed: not every NVFP4 weight has an input scale (a weight-only W4A16 checkpoint, or built-in shapes); "
            "opt in with --allow-int8-activations"};
  }

  // Validates candidates of `fam` from the top; `initial` distinguishes start-up (explicit
  // failures throw) from the guard (they mark the family unhealthy). Returns the chosen index.
  int choose(Family& fam, FamilyValidator& validator, bool initial) {
    FamilyReport& r = rep(fam.family);
    const std::string& requested = options.requested(fam.family);
    const bool automatic = requested == "auto";
    int chosen = -1;
    for (std::size_t i = 0; i < fam.candidates.size(); ++i) {
      Candidate& c = fam.candidates[i];
      Verdict& v = r.verdicts[i];
      if (!automatic && c.backend->name != requested) continue;
      if (v.status == VerdictStatus::Unsupported || (!initial && v.status == VerdictStatus::Failed)) continue;
      // auto never rounds activations to bf16 unless told otherwise: a bf16-activation backend
      // passes its own (looser) tolerance yet can flip a greedy token against the fp32 oracle.
      // Split activations (Precision::Activations16, two or three bf16 parts; Int8x3Activations,
      // three int8 parts per block) are allowed: their rounding is >= 250x smaller than bf16's and
      // passes the fp32 tolerance.
      // int8 activations only where the policy (int8_policy) allows them.
      const bool eligible = !automatic || ((options.allow_bf16_activations || c.impl.precision != Precision::Bf16Activations) &&
                                           (report.int8_activations || c.impl.precision != Precision::Int8Activations));
      const std::string why_not = c.impl.precision == Precision::Int8Activations
                                      ? "not chosen by auto: quantizes activations to int8 (" + report.int8_policy + ")"
                                      : "not chosen by auto: rounds activations to bf16 (opt in with --allow-bf16-activations)";
      if (!eligible && !options.validate_all) {
        v.reason = why_not;
        continue;
      }
      if (chosen >= 0 && !options.validate_all) continue;
      validator.validate(c.impl, v);
      if (!eligible) {
        if (v.reason.empty()) v.reason = why_not;
        continue;
      }
      if (v.status == VerdictStatus::Passed && chosen < 0) chosen = static_cast<int>(i);
    }
    if (chosen >= 0 || !initial) return chosen;
    // Nothing passed at start-up: refuse, saying why for every candidate.
    std::vector<std::string> why;
    for (const Verdict& v : r.verdicts)
      if (automatic || v.backend == requested) why.push_back(v.backend + ": " + std::string(verdict_status_name(v.status)) + " (" + v.reason + ")");
    if (!automatic)
      fail(family_flag(fam.family), " ", requested, ": ", join(why, "; "), ". Refusing to start with a ", family_name(fam.family),
           " backend that does not match the reference; use auto to fall back to one that does");
    fail("no ", family_name(fam.family), " backend passed validation on this model's shapes: ", join(why, "; "));
  }

  void set_kernel(OpFamily f, const FamilyImpl* impl) {
    const KernelSet ref = reference_kernels();
    switch (f) {
      case OpFamily::DenseGemm: current.dense_gemm = impl ? impl->gemm : ref.dense_gemm; break;
      case OpFamily::Fp4Gemm: current.fp4_gemm = impl ? impl->gemm : ref.fp4_gemm; break;
      case OpFamily::Moe: current.moe = impl ? impl->moe : ref.moe; break;
      case OpFamily::Attention: current.attention = impl ? impl->attention : ref.attention; break;
      case OpFamily::LinearAttention:
        current.conv1d = impl ? impl->conv1d : ref.conv1d;
        current.delta_rule = impl ? impl->delta_rule : ref.delta_rule;
        break;
    }
  }
};

KernelSelection::KernelSelection() : s_(std::make_unique<State>()) {}
KernelSelection::~KernelSelection() = default;

KernelSet KernelSelection::kernels() const {
  std::lock_guard<std::mutex> lk(mu_);
  return s_->current;
}

SelectionReport KernelSelection::report() const {
  std::lock_guard<std::mutex> lk(mu_);
  return s_->report;
}

std::uint64_t KernelSelection::generation() const {
  std::lock_guard<std::mutex> lk(mu_);
  return s_->generation;
}

GuardCounters KernelSelection::counters() const {
  std::lock_guard<std::mutex> lk(mu_);
  return s_->report.counters;
}

std::unique_ptr<KernelSelection> select_kernels(const BackendOptions& options, const ShapeSet& shapes) {
  const auto t0 = Clock::now();
  std::unique_ptr<KernelSelection> sel(new KernelSelection());
  KernelSelection::State& s = *sel->s_;
  s.options = options;
  s.shapes = shapes;
  if (!kv_dtype_supported(options.kv_cache_dtype))
    fail("--kv-cache-dtype: ", dtype_name(options.kv_cache_dtype), " is not supported (f32, f16, bf16)");
  for (AttentionShape& a : s.shapes.attention) a.kv_dtype = options.kv_cache_dtype;
  s.cpu = options.cpu ? *options.cpu : cpu_features();
  const char* env = std::getenv("FP4SERVE_INJECT_FAULT");
  const std::string fault_text = options.inject_faults ? *options.inject_faults : (env != nullptr ? env : "");
  s.faults = parse_fault_specs(fault_text);
  s.next_seed = options.seed != 0 ? options.seed : fresh_seed();
  s.report.seed = s.next_seed;
  s.report.shapes_source = shapes.source;
  s.report.semantics = shapes.semantics == Fp4Semantics::W4A4 ? "W4A4" : "W4A16";
  const auto [int8_allowed, int8_why] = s.int8_policy();
  s.report.int8_activations = int8_allowed;
  s.report.int8_policy = int8_why;
  s.report.kv_cache_dtype = std::string(kv_dtype_name(options.kv_cache_dtype));
  s.report.injected_faults = fault_text;

  for (OpFamily f : kFamilies) {
    const std::string& requested = options.requested(f);
    if (requested != "auto") {
      const Backend* b = find_backend(requested);
      if (b == nullptr || !b->family(f).present())
        fail(family_flag(f), " ", requested, ": ", b == nullptr ? "no such backend" : "that backend has no " + std::string(family_name(f)) + " kernels",
             "; choose one of ", join(backend_choices(f), ", "));
    }
    KernelSelection::State::Family fam;
    fam.family = f;
    FamilyReport r;
    r.family = f;
    r.requested = requested;
    FamilyValidator validator(f, s.shapes, s.next_seed++);  // with the KV cache type set above
    r.shapes = validator.shape_descriptions();
    r.cases = validator.case_descriptions();
    for (const Backend& b : compiled_backends()) {
      const FamilyImpl& impl = b.family(f);
      if (!impl.present()) continue;
      Candidate c;
      c.backend = &b;
      const auto specs = faults_for(s.faults, b.name, f);
      c.impl = wrap_with_faults(impl, f, specs, c.holder);
      Verdict v;
      v.backend = b.name;
      v.precision = std::string(precision_name(impl.precision));
      v.tolerance = validation_tolerance(impl.precision);
      for (const auto& spec : specs) v.faults.push_back(spec.text());
      if (const auto missing = s.cpu.missing(b.needs); !missing.empty()) {
        v.status = VerdictStatus::Unsupported;
        v.reason = "needs " + join(missing, ", ");
      } else if (auto why = validator.unsupported(impl); !why.empty()) {
        v.status = VerdictStatus::Unsupported;
        v.reason = why;
      }
      fam.candidates.push_back(std::move(c));
      r.verdicts.push_back(std::move(v));
    }
    s.report.families.push_back(r);
    fam.used = !validator.empty();
    if (fam.used) {
      fam.chosen = s.choose(fam, validator, true);
      FamilyReport& rr = s.rep(f);
      rr.chosen = fam.candidates[static_cast<std::size_t>(fam.chosen)].backend->name;
      rr.reference_seconds = validator.reference_seconds();
      s.set_kernel(f, &fam.candidates[static_cast<std::size_t>(fam.chosen)].impl);
    } else {
      // Not used by this model; the reference stands in so no pointer is null.
      if (requested != "auto") {
        FamilyReport& rr = s.rep(f);
        for (auto& v : rr.verdicts)
          if (v.backend == requested && v.status == VerdictStatus::Unsupported)
            fail(family_flag(f), " ", requested, ": not supported on this machine (", v.reason, ")");
      }
      s.set_kernel(f, nullptr);
    }
    s.families.push_back(std::move(fam));
  }
  s.report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return sel;
}

std::unique_ptr<KernelSelection> select_kernels(const BackendOptions& options, const ModelConfig& config,
                                                const ResolvedQuantization& quantization) {
  return select_kernels(options, shapes_for_model(config, quantization, options.semantics));
}

GuardOutcome KernelSelection::report_non_finite(const std::string& where) {
  std::lock_guard<std::mutex> lk(mu_);
  State& s = *s_;
  GuardOutcome out;
  s.report.counters.non_finite_events++;
  GuardEvent event;
  event.where = where;
  const double interval = s.options.revalidate_interval_s;
  if (s.ever_revalidated && interval > 0 &&
      std::chrono::duration<double>(Clock::now() - s.last_pass).count() < interval) {
    s.report.counters.skipped++;
    event.actions.push_back("re-validation skipped: the last one passed less than " + std::to_string(interval) + " s ago");
    out.actions = event.actions;
    s.report.events.push_back(std::move(event));
    return out;
  }
  bool all_passed = true;
  for (auto& fam : s.families) {
    if (!fam.used || fam.chosen < 0) continue;
    out.revalidated = true;
    FamilyReport& r = s.rep(fam.family);
    const std::string name(family_name(fam.family));
    FamilyValidator validator(fam.family, s.shapes, s.next_seed++);
    Verdict& v = r.verdicts[static_cast<std::size_t>(fam.chosen)];
    v.suspect = true;
    s.report.counters.revalidations++;
    validator.validate(fam.candidates[static_cast<std::size_t>(fam.chosen)].impl, v);
    if (v.status == VerdictStatus::Passed) {
      event.actions.push_back(name + ": " + v.backend + " re-validated, error " + std::to_string(v.error));
      continue;
    }
    all_passed = false;
    s.report.counters.revalidation_failures++;
    v.reason = "failed re-validation after a non-finite output (" + where + "): " + v.reason;
    const std::string failed = v.backend;
    if (r.requested != "auto") {
      fam.healthy = false;
      event.actions.push_back(name + ": " + failed + " failed re-validation; " + std::string(family_flag(fam.family)) +
                              " pins it, so there is no fallback");
      continue;
    }
    const int next = s.choose(fam, validator, false);
    if (next < 0) {
      fam.healthy = false;
      event.actions.push_back(name + ": " + failed + " failed re-validation and no other backend passed");
      continue;
    }
    fam.chosen = next;
    r.chosen = fam.candidates[static_cast<std::size_t>(next)].backend->name;
    s.set_kernel(fam.family, &fam.candidates[static_cast<std::size_t>(next)].impl);
    s.report.counters.fallbacks++;
    s.generation++;
    out.kernels_changed = true;
    event.actions.push_back(name + ": " + failed + " failed re-validation; now using " + r.chosen + " (passed, error " +
                            std::to_string(r.verdicts[static_cast<std::size_t>(next)].error) + ")");
  }
  if (all_passed) {
    s.ever_revalidated = true;
    s.last_pass = Clock::now();
  }
  for (const auto& fam : s.families) out.healthy = out.healthy && fam.healthy;
  out.actions = event.actions;
  s.report.events.push_back(std::move(event));
  return out;
}

}  // namespace fp4serve::kernels
