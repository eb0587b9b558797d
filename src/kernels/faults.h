#pragma once
// Deliberately broken backends, for proving that validation and the run-time guard catch them.
// FP4SERVE_INJECT_FAULT=<backend>[/<family>]:<kind>[:<calls>][,...]
//   backend: a compiled backend name; family (optional): dense, fp4-gemm, moe, attention,
//            linear-attention
//   kinds:   nan            one output element is NaN
//            zeros          the output is all zeros
//            nibble-swap    NVFP4 (and FP8) bytes read with high and low nibble exchanged; BF16/F16
//                           elements byte-swapped, F32 halves swapped; attention: K read with
//                           neighbouring elements exchanged
//            no-block-scale NVFP4 block scales read as 1.0; FP8 per-tensor scale ignored;
//                           unscaled weights: a dropped 0.5 factor (output doubled);
//                           attention: softmax scale ignored
//            (linear attention: nibble-swap reverses the conv taps and swaps neighbouring key
//            elements of the delta rule; no-block-scale doubles the conv output and drops the
//            delta rule's decay)
//            tail           output rows past the last full M tile are left unwritten (only when
//                           M has at least one full tile, so M = 1 still passes)
//            late-nan       like nan, but only after <calls> (default 0) calls made outside
//                           validation: a backend that passes at start and breaks under load
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.h"

namespace fp4serve::kernels {

enum class FaultKind { Nan, Zeros, NibbleSwap, NoBlockScale, Tail, LateNan };
std::string_view fault_kind_name(FaultKind kind);

struct FaultSpec {
  std::string backend;
  std::optional<OpFamily> family;  // none: every family of the backend
  FaultKind kind = FaultKind::Nan;
  std::int64_t after_calls = 0;    // late-nan only
  std::string text() const;        // as written in the variable
};

// Parses the variable's value; throws Error naming the bad entry (unknown backend, family, kind).
std::vector<FaultSpec> parse_fault_specs(std::string_view text);
// The specs that apply to `backend`'s `family`.
std::vector<FaultSpec> faults_for(const std::vector<FaultSpec>& specs, std::string_view backend, OpFamily family);

// While alive on a thread, kernel calls on that thread count as validation (late-nan stays
// dormant and does not count them).
class ValidationScope {
 public:
  ValidationScope();
  ~ValidationScope();
  ValidationScope(const ValidationScope&) = delete;
  ValidationScope& operator=(const ValidationScope&) = delete;
  static bool active();
};

// Wraps one family implementation with faults; the returned FamilyImpl points at kernels owned
// by `holder`, which must outlive it.
struct FaultHolder {
  virtual ~FaultHolder() = default;
};
FamilyImpl wrap_with_faults(const FamilyImpl& impl, OpFamily family, const std::vector<FaultSpec>& faults,
                            std::unique_ptr<FaultHolder>& holder);

}  // namespace fp4serve::kernels
