#pragma once
// Choosing the kernels a model runs with, and keeping that choice honest while it serves.
//
//   auto sel = kernels::select_kernels(options, config, quantization);   // validates; may throw Error
//   model.set_kernels(sel->kernels());
//   log(sel->report().to_text());
//   ... on non-finite logits:
//   auto outcome = sel->report_non_finite("logits of request 17");
//   if (outcome.kernels_changed) model.set_kernels(sel->kernels());
//
// Per op family, `auto` ranks the backends compiled in (fastest first), skips those this CPU/OS
// or this model's shapes cannot run, and validates the rest in order against the reference on
// the model's shapes; the first that passes is used. A named backend is validated too and the
// selection throws Error (naming the flag, backend, shape and error figure) if it fails.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "formats/model_config.h"
#include "formats/quant_scheme.h"
#include "kernels/kernels.h"
#include "kernels/selection_report.h"
#include "kernels/shapes.h"
#include "util/cpu_features.h"

namespace fp4serve::kernels {

struct BackendOptions {
  std::string dense = "auto";      // --dense-backend
  std::string fp4_gemm = "auto";   // --fp4-gemm-backend
  std::string moe = "auto";        // --moe-backend
  std::string attention = "auto";  // --attention-backend
  std::string linear_attention = "auto";  // --linear-attention-backend
  Fp4Semantics semantics = Fp4Semantics::W4A16;
  // Let auto pick backends that round activations to bf16 (AMX prefill): faster, but no longer
  // token-for-token equal to the fp32 reference. A backend named explicitly is always allowed.
  bool allow_bf16_activations = false;
  // Backends that quantize activations to int8 per 16-element block (avx512-int8, avx2-int8:
  // 1.2-2.5x the fp32-class kernels where there is no AMX; logits about 1 % off the fp32
  // reference). `auto` takes them for checkpoints calibrated for 4-bit activations
  // (ShapeSet::fp4_activations_calibrated), whose published accuracy already assumes coarser
  // activations than int8; `allow_int8_activations` extends that to weight-only checkpoints and
  // `exact_activations` keeps the fp32 class for every checkpoint.
  bool allow_int8_activations = false;
  bool exact_activations = false;
  // The KV cache's element type (--kv-cache-dtype): attention backends are validated on a cache
  // of this type (select_kernels sets it on every attention shape). F32, F16 or BF16.
  DType kv_cache_dtype = DType::F32;
  std::uint64_t seed = 0;          // validation inputs; 0 draws a fresh one (reported)
  bool validate_all = false;       // also validate candidates after the first that passes (doctor)
  std::optional<std::string> inject_faults;  // unset: read FP4SERVE_INJECT_FAULT
  std::optional<CpuFeatures> cpu;            // unset: this machine's probe (tests simulate others)
  // A non-finite event within this many seconds of a passing re-validation is only counted:
  // a model whose weights themselves overflow must not stall every request on re-validation.
  double revalidate_interval_s = 10.0;

  const std::string& requested(OpFamily family) const;
};

struct GuardOutcome {
  bool revalidated = false;      // false when skipped (interval) or nothing is in use
  bool kernels_changed = false;  // kernels() differs now: refresh the model's KernelSet
  bool healthy = true;           // every family in use has a backend that passed
  std::vector<std::string> actions;  // one line per family, for the log
};

class KernelSelection {
 public:
  ~KernelSelection();
  KernelSet kernels() const;
  SelectionReport report() const;
  std::uint64_t generation() const;  // increments whenever kernels() changes
  GuardCounters counters() const;

  // The engine saw non-finite output (logits) computed with kernels(): mark every backend in
  // use suspect, re-validate each on fresh inputs, and under `auto` fall back to the next
  // candidate that passes. Never throws for a failed backend; `healthy` says whether serving
  // can go on. Thread-safe.
  GuardOutcome report_non_finite(const std::string& where);

 private:
  friend std::unique_ptr<KernelSelection> select_kernels(const BackendOptions&, const ShapeSet&);
  KernelSelection();
  struct State;
  std::unique_ptr<State> s_;
  mutable std::mutex mu_;
};

std::unique_ptr<KernelSelection> select_kernels(const BackendOptions& options, const ShapeSet& shapes);
// Shapes from the loaded checkpoint (model_shapes.h).
std::unique_ptr<KernelSelection> select_kernels(const BackendOptions& options, const ModelConfig& config,
                                                const ResolvedQuantization& quantization);

// Backend names valid for a family's flag ("auto" plus the compiled backends implementing it).
std::vector<std::string> backend_choices(OpFamily family);

}  // namespace fp4serve::kernels
